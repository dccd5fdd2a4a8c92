"""Eligibility traces' coefficients for the scan engine (docs/semantics.md, "Eligibility traces")."""
import triton
import triton.language as tl

from ..._triton.engine import load, load_coef, load_flag, scalar, store


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = x_t``; ``β_t = γ_{t−1} λ_{t−1} (1 − dones_{t−1})``, and ``β_0 = 1`` (``initial`` carries in)."""
    X, DONES, GAMMA, LMBDA, INIT = ins
    x = load(X, s[0], tile, ACC)
    ended = load_flag(DONES, s[1], tile, -1, T)
    if GAMMA is None and LMBDA is None:
        decay = scalar(scalars[2], ACC)
    else:
        decay = load_coef(GAMMA, s[2], tile, scalars[0], -1, T, ACC) * load_coef(LMBDA, s[3], tile, scalars[1], -1, T, ACC)
    beta = tl.where(tile[0] == 0, 1, decay * (~ended).to(ACC))
    return x, beta, (x,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)
