"""Float64 reference for TD(λ) returns (docs/semantics.md, "TD(λ) returns")."""
import numpy as np

from ..._reference import as_f64, batch_f64, flags, from_time_first, time_first, value_after


def td_lambda(rewards, values, *, bootstrap_value=None, next_values=None, terminated=None, truncated=None,
              mask=None, gamma=0.99, lmbda=0.95, time_dim=0):
    shape = as_f64(rewards).shape
    if mask is not None:
        return _td_lambda_masked(rewards, values, bootstrap_value, terminated, mask, gamma, lmbda, time_dim, shape)
    r = time_first(rewards, time_dim)
    v_next = value_after(time_first(values, time_dim), time_first(next_values, time_dim), bootstrap_value)
    term = flags(terminated, time_dim, shape)
    done = term | flags(truncated, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    lam = time_first(lmbda, time_dim, shape)
    T = r.shape[0]

    out = np.empty_like(r)
    G = np.zeros(r.shape[1:])
    for t in reversed(range(T)):
        nu = 1.0 - term[t]
        kappa = 0.0 if t == T - 1 else 1.0 - done[t]
        G = r[t] + g[t] * nu * ((1.0 - lam[t] * kappa) * v_next[t] + lam[t] * kappa * G)
        out[t] = G
    return from_time_first(out, time_dim)


def _td_lambda_masked(rewards, values, bootstrap_value, terminated, mask, gamma, lmbda, time_dim, shape):
    """docs/semantics.md, "Skipped steps": a skipped step passes ``G`` and the next kept value through."""
    r = time_first(rewards, time_dim)
    v = time_first(values, time_dim)
    nu = 1.0 - flags(terminated, time_dim, shape)
    kept = flags(mask, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    lam = time_first(lmbda, time_dim, shape)

    out = np.empty_like(r)
    next_kept_value = batch_f64(bootstrap_value, r)
    G = next_kept_value
    for t in reversed(range(r.shape[0])):
        G = np.where(kept[t], r[t] + g[t] * nu[t] * ((1.0 - lam[t]) * next_kept_value + lam[t] * G), G)
        next_kept_value = np.where(kept[t], v[t], next_kept_value)
        out[t] = G
    return from_time_first(out, time_dim)
