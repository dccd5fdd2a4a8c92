"""Retrace(λ) as a compiled CPU loop."""
import numpy as np

from ..._cpu import exp, njit, prange, step_coefs


@njit
def retrace_loop(r, q, e, rhos, e_next, boot, term, trunc, gammas, lmbdas, gamma, lmbda, gamma_lmbda,
                 c_clip, one, q_ret, adv):
    T, Bh, Bl = r.shape
    zero = one - one
    for i in prange(Bh):
        for k in range(T):  # ascending, as in gae_loop
            t = T - 1 - k
            last_step = k == 0
            for j in range(Bl):
                if e_next is not None:
                    en = e_next[t, i, j]
                else:  # nested, so numba prunes the bootstrap read when it is None
                    en = zero
                    if boot is not None:
                        if last_step:
                            en = boot[0, i, j]
                    if not last_step:
                        en = e[t + 1, i, j]
                terminated = False
                if term is not None:
                    terminated = term[t, i, j] != 0
                ended = terminated
                if trunc is not None:
                    ended = ended or trunc[t, i, j] != 0
                nu = zero if terminated else one
                kappa = zero if (ended or last_step) else one
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                if not last_step:
                    c_ahead = min(rhos[t + 1, i, j], c_clip)
                    q_ahead = q[t + 1, i, j]
                    last = q_ret[t + 1, i, j]
                else:
                    c_ahead = zero
                    q_ahead = zero
                    last = zero
                trace = gl * kappa * c_ahead
                alpha = r[t, i, j] + g * nu * en - trace * q_ahead
                a = alpha + trace * last
                q_ret[t, i, j] = a
                adv[t, i, j] = a - e[t, i, j]


def run(layout, arrays, scalars, outs, dtype):
    r, q, e, log_rho, ne, boot, term, trunc, g, lam = arrays
    gamma, lmbda, gamma_lmbda, c_clip = scalars
    rhos = exp(log_rho)
    retrace_loop(r, q, e, rhos, ne, boot, term, trunc, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda),
                 dtype(c_clip), dtype(1), *outs)


@njit
def table_stats(q_values, probs, actions, mu, q, e, log_rho):
    """``q_t``, ``E_t`` and ``log ρ_t`` from the action table (NaN for an action out of range)."""
    T, Bh, Bl, A = q_values.shape
    for i in prange(Bh):
        for t in range(T):
            for j in range(Bl):
                acc = q_values[t, i, j, 0] * probs[t, i, j, 0]
                for a in range(1, A):
                    acc += q_values[t, i, j, a] * probs[t, i, j, a]
                e[t, i, j] = acc
                a_t = actions[t, i, j]
                if 0 <= a_t < A:
                    q[t, i, j] = q_values[t, i, j, a_t]
                    log_rho[t, i, j] = np.log(probs[t, i, j, a_t]) - mu[t, i, j]
                else:
                    q[t, i, j] = np.nan
                    log_rho[t, i, j] = np.nan


def run_table(layout, arrays, scalars, outs, dtype):
    r, q_values, probs, actions, mu, ne, boot, term, trunc, g, lam = arrays
    q = np.empty(r.shape, dtype)
    e = np.empty(r.shape, dtype)
    log_rho = np.empty(r.shape, dtype)
    table_stats(q_values, probs, actions, mu, q, e, log_rho)
    run(layout, [r, q, e, log_rho, ne, boot, term, trunc, g, lam], scalars, outs, dtype)
