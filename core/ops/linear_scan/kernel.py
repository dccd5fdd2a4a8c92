"""Triton coefficients for the plain linear scan and for its adjoint (the backward pass)."""
import triton
import triton.language as tl

from ..._triton.primitives import load, load_batch, load_coef, load_shifted, nan_where_unbounded, store


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t`` and ``β_t`` as given (``β`` may be one scalar; ``α_t`` is NaN where ``β_t`` is not finite)."""
    ALPHA, BETA, INIT = ins
    alpha = load(ALPHA, s[0], tile, ACC)
    beta = load_coef(BETA, s[1], tile, scalars[0], 0, T, ACC)
    return nan_where_unbounded(alpha, beta), beta, (alpha,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)


@triton.jit
def _adjoint_coeffs(ins, s, scalars, tile, T, SHIFT: tl.constexpr, ACC: tl.constexpr):
    """The adjoint of ``A_t = α_t + β_t A_{t∓1}`` runs the other way with ``β`` shifted by ``SHIFT``:
    ``Ā_t = g_t + β_{t+SHIFT} Ā_{t+SHIFT}``."""
    G, BETA, A, INIT = ins
    g = load(G, s[0], tile, ACC)
    beta = load_coef(BETA, s[1], tile, scalars[0], SHIFT, T, ACC)
    # A_{t-SHIFT}: the forward state that β_t multiplied, with `initial` past the edge.
    a_prev = load_shifted(A, s[2], tile, -SHIFT, T, ACC)
    if INIT is not None:
        if SHIFT == -1:
            edge = tile[0] == T - 1
        else:
            edge = tile[0] == 0
        a_prev = tl.where(edge, load_batch(INIT, s[3], tile, ACC), a_prev)
    return g, beta, (a_prev,)


@triton.jit
def adjoint_of_reverse_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    return _adjoint_coeffs(ins, s, scalars, tile, T, -1, ACC)


@triton.jit
def adjoint_of_forward_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    return _adjoint_coeffs(ins, s, scalars, tile, T, 1, ACC)


@triton.jit
def adjoint_emit(outs, s, scalars, A, A_in, keep, tile, T):
    """``∂L/∂α_t = Ā_t`` and ``∂L/∂β_t = Ā_t · A_{t∓1}``."""
    GRAD_ALPHA, GRAD_BETA = outs
    (a_prev,) = keep
    store(GRAD_ALPHA, s, tile, A)
    if GRAD_BETA is not None:
        store(GRAD_BETA, s, tile, A * a_prev)
