"""The linear scan and its adjoint as compiled CPU loops (a scalar ``β`` arrives as
``betas=None``; see gae/cpu.py)."""
import numpy as np

from ..._cpu import grid, nan_where_unbounded, njit, prange


@njit
def scan_loop(alpha, betas, beta, init, reverse, one, out):
    T, Bh, Bl = grid(alpha)
    zero = one - one
    carry = np.empty((Bh, Bl), alpha.dtype)  # A_{t-1}, for a forward scan (see _cpu)
    for i in prange(Bh):
        for k in range(T):
            t = T - 1 - k if reverse else k
            for j in range(Bl):
                if k > 0:
                    prev = out[t + 1, i, j] if reverse else carry[i, j]
                else:
                    prev = zero
                    if init is not None:
                        prev = init[0, i, j]
                b = beta
                if betas is not None:
                    b = betas[t, i, j]
                a = nan_where_unbounded(alpha[t, i, j], b) + b * prev
                if not reverse:
                    carry[i, j] = a
                out[t, i, j] = a


@njit
def adjoint_loop(g, betas, beta, A, init, reverse, one, grad_alpha, grad_beta):
    """Backward of ``scan_loop(..., reverse)``: ``Ā_t = g_t + β_{t+s} Ā_{t+s}`` with
    ``s = -1`` for a reverse scan (so it runs forward), ``∂β_t = Ā_t A_{t-s}``."""
    T, Bh, Bl = grid(g)
    zero = one - one
    shift = -1 if reverse else 1
    carry = np.empty((Bh, Bl), g.dtype)  # Ā_{t-1}, where the adjoint runs forward (see _cpu)
    for i in prange(Bh):
        for k in range(T):
            t = k if reverse else T - 1 - k
            for j in range(Bl):
                acc = g[t, i, j]
                if k > 0:
                    b = beta
                    if betas is not None:
                        b = betas[t + shift, i, j]
                    acc = acc + b * (carry[i, j] if reverse else grad_alpha[t + shift, i, j])
                if reverse:
                    carry[i, j] = acc
                grad_alpha[t, i, j] = acc
                if grad_beta is not None:
                    p = t - shift
                    a_prev = zero
                    if 0 <= p < T:
                        a_prev = A[p, i, j]
                    elif init is not None:
                        a_prev = init[0, i, j]
                    grad_beta[t, i, j] = acc * a_prev


def run_scan(layout, arrays, scalars, outs, dtype, *, reverse):
    alpha, betas, init = arrays
    (beta,) = scalars
    scan_loop(alpha, betas, dtype(beta), init, reverse, dtype(1), outs[0])


def run_adjoint(layout, arrays, scalars, outs, dtype, *, reverse):
    g, betas, A, init = arrays
    (beta,) = scalars
    adjoint_loop(g, betas, dtype(beta), A, init, reverse, dtype(1), *outs)
