"""The linear scan and its adjoint as compiled CPU loops."""
from ..._cpu import constant, njit


@njit
def scan_loop(alpha, beta, init, has_init, reverse, one, out):
    T, Bh, Bl = alpha.shape
    zero = one - one
    for k in range(T):
        t = T - 1 - k if reverse else k
        for i in range(Bh):
            for j in range(Bl):
                if k > 0:
                    prev = out[t + 1, i, j] if reverse else out[t - 1, i, j]
                elif has_init:
                    prev = init[0, i, j]
                else:
                    prev = zero
                out[t, i, j] = alpha[t, i, j] + beta[t, i, j] * prev


@njit
def adjoint_loop(g, beta, A, init, has_init, reverse, one, grad_alpha, grad_beta, has_grad_beta):
    """Backward of ``scan_loop(..., reverse)``: ``Ā_t = g_t + β_{t+s} Ā_{t+s}`` with
    ``s = -1`` for a reverse scan (so it runs forward), ``∂β_t = Ā_t A_{t-s}``."""
    T, Bh, Bl = g.shape
    zero = one - one
    shift = -1 if reverse else 1
    for k in range(T):
        t = k if reverse else T - 1 - k
        for i in range(Bh):
            for j in range(Bl):
                acc = g[t, i, j]
                if k > 0:
                    acc = acc + beta[t + shift, i, j] * grad_alpha[t + shift, i, j]
                grad_alpha[t, i, j] = acc
                if has_grad_beta:
                    p = t - shift
                    if 0 <= p < T:
                        a_prev = A[p, i, j]
                    elif has_init:
                        a_prev = init[0, i, j]
                    else:
                        a_prev = zero
                    grad_beta[t, i, j] = acc * a_prev


def run_scan(layout, arrays, scalars, outs, dtype, *, reverse):
    alpha, beta, init = arrays
    (beta_value,) = scalars
    beta = constant(layout, beta_value, dtype) if beta is None else beta
    has_init = init is not None
    init = init if has_init else constant(layout, 0, dtype)[:1]
    scan_loop(alpha, beta, init, has_init, reverse, dtype(1), outs[0])


def run_adjoint(layout, arrays, scalars, outs, dtype, *, reverse):
    g, beta, A, init = arrays
    (beta_value,) = scalars
    beta = constant(layout, beta_value, dtype) if beta is None else beta
    has_init = init is not None
    init = init if has_init else constant(layout, 0, dtype)[:1]
    grad_alpha, grad_beta = outs
    has_grad_beta = grad_beta is not None
    grad_beta = grad_beta if has_grad_beta else grad_alpha
    adjoint_loop(g, beta, A, init, has_init, reverse, dtype(1), grad_alpha, grad_beta, has_grad_beta)
