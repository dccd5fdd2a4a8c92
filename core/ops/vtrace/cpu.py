"""V-trace as compiled CPU loops (absent inputs are ``None``; see gae/cpu.py), which take
``ρ_t = exp(log ρ_t)`` at each step (``step_exp``)."""
import numpy as np

from ..._cpu import grid, nan_where_unbounded, njit, prange, step_ends, step_exp


@njit
def vtrace_loop(r, v, log_rhos, v_next, boot, term, trunc, gammas, lmbdas, gamma, lmbda,
                rho_clip, c_clip, pg_rho_clip, one, vs, pg):
    T, Bh, Bl = grid(r)
    zero = one - one
    vs_minus_v = np.zeros_like(r[0])
    for i in prange(Bh):
        for k in range(T):  # ascending, as in gae_loop
            t = T - 1 - k
            last_step = k == 0
            for j in range(Bl):
                if v_next is not None:
                    vn = v_next[t, i, j]
                else:  # nested checks, so numba prunes whichever of v and boot is None
                    vn = zero
                    if boot is not None:
                        if last_step:
                            vn = boot[0, i, j]
                    if v is not None:
                        if not last_step:
                            vn = v[t + 1, i, j]
                nu, kappa = step_ends(term, trunc, t, i, j, last_step, zero, one)
                inside = kappa != zero
                g = gamma
                if gammas is not None:
                    g = gammas[t, i, j]
                lam = lmbda
                if lmbdas is not None:
                    lam = lmbdas[t, i, j]
                rho = step_exp(log_rhos[t, i, j])
                rho_bar = min(rho, rho_clip)
                c = lam * min(rho, c_clip)
                delta = rho_bar * (r[t, i, j] + g * vn * nu - v[t, i, j])
                last = vs_minus_v[i, j] if not last_step else zero
                beta = g * c * kappa
                a = nan_where_unbounded(delta, beta) + beta * last
                vs_minus_v[i, j] = a
                vs[t, i, j] = v[t, i, j] + a
                rho_pg = min(rho, pg_rho_clip)
                v_ahead = v[t + 1, i, j] if inside else vn
                base = nan_where_unbounded(rho_pg * (r[t, i, j] + g * nu * v_ahead - v[t, i, j]), rho_pg)
                pg[t, i, j] = base + rho_pg * (g * nu) * last if inside else base


def run(layout, arrays, scalars, outs, dtype):
    r, v, log_rho, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, rho_clip, c_clip, pg_rho_clip = scalars
    vtrace_loop(r, v, log_rho, nv, boot, term, trunc, g, lam, dtype(gamma), dtype(lmbda),
                dtype(rho_clip), dtype(c_clip), dtype(pg_rho_clip), dtype(1), *outs)


@njit
def vtrace_backward_loop(grad_vs, grad_pg, r, v, log_rhos, v_next, boot, term, trunc, gammas, lmbdas, vs, gamma, lmbda,
                         rho_clip, c_clip, pg_rho_clip, one, g_r, g_v, g_rho, g_vn, g_gamma, g_lmbda):
    """The adjoint forward in time, ``u_t = G_vs_t + κ_{t−1} γ_{t−1} ν_{t−1} w_{t−1} + β_{t−1} u_{t−1}``
    with ``w_t = p_t G_pg_t``, and every input's gradient at its step (kernel.py's backward)."""
    T, Bh, Bl = grid(r)
    zero = one - one
    u_prev = np.empty((Bh, Bl), r.dtype)
    beta_prev = np.empty((Bh, Bl), r.dtype)  # γ λ ĉ κ at t−1
    to_u = np.empty((Bh, Bl), r.dtype)  # κ γ ν w at t−1: pg_{t−1} read D_t
    v_from_w = np.empty((Bh, Bl), r.dtype)  # what step t−1 adds to ∂V_t through pg
    v_from_u = np.empty((Bh, Bl), r.dtype)  # ... and through δ, times u_{t−1}
    for i in prange(Bh):
        for t in range(T):
            last_step = t == T - 1
            for j in range(Bl):
                if v_next is not None:
                    vn = v_next[t, i, j]
                    v_ahead = zero if last_step else v[t + 1, i, j]
                else:
                    vn = zero
                    if boot is not None:
                        if last_step:
                            vn = boot[0, i, j]
                    if not last_step:
                        vn = v[t + 1, i, j]
                    v_ahead = vn
                nu, kappa = step_ends(term, trunc, t, i, j, last_step, zero, one)
                inside = kappa != zero
                g = gamma
                if gammas is not None:
                    g = gammas[t, i, j]
                lam = lmbda
                if lmbdas is not None:
                    lam = lmbdas[t, i, j]
                rho = step_exp(log_rhos[t, i, j])
                rho_bar = min(rho, rho_clip)
                c_hat = min(rho, c_clip)
                p = min(rho, pg_rho_clip)
                g_pg = zero
                if grad_pg is not None:
                    g_pg = grad_pg[t, i, j]
                u = zero
                if grad_vs is not None:
                    u = grad_vs[t, i, j]
                if t > 0:
                    u = u + to_u[i, j] + beta_prev[i, j] * u_prev[i, j]
                u_d = rho_bar * u
                w = p * g_pg
                d_ahead = zero
                v_hat = vn
                if inside:
                    d_ahead = vs[t + 1, i, j] - v_ahead
                    v_hat = vs[t + 1, i, j]
                if g_r is not None:
                    g_r[t, i, j] = u_d + w
                if g_v is not None:
                    gv = -u_d - w
                    if grad_vs is not None:
                        gv = gv + grad_vs[t, i, j]
                    if t > 0:
                        gv = gv + v_from_w[i, j] + v_from_u[i, j] * u_prev[i, j]
                    g_v[t, i, j] = gv
                if g_vn is not None and (v_next is not None or last_step):
                    g_vn[t, i, j] = g * nu * (u_d + (one - kappa) * w)
                if g_rho is not None:
                    y = r[t, i, j] + g * nu * vn - v[t, i, j]
                    z = r[t, i, j] + g * nu * v_hat - v[t, i, j]
                    acc = zero
                    if rho <= rho_clip:
                        acc = acc + u * y
                    if rho <= c_clip:
                        acc = acc + lam * g * kappa * u * d_ahead
                    if rho <= pg_rho_clip:
                        acc = acc + g_pg * z
                    g_rho[t, i, j] = rho * acc
                if g_gamma is not None:
                    g_gamma[t, i, j] = u_d * nu * vn + lam * c_hat * kappa * u * d_ahead + w * nu * v_hat
                if g_lmbda is not None:
                    g_lmbda[t, i, j] = g * c_hat * kappa * u * d_ahead
                u_prev[i, j] = u
                beta_prev[i, j] = g * (lam * c_hat) * kappa
                to_u[i, j] = kappa * g * nu * w
                if v_next is None:
                    v_from_w[i, j] = g * nu * w
                    v_from_u[i, j] = g * nu * rho_bar
                else:
                    v_from_w[i, j] = g * nu * kappa * w
                    v_from_u[i, j] = zero


def run_backward(layout, arrays, scalars, outs, dtype):
    grad_vs, grad_pg, r, v, log_rho, nv, boot, term, trunc, g, lam, vs = arrays
    gamma, lmbda, rho_clip, c_clip, pg_rho_clip = scalars
    vtrace_backward_loop(grad_vs, grad_pg, r, v, log_rho, nv, boot, term, trunc, g, lam, vs, dtype(gamma),
                         dtype(lmbda), dtype(rho_clip), dtype(c_clip), dtype(pg_rho_clip), dtype(1), *outs)
