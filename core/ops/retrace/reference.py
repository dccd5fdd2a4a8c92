"""Float64 reference for Retrace(λ) (docs/semantics.md, "Retrace(λ)")."""
from collections import namedtuple

import numpy as np

from ..._reference import as_f64, flags, from_time_first, time_first, value_after

RetraceOutput = namedtuple("RetraceOutput", "q_targets advantages")


def retrace(rewards, q_taken, expected_q, log_rhos, *, bootstrap_value=None, next_expected_q=None,
            terminated=None, truncated=None, gamma=0.99, lmbda=1.0, c_clip=1.0, time_dim=0):
    shape = as_f64(rewards).shape
    r = time_first(rewards, time_dim)
    q = time_first(q_taken, time_dim)
    e = time_first(expected_q, time_dim)
    c = np.minimum(np.exp(time_first(log_rhos, time_dim)), c_clip)
    e_next = value_after(e, time_first(next_expected_q, time_dim), bootstrap_value)
    term = flags(terminated, time_dim, shape)
    done = term | flags(truncated, time_dim, shape)
    g = time_first(gamma, time_dim, shape)
    lam = time_first(lmbda, time_dim, shape)
    T = r.shape[0]

    q_ret = np.empty_like(r)
    for t in reversed(range(T)):
        nu = 1.0 - term[t]
        q_ret[t] = r[t] + g[t] * nu * e_next[t]
        if t < T - 1:
            kappa = 1.0 - done[t]
            beta = g[t] * lam[t] * kappa * c[t + 1]
            q_ret[t] = np.where(np.isfinite(beta), q_ret[t] + beta * (q_ret[t + 1] - q[t + 1]), np.nan)
    return RetraceOutput(from_time_first(q_ret, time_dim), from_time_first(q_ret - e, time_dim))


def retrace_from_q(rewards, q_values, actions, target_probs, behaviour_log_probs, *, bootstrap_value=None,
                   next_expected_q=None, terminated=None, truncated=None, gamma=0.99, lmbda=1.0, c_clip=1.0,
                   time_dim=0):
    q_table = as_f64(q_values)
    probs = as_f64(target_probs)
    index = np.asarray(actions.cpu() if hasattr(actions, "cpu") else actions)[..., None]
    q_taken = np.take_along_axis(q_table, index, -1)[..., 0]
    expected_q = (q_table * probs).sum(-1)
    log_rhos = np.log(np.take_along_axis(probs, index, -1)[..., 0]) - as_f64(behaviour_log_probs)
    return retrace(rewards, q_taken, expected_q, log_rhos, bootstrap_value=bootstrap_value,
                   next_expected_q=next_expected_q, terminated=terminated, truncated=truncated, gamma=gamma,
                   lmbda=lmbda, c_clip=c_clip, time_dim=time_dim)
