"""The episodic prefix sum as a compiled CPU loop."""
from ..._cpu import constant, njit, no_flags


@njit
def cumsum_loop(x, dones, init, has_init, one, out):
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
                    beta = zero if dones[t - 1, i, j] != 0 else one
                out[t, i, j] = x[t, i, j] + beta * prev


def run(layout, arrays, scalars, outs, dtype):
    x, dones, init = arrays
    has_init = init is not None
    cumsum_loop(
        x, no_flags(layout) if dones is None else dones,
        init if has_init else constant(layout, 0, dtype)[:1], has_init, dtype(1), *outs,
    )
