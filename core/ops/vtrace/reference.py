"""Float64 reference for V-trace (docs/semantics.md, "V-trace")."""
from collections import namedtuple

import numpy as np

from ..._reference import as_f64, flags, from_time_first, time_first, value_after

VTraceOutput = namedtuple("VTraceOutput", "vs pg_advantages")


def vtrace(rewards, values, log_rhos, *, bootstrap_value=None, next_values=None, terminated=None,
           truncated=None, gamma=0.99, lmbda=1.0, rho_clip=1.0, c_clip=1.0, pg_rho_clip=1.0, time_dim=0):
    shape = as_f64(rewards).shape
    r = time_first(rewards, time_dim)
    v = time_first(values, time_dim)
    rho = np.exp(time_first(log_rhos, time_dim))
    v_next = value_after(v, time_first(next_values, time_dim), bootstrap_value)
    term = flags(terminated, time_dim, shape)
    done = term | flags(truncated, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    lam = time_first(lmbda, time_dim, shape)
    T = r.shape[0]

    rho_bar = np.minimum(rho, rho_clip)
    c = lam * np.minimum(rho, c_clip)
    vs = np.empty_like(r)
    vs_minus_v = np.zeros(r.shape[1:])
    for t in reversed(range(T)):
        nu = 1.0 - term[t]
        kappa = 0.0 if t == T - 1 else 1.0 - done[t]
        delta = rho_bar[t] * (r[t] + g[t] * v_next[t] * nu - v[t])
        beta = g[t] * c[t] * kappa
        vs_minus_v = np.where(np.isfinite(beta), delta, np.nan) + beta * vs_minus_v
        vs[t] = v[t] + vs_minus_v

    pg = np.empty_like(r)
    for t in range(T):
        nu = 1.0 - term[t]
        inside = (t < T - 1) & ~done[t]
        v_hat = np.where(inside, vs[min(t + 1, T - 1)], v_next[t])
        rho_pg = np.minimum(rho[t], pg_rho_clip)
        pg[t] = np.where(np.isfinite(rho_pg), rho_pg * (r[t] + g[t] * nu * v_hat - v[t]), np.nan)
    return VTraceOutput(from_time_first(vs, time_dim), from_time_first(pg, time_dim))
