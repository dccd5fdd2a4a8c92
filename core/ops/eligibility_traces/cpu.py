"""Eligibility traces as a compiled CPU loop (absent inputs are ``None``; see gae/cpu.py)."""
import numpy as np

from ..._cpu import njit, prange


@njit
def traces_loop(x, dones, gammas, lmbdas, gamma, lmbda, gamma_lmbda, init, one, out):
    T, Bh, Bl = x.shape
    zero = one - one
    carry = np.empty((Bh, Bl), x.dtype)  # e_{t-1} (see _cpu)
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
                    g = gamma
                    lam = lmbda
                    gl = gamma_lmbda
                    if gammas is not None:
                        g = gammas[t - 1, i, j]
                        gl = g * lam
                    if lmbdas is not None:
                        lam = lmbdas[t - 1, i, j]
                        gl = g * lam
                    ended = False
                    if dones is not None:
                        ended = dones[t - 1, i, j] != 0
                    beta = gl * (zero if ended else one)
                carry[i, j] = x[t, i, j] + beta * prev
                out[t, i, j] = carry[i, j]


def run(layout, arrays, scalars, outs, dtype):
    x, dones, g, lam, init = arrays
    gamma, lmbda, gamma_lmbda = scalars
    traces_loop(x, dones, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), init, dtype(1), *outs)
