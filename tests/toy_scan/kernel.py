"""The discounted sum's coefficients for the scan engine."""
import triton
import triton.language as tl

from rlscan._triton.primitives import load, load_flag, scalar, store


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = x_t``; ``β_t = γ (1 − dones_{t−1})``, and ``β_0 = 1`` (``initial`` carries in)."""
    X, DONES, INIT = ins
    x = load(X, s[0], tile, ACC)
    ended = load_flag(DONES, s[1], tile, -1, T)
    beta = tl.where(tile[0] == 0, 1, scalar(scalars[0], ACC) * (~ended).to(ACC))
    return x, beta, (x,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)
