"""GAE as a compiled CPU loop, in the order of Stable-Baselines3's and CleanRL's loops.

Absent inputs arrive as ``None``: numba compiles a version for each combination and prunes
the branches, so the loop over environments has no stand-in arrays to read and vectorises.
"""
from ..._cpu import grid, njit, prange, step_coefs, step_ends


@njit
def gae_loop(r, v, v_next, boot, term, trunc, gammas, lmbdas, gamma, lmbda, gamma_lmbda, one, adv, ret):
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        # an ascending counter and one test for the last step: 1.2-1.4x faster than
        # range(T - 1, -1, -1) with tests of t on rows of 8-64 environments
        for k in range(T):
            t = T - 1 - k
            last_step = k == 0
            for j in range(Bl):
                if v_next is not None:
                    vn = v_next[t, i, j]
                elif last_step:
                    vn = zero
                    if boot is not None:
                        vn = boot[0, i, j]
                else:
                    vn = v[t + 1, i, j]
                nu, kappa = step_ends(term, trunc, t, i, j, last_step, zero, one)
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                delta = r[t, i, j] + g * vn * nu - v[t, i, j]
                last = zero if last_step else adv[t + 1, i, j]
                a = delta + gl * kappa * last
                adv[t, i, j] = a
                ret[t, i, j] = a + v[t, i, j]


def run(layout, arrays, scalars, outs, dtype):
    r, v, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    gae_loop(r, v, nv, boot, term, trunc, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), dtype(1), *outs)


@njit
def gae_masked_loop(r, v, w, boot, term, mask, gammas, lmbdas, gamma, lmbda, gamma_lmbda, one, adv, ret):
    """With a step-skip mask: ``w`` holds the next kept values ``W_t`` (docs/semantics.md)."""
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        for t in range(T - 1, -1, -1):
            for j in range(Bl):
                last = zero
                wn = zero
                if t < T - 1:
                    last = adv[t + 1, i, j]
                    wn = w[t + 1, i, j]
                else:
                    if boot is not None:
                        wn = boot[0, i, j]
                if mask[t, i, j] != 0:
                    nu = one
                    if term is not None:
                        if term[t, i, j] != 0:
                            nu = zero
                    g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                    a = r[t, i, j] + g * wn * nu - v[t, i, j] + gl * nu * last
                else:
                    a = last
                adv[t, i, j] = a
                ret[t, i, j] = a + v[t, i, j]


def run_masked(layout, arrays, scalars, outs, dtype):
    r, v, w, boot, term, mask, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    gae_masked_loop(r, v, w, boot, term, mask, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), dtype(1),
                    *outs)
