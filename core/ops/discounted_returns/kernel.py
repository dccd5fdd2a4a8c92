"""The discounted return's coefficients for the scan engine (docs/semantics.md, "Discounted returns")."""
import triton
import triton.language as tl

from ..._triton.primitives import load, load_coef, load_flag, scalar, store, value_after
from ..._triton.whiten import add_sums


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = r_t + γ_t ν_t (1 − κ_t) V'_t``, ``β_t = γ_t κ_t``."""
    R, NV, BOOT, TERM, TRUNC, GAMMA = ins
    r = load(R, s[0], tile, ACC)
    v_next = value_after(None, s[1], NV, s[1], BOOT, s[2], tile, T, ACC)
    term = load_flag(TERM, s[3], tile, 0, T)
    done = term | load_flag(TRUNC, s[4], tile, 0, T)
    nu = (~term).to(ACC)
    kappa = ((~done) & (tile[0] < T - 1)).to(ACC)
    gamma = load_coef(GAMMA, s[5], tile, scalars[0], 0, T, ACC)
    alpha = r + gamma * nu * (1 - kappa) * v_next
    return alpha, gamma * kappa, (r,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)


@triton.jit
def coeffs_masked(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """With a step-skip mask ``m`` (docs/semantics.md, "Skipped steps"), ``G_T`` = the bootstrap:
    ``α_t = m_t r_t``, ``β_t = m_t γ_t ν_t + 1 − m_t``."""
    R, BOOT, TERM, MASK, GAMMA = ins
    r = load(R, s[0], tile, ACC)
    kept = load_flag(MASK, s[3], tile, 0, T)
    nu = (~load_flag(TERM, s[2], tile, 0, T)).to(ACC)
    gamma = load_coef(GAMMA, s[4], tile, scalars[0], 0, T, ACC)
    return tl.where(kept, r, 0), tl.where(kept, gamma * nu, 1), (r,)


@triton.jit
def coeffs_kept_returns(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """REINFORCE++'s return (``kept_returns``): the masked return, ``α_t = m_t r_t`` and
    ``β_t = m_t γ + 1 − m_t`` (a skipped step passes it through), with the mask for the emit step."""
    R, MASK = ins
    r = load(R, s[0], tile, ACC)
    kept = load_flag(MASK, s[1], tile, 0, T)
    return tl.where(kept, r, 0), tl.where(kept, scalar(scalars[0], ACC), 1), (kept,)


@triton.jit
def emit_kept_with_sums(outs, s, scalars, A, A_in, keep, tile, T):
    """``G = A`` where ``m_t = 1`` and 0 where it is 0, and the count, sum and sum of squares
    of ``G`` over ``m_t = 1`` added to ``SUMS``."""
    OUT, SUMS = outs
    (kept,) = keep
    store(OUT, s, tile, tl.where(kept, A, 0))
    add_sums(SUMS, tile[3] & kept, A)
