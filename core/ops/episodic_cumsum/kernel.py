"""The episodic prefix sum's coefficients for the scan engine (docs/semantics.md, "Episodic prefix sums")."""
import triton
import triton.language as tl

from ..._triton.primitives import load, load_flag, store


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = x_t``; ``β_t = 1 − dones_{t−1}``, and ``β_0 = 1`` (``initial`` carries in)."""
    X, DONES, INIT = ins
    x = load(X, s[0], tile, ACC)
    ended = load_flag(DONES, s[1], tile, -1, T)
    return x, (~ended).to(ACC), (x,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)
