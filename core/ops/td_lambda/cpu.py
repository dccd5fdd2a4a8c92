"""TD(λ) returns as a compiled CPU loop (absent inputs are ``None``; see gae/cpu.py)."""
from ..._cpu import grid, njit, prange, step_coefs, step_ends


@njit
def td_lambda_loop(r, v, v_next, boot, term, trunc, gammas, lmbdas, gamma, lmbda, gamma_lmbda, one, out):
    T, Bh, Bl = grid(r)
    zero = one - one
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
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                alpha = r[t, i, j] + g * nu * (one - lam * kappa) * vn
                last = out[t + 1, i, j] if not last_step else zero
                out[t, i, j] = alpha + gl * kappa * last


def run(layout, arrays, scalars, outs, dtype):
    r, v, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    td_lambda_loop(r, v, nv, boot, term, trunc, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), dtype(1),
                   *outs)


@njit
def td_lambda_masked_loop(r, w, boot, term, mask, gammas, lmbdas, gamma, lmbda, gamma_lmbda, one, out):
    """With a step-skip mask: ``w`` holds the next kept values ``W_t``, and ``G_T`` is the bootstrap."""
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        for t in range(T - 1, -1, -1):
            for j in range(Bl):
                wn = zero
                if t < T - 1:
                    wn = w[t + 1, i, j]
                else:
                    if boot is not None:
                        wn = boot[0, i, j]
                last = out[t + 1, i, j] if t < T - 1 else wn
                if mask[t, i, j] != 0:
                    nu = one
                    if term is not None:
                        if term[t, i, j] != 0:
                            nu = zero
                    g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                    out[t, i, j] = r[t, i, j] + g * nu * (one - lam) * wn + gl * nu * last
                else:
                    out[t, i, j] = last


def run_masked(layout, arrays, scalars, outs, dtype):
    r, v, w, boot, term, mask, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    td_lambda_masked_loop(r, w, boot, term, mask, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), dtype(1),
                          *outs)
