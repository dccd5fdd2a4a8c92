"""Float64 reference for eligibility traces (docs/semantics.md, "Eligibility traces")."""
import numpy as np

from ..._reference import as_f64, batch_f64, flags, from_time_first, time_first


def eligibility_traces(x, *, dones, gamma, lmbda, initial=None, time_dim=0):
    shape = as_f64(x).shape
    xs = time_first(x, time_dim)
    ended = flags(dones, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    lam = time_first(lmbda, time_dim, shape)

    out = np.empty_like(xs)
    e = batch_f64(initial, xs)
    for t in range(xs.shape[0]):
        if t > 0:
            e = g[t - 1] * lam[t - 1] * (1.0 - ended[t - 1]) * e
        e = xs[t] + e
        out[t] = e
    return from_time_first(out, time_dim)
