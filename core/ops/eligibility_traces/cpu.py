"""Eligibility traces as a compiled CPU loop."""
from ..._cpu import coef, njit, no_flags


@njit
def traces_loop(x, dones, gamma, lmbda, gamma_lmbda, per_step, init, has_init, one, out):
    T, Bh, Bl = x.shape
    zero = one - one
    for t in range(T):
        for i in range(Bh):
            for j in range(Bl):
                if t == 0:
                    prev = init[0, i, j] if has_init else zero
                    beta = one
                else:
                    prev = out[t - 1, i, j]
                    gl = gamma[t - 1, i, j] * lmbda[t - 1, i, j] if per_step else gamma_lmbda
                    beta = gl * (zero if dones[t - 1, i, j] != 0 else one)
                out[t, i, j] = x[t, i, j] + beta * prev


def run(layout, arrays, scalars, outs, dtype):
    x, dones, g, lam, init = arrays
    gamma, lmbda, gamma_lmbda = scalars
    has_init = init is not None
    traces_loop(
        x, no_flags(layout) if dones is None else dones, coef(layout, g, gamma, dtype), coef(layout, lam, lmbda, dtype),
        dtype(gamma_lmbda), g is not None or lam is not None,
        init if has_init else coef(layout, None, 0, dtype)[:1], has_init, dtype(1), *outs,
    )
