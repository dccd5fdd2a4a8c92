"""The backward of GAE, TD(λ) and discounted returns as a compiled CPU loop: the adjoint
``u_t = G_t + β_{t−1} u_{t−1}`` forward in time, every input's gradient written at its
step (the equations are in ``kernel.py``; absent inputs are ``None``, see gae/cpu.py)."""
import numpy as np

from ..._cpu import grid, njit, prange, step_coefs, step_ends


@njit
def value_backward_loop(grad, grad_ret, v, v_next, boot, term, trunc, gammas, lmbdas, state, gamma, lmbda,
                        gamma_lmbda, is_gae, one, g_r, g_v, g_vn, g_gamma, g_lmbda):
    T, Bh, Bl = grid(state)
    zero = one - one
    u_prev = np.empty((Bh, Bl), state.dtype)  # u_{t−1}
    beta_prev = np.empty((Bh, Bl), state.dtype)  # β_{t−1}
    d_prev = np.empty((Bh, Bl), state.dtype)  # ∂V'_{t−1}/∂u_{t−1} = γ ν w at t−1, where V'_{t−1} is V_t
    for i in prange(Bh):
        for t in range(T):
            last_step = t == T - 1
            for j in range(Bl):
                nu, kappa = step_ends(term, trunc, t, i, j, last_step, zero, one)
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                w = one if is_gae else one - lam * kappa
                G = zero
                if grad is not None:
                    G = grad[t, i, j]
                g_returns = zero
                if grad_ret is not None:
                    g_returns = grad_ret[t, i, j]
                    G = G + g_returns
                u = G
                if t > 0:
                    u = G + beta_prev[i, j] * u_prev[i, j]
                d_vn = g * nu * w
                if g_r is not None:
                    g_r[t, i, j] = u
                if g_v is not None:
                    from_prev = zero
                    if t > 0 and v_next is None:
                        from_prev = d_prev[i, j] * u_prev[i, j]
                    if is_gae:
                        g_v[t, i, j] = g_returns - u + from_prev
                    else:
                        g_v[t, i, j] = from_prev
                if g_vn is not None and (v_next is not None or last_step):
                    g_vn[t, i, j] = d_vn * u
                if g_gamma is not None or g_lmbda is not None:
                    if v_next is not None:
                        vn = v_next[t, i, j]
                    elif last_step:
                        vn = zero
                        if boot is not None:
                            vn = boot[0, i, j]
                    elif v is not None:
                        vn = v[t + 1, i, j]
                    else:
                        vn = zero
                    a_next = zero if last_step else state[t + 1, i, j]
                    if g_gamma is not None:
                        g_gamma[t, i, j] = u * (nu * w * vn + lam * kappa * a_next)
                    if g_lmbda is not None:
                        if is_gae:
                            g_lmbda[t, i, j] = u * g * kappa * a_next
                        else:
                            g_lmbda[t, i, j] = u * g * kappa * (a_next - nu * vn)
                u_prev[i, j] = u
                beta_prev[i, j] = gl * kappa
                d_prev[i, j] = d_vn


def run(layout, arrays, scalars, outs, dtype, *, is_gae):
    gamma, lmbda, gamma_lmbda = scalars
    value_backward_loop(*arrays, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), is_gae, dtype(1), *outs)
