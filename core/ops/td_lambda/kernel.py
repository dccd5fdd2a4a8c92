"""TD(λ)'s coefficients for the scan engine (docs/semantics.md, "TD(λ) returns")."""
import triton
import triton.language as tl

from ..._triton.primitives import load, load_coef, load_flag, scalar, step_terms, store, value_after


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = r_t + γ_t ν_t (1 − λ_t κ_t) V'_t``, ``β_t = γ_t λ_t κ_t``."""
    R, V, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    v_next = value_after(V, s[1], NV, s[2], BOOT, s[3], tile, T, ACC)
    nu, kappa, gamma, lmbda = step_terms(TERM, s[4], TRUNC, s[5], GAMMA, s[6], LMBDA, s[7], scalars, tile, 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = gamma * lmbda
    alpha = r + gamma * nu * (1 - lmbda * kappa) * v_next
    return alpha, gamma_lmbda * kappa, (r,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)


@triton.jit
def coeffs_masked(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """With a step-skip mask ``m`` (docs/semantics.md, "Skipped steps"), ``G_T`` = the bootstrap:
    ``α_t = m_t (r_t + γ_t ν_t (1 − λ_t) W_{t+1})``, ``β_t = m_t γ_t λ_t ν_t + 1 − m_t``."""
    R, V, W, BOOT, TERM, MASK, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    w_next = value_after(W, s[2], None, s[2], BOOT, s[3], tile, T, ACC)
    kept = load_flag(MASK, s[5], tile, 0, T)
    nu = (~load_flag(TERM, s[4], tile, 0, T)).to(ACC)
    gamma = load_coef(GAMMA, s[6], tile, scalars[0], 0, T, ACC)
    lmbda = load_coef(LMBDA, s[7], tile, scalars[1], 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = gamma * lmbda
    alpha = r + gamma * nu * (1 - lmbda) * w_next
    return tl.where(kept, alpha, 0), tl.where(kept, gamma_lmbda * nu, 1), (r,)
