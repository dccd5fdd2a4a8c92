"""Discounted returns as a compiled CPU loop (absent inputs are ``None``; see gae/cpu.py)."""
from ..._cpu import grid, njit, prange, step_ends


@njit
def discounted_loop(r, v_next, boot, term, trunc, gammas, gamma, one, out):
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        for t in range(T - 1, -1, -1):
            for j in range(Bl):
                vn = zero
                if v_next is not None:
                    vn = v_next[t, i, j]
                elif boot is not None:
                    if t == T - 1:
                        vn = boot[0, i, j]
                nu, kappa = step_ends(term, trunc, t, i, j, t == T - 1, zero, one)
                g = gamma
                if gammas is not None:
                    g = gammas[t, i, j]
                alpha = r[t, i, j] + g * nu * (one - kappa) * vn
                last = out[t + 1, i, j] if t < T - 1 else zero
                out[t, i, j] = alpha + g * kappa * last


def run(layout, arrays, scalars, outs, dtype):
    r, nv, boot, term, trunc, g = arrays
    (gamma,) = scalars
    discounted_loop(r, nv, boot, term, trunc, g, dtype(gamma), dtype(1), *outs)


@njit
def discounted_masked_loop(r, boot, term, mask, gammas, gamma, one, out):
    """With a step-skip mask; ``G_T`` is the bootstrap (0 when absent)."""
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        for t in range(T - 1, -1, -1):
            for j in range(Bl):
                last = zero
                if t < T - 1:
                    last = out[t + 1, i, j]
                else:
                    if boot is not None:
                        last = boot[0, i, j]
                if mask[t, i, j] != 0:
                    nu = one
                    if term is not None:
                        if term[t, i, j] != 0:
                            nu = zero
                    g = gamma
                    if gammas is not None:
                        g = gammas[t, i, j]
                    out[t, i, j] = r[t, i, j] + g * nu * last
                else:
                    out[t, i, j] = last


def run_masked(layout, arrays, scalars, outs, dtype):
    r, boot, term, mask, g = arrays
    (gamma,) = scalars
    discounted_masked_loop(r, boot, term, mask, g, dtype(gamma), dtype(1), *outs)
