"""Float64 reference of the discounted sum."""
import numpy as np

from rlscan._reference import as_f64, batch_f64, flags, from_time_first, time_first


def moving_sum(x, *, dones=None, gamma, initial=None, time_dim=0):
    shape = as_f64(x).shape
    xs = time_first(x, time_dim)
    ended = flags(dones, time_dim, shape)
    out = np.empty_like(xs)
    total = batch_f64(initial, xs)
    for t in range(xs.shape[0]):
        if t > 0:
            total = gamma * (1.0 - ended[t - 1]) * total
        total = xs[t] + total
        out[t] = total
    return from_time_first(out, time_dim)
