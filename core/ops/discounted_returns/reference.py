"""Float64 reference for discounted returns (docs/semantics.md, "Discounted returns")."""
import numpy as np

from ..._reference import as_f64, batch_f64, flags, from_time_first, time_first


def discounted_returns(rewards, *, bootstrap_value=None, next_values=None, terminated=None, truncated=None,
                       mask=None, gamma=0.99, time_dim=0):
    shape = as_f64(rewards).shape
    if mask is not None:
        return _discounted_masked(rewards, bootstrap_value, terminated, mask, gamma, time_dim, shape)
    r = time_first(rewards, time_dim)
    v_next = time_first(next_values, time_dim)
    if v_next is None:
        v_next = np.zeros_like(r)
        v_next[-1] = batch_f64(bootstrap_value, r)
    term = flags(terminated, time_dim, shape)
    done = term | flags(truncated, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    T = r.shape[0]

    out = np.empty_like(r)
    G = np.zeros(r.shape[1:])
    for t in reversed(range(T)):
        nu = 1.0 - term[t]
        kappa = 0.0 if t == T - 1 else 1.0 - done[t]
        G = r[t] + g[t] * nu * ((1.0 - kappa) * v_next[t] + kappa * G)
        out[t] = G
    return from_time_first(out, time_dim)


def _discounted_masked(rewards, bootstrap_value, terminated, mask, gamma, time_dim, shape):
    """docs/semantics.md, "Skipped steps": a skipped step passes ``G`` through; ``G_T`` is the bootstrap."""
    r = time_first(rewards, time_dim)
    nu = 1.0 - flags(terminated, time_dim, shape)
    kept = flags(mask, time_dim, shape)
    g = time_first(gamma, time_dim, shape)

    out = np.empty_like(r)
    G = batch_f64(bootstrap_value, r)
    for t in reversed(range(r.shape[0])):
        G = np.where(kept[t], r[t] + g[t] * nu[t] * G, G)
        out[t] = G
    return from_time_first(out, time_dim)
