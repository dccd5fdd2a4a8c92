"""Retrace(λ) as compiled CPU loops, which take ``exp(log ρ_t)`` at each step (``step_exp``)."""
import numpy as np

from ..._cpu import grid, nan_where_unbounded, njit, prange, step_coefs, step_ends, step_exp


@njit
def retrace_loop(r, q, e, log_rhos, e_next, boot, term, trunc, gammas, lmbdas, gamma, lmbda, gamma_lmbda,
                 c_clip, one, q_ret, adv):
    T, Bh, Bl = grid(r)
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
                nu, kappa = step_ends(term, trunc, t, i, j, last_step, zero, one)
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                if not last_step:
                    c_ahead = min(step_exp(log_rhos[t + 1, i, j]), c_clip)
                    q_ahead = q[t + 1, i, j]
                    last = q_ret[t + 1, i, j]
                else:
                    c_ahead = zero
                    q_ahead = zero
                    last = zero
                trace = gl * kappa * c_ahead
                alpha = nan_where_unbounded(r[t, i, j] + g * nu * en - trace * q_ahead, trace)
                a = alpha + trace * last
                q_ret[t, i, j] = a
                adv[t, i, j] = a - e[t, i, j]


def run(layout, arrays, scalars, outs, dtype):
    r, q, e, log_rho, ne, boot, term, trunc, g, lam = arrays
    gamma, lmbda, gamma_lmbda, c_clip = scalars
    retrace_loop(r, q, e, log_rho, ne, boot, term, trunc, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda),
                 dtype(c_clip), dtype(1), *outs)


@njit
def retrace_backward_loop(grad_q, grad_adv, q, e, log_rhos, e_next, boot, term, trunc, gammas, lmbdas, q_ret, gamma,
                          lmbda, gamma_lmbda, c_clip, one, g_r, g_q, g_e, g_rho, g_en, g_gamma, g_lmbda):
    """The adjoint forward in time, ``u_t = G_t + β_{t−1} u_{t−1}`` with ``β_t = γ_t λ_t κ_t ĉ_{t+1}``,
    and every input's gradient at its step (kernel.py's backward)."""
    T, Bh, Bl = grid(q)
    zero = one - one
    u_prev = np.empty((Bh, Bl), q.dtype)
    beta_prev = np.empty((Bh, Bl), q.dtype)
    glk_prev = np.empty((Bh, Bl), q.dtype)  # γ λ κ at t−1
    e_from_prev = np.empty((Bh, Bl), q.dtype)  # γ ν at t−1, where E'_{t−1} is E_t
    for i in prange(Bh):
        for t in range(T):
            last_step = t == T - 1
            for j in range(Bl):
                nu, kappa = step_ends(term, trunc, t, i, j, last_step, zero, one)
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                c_ahead = zero if last_step else min(step_exp(log_rhos[t + 1, i, j]), c_clip)
                g_adv = zero
                if grad_adv is not None:
                    g_adv = grad_adv[t, i, j]
                u = g_adv
                if grad_q is not None:
                    u = u + grad_q[t, i, j]
                u_in = zero
                if t > 0:
                    u_in = u_prev[i, j]
                    u = u + beta_prev[i, j] * u_in
                if g_r is not None:
                    g_r[t, i, j] = u
                if g_q is not None:
                    g_q[t, i, j] = zero if t == 0 else -beta_prev[i, j] * u_in
                if g_e is not None:
                    from_prev = zero
                    if t > 0 and e_next is None:
                        from_prev = e_from_prev[i, j] * u_in
                    g_e[t, i, j] = from_prev - g_adv
                if g_rho is not None:
                    rho = step_exp(log_rhos[t, i, j])
                    acc = zero
                    if t > 0 and rho <= c_clip:
                        acc = glk_prev[i, j] * rho * (q_ret[t, i, j] - q[t, i, j]) * u_in
                    g_rho[t, i, j] = acc
                if g_en is not None and (e_next is not None or last_step):
                    g_en[t, i, j] = g * nu * u
                if g_gamma is not None or g_lmbda is not None:
                    if e_next is not None:
                        en = e_next[t, i, j]
                    elif last_step:
                        en = zero
                        if boot is not None:
                            en = boot[0, i, j]
                    else:
                        en = e[t + 1, i, j]
                    gap_ahead = zero if kappa == zero else q_ret[t + 1, i, j] - q[t + 1, i, j]
                    if g_gamma is not None:
                        g_gamma[t, i, j] = u * (nu * en + lam * kappa * c_ahead * gap_ahead)
                    if g_lmbda is not None:
                        g_lmbda[t, i, j] = u * g * kappa * c_ahead * gap_ahead
                u_prev[i, j] = u
                beta_prev[i, j] = gl * kappa * c_ahead
                glk_prev[i, j] = gl * kappa
                e_from_prev[i, j] = g * nu


def run_backward(layout, arrays, scalars, outs, dtype):
    grad_q, grad_adv, q, e, log_rho, ne, boot, term, trunc, g, lam, q_ret = arrays
    gamma, lmbda, gamma_lmbda, c_clip = scalars
    retrace_backward_loop(grad_q, grad_adv, q, e, log_rho, ne, boot, term, trunc, g, lam, q_ret, dtype(gamma),
                          dtype(lmbda), dtype(gamma_lmbda), dtype(c_clip), dtype(1), *outs)


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
