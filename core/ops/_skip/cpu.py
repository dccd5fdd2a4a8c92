"""The next kept value as a compiled CPU loop (docs/semantics.md, "Skipped steps")."""
from ..._cpu import grid, njit, prange


@njit
def next_kept_loop(v, boot, mask, one, out):
    T, Bh, Bl = grid(v)
    zero = one - one
    for i in prange(Bh):
        for j in range(Bl):
            w = zero
            if boot is not None:
                w = boot[0, i, j]
            for t in range(T - 1, -1, -1):
                if mask[t, i, j] != 0:
                    w = v[t, i, j]
                out[t, i, j] = w


def run(layout, arrays, scalars, outs, dtype):
    v, boot, mask = arrays
    next_kept_loop(v, boot, mask, dtype(1), *outs)
