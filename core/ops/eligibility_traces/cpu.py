"""Eligibility traces as a compiled CPU loop (absent inputs are ``None``; see gae/cpu.py)."""
import numpy as np

from ..._cpu import grid, njit, prange, step_coefs


@njit
def traces_loop(x, dones, gammas, lmbdas, gamma, lmbda, gamma_lmbda, init, one, out):
    T, Bh, Bl = grid(x)
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


@njit
def traces_backward_loop(grad, dones, gammas, lmbdas, traces, gamma, lmbda, gamma_lmbda, one, g_x, g_init, g_gamma,
                         g_lmbda):
    """The adjoint in reverse, ``u_t = G_t + γ_t λ_t (1 − dones_t) u_{t+1}``; ``∂x_t = u_t``,
    ``∂initial = u_0``, ``∂γ_t = u_{t+1} λ_t (1 − dones_t) e_t``, ``∂λ_t = u_{t+1} γ_t (1 − dones_t) e_t``
    (kernel.py's ``backward_coeffs``; the episodic prefix sum's too, with ``γ λ = 1``)."""
    T, Bh, Bl = grid(grad)
    zero = one - one
    carry = np.empty((Bh, Bl), grad.dtype)  # u_{t+1}
    for i in prange(Bh):
        for k in range(T):
            t = T - 1 - k
            for j in range(Bl):
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                kept = one
                if dones is not None:
                    kept = zero if dones[t, i, j] != 0 else one
                u_next = zero if k == 0 else carry[i, j]
                u = grad[t, i, j] + gl * kept * u_next
                if g_x is not None:
                    g_x[t, i, j] = u
                if g_init is not None and t == 0:
                    g_init[t, i, j] = u
                if g_gamma is not None:
                    g_gamma[t, i, j] = u_next * lam * kept * traces[t, i, j]
                if g_lmbda is not None:
                    g_lmbda[t, i, j] = u_next * g * kept * traces[t, i, j]
                carry[i, j] = u


def run_backward(layout, arrays, scalars, outs, dtype):
    gamma, lmbda, gamma_lmbda = scalars
    traces_backward_loop(*arrays, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), dtype(1), *outs)
