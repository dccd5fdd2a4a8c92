"""The episodic prefix sum as a compiled CPU loop (absent inputs are ``None``; see gae/cpu.py)."""
import numpy as np

from ..._cpu import grid, njit, prange


@njit
def cumsum_loop(x, dones, init, one, out):
    T, Bh, Bl = grid(x)
    zero = one - one
    carry = np.empty((Bh, Bl), x.dtype)  # S_{t-1} (see _cpu)
    for i in prange(Bh):
        for t in range(T):
            for j in range(Bl):
                if t == 0:
                    prev = zero
                    if init is not None:
                        prev = init[0, i, j]
                    beta = one
                else:
                    prev = carry[i, j]
                    ended = False
                    if dones is not None:
                        ended = dones[t - 1, i, j] != 0
                    beta = zero if ended else one
                carry[i, j] = x[t, i, j] + beta * prev
                out[t, i, j] = carry[i, j]


def run(layout, arrays, scalars, outs, dtype):
    x, dones, init = arrays
    cumsum_loop(x, dones, init, dtype(1), *outs)
