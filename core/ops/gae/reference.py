"""Float64 reference for GAE (docs/semantics.md, "GAE")."""
from collections import namedtuple

import numpy as np

from ..._reference import as_f64, batch_f64, flags, from_time_first, time_first, value_after

GAEOutput = namedtuple("GAEOutput", "advantages returns")


def gae(rewards, values, *, bootstrap_value=None, next_values=None, terminated=None, truncated=None, mask=None,
        gamma=0.99, lmbda=0.95, value_lmbda=None, time_dim=0):
    if value_lmbda is not None:  # the advantages with λ, the returns with λ_value (rlscan.ops.gae.dual)
        kwargs = dict(bootstrap_value=bootstrap_value, next_values=next_values, terminated=terminated,
                      truncated=truncated, mask=mask, gamma=gamma, time_dim=time_dim)
        return GAEOutput(gae(rewards, values, lmbda=lmbda, **kwargs).advantages,
                         gae(rewards, values, lmbda=value_lmbda, **kwargs).returns)
    shape = as_f64(rewards).shape
    if mask is not None:
        return _gae_masked(rewards, values, bootstrap_value, terminated, mask, gamma, lmbda, time_dim, shape)
    r = time_first(rewards, time_dim)
    v = time_first(values, time_dim)
    v_next = value_after(v, time_first(next_values, time_dim), bootstrap_value)
    term = flags(terminated, time_dim, shape)
    done = term | flags(truncated, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    lam = time_first(lmbda, time_dim, shape)
    T = r.shape[0]

    adv = np.empty_like(r)
    next_adv = np.zeros(r.shape[1:])
    for t in reversed(range(T)):
        nu = 1.0 - term[t]
        kappa = 0.0 if t == T - 1 else 1.0 - done[t]
        delta = r[t] + g[t] * nu * v_next[t] - v[t]
        next_adv = delta + g[t] * lam[t] * kappa * next_adv
        adv[t] = next_adv
    return GAEOutput(from_time_first(adv, time_dim), from_time_first(adv + v, time_dim))


def _gae_masked(rewards, values, bootstrap_value, terminated, mask, gamma, lmbda, time_dim, shape):
    """docs/semantics.md, "Skipped steps": a skipped step passes ``Â`` and the next kept value through."""
    r = time_first(rewards, time_dim)
    v = time_first(values, time_dim)
    nu = 1.0 - flags(terminated, time_dim, shape)
    kept = flags(mask, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    lam = time_first(lmbda, time_dim, shape)

    adv = np.empty_like(r)
    next_adv = np.zeros(r.shape[1:])
    next_kept_value = batch_f64(bootstrap_value, r)
    for t in reversed(range(r.shape[0])):
        delta = r[t] + g[t] * nu[t] * next_kept_value - v[t]
        next_adv = np.where(kept[t], delta + g[t] * lam[t] * nu[t] * next_adv, next_adv)
        next_kept_value = np.where(kept[t], v[t], next_kept_value)
        adv[t] = next_adv
    return GAEOutput(from_time_first(adv, time_dim), from_time_first(adv + v, time_dim))
