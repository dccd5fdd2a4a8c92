"""GAE's coefficients and outputs for the scan engine (docs/semantics.md, "GAE")."""
import triton
import triton.language as tl

from ..._triton.engine import load, load_coef, load_flag, scalar, step_terms, store, value_after


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``δ_t = r_t + γ_t ν_t V'_t − V_t``; ``α_t = δ_t``, ``β_t = γ_t λ_t κ_t``."""
    R, V, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    v = load(V, s[1], tile, ACC)
    v_next = value_after(V, s[1], NV, s[2], BOOT, s[3], tile, T, ACC)
    nu, kappa, gamma, lmbda = step_terms(TERM, s[4], TRUNC, s[5], GAMMA, s[6], LMBDA, s[7], scalars, tile, 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)  # γλ rounded once from float64, as Python computes it
    else:
        gamma_lmbda = gamma * lmbda
    delta = r + gamma * v_next * nu - v
    return delta, gamma_lmbda * kappa, (v,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    """``advantages = Â``, ``returns = Â + V``."""
    ADV, RET = outs
    (v,) = keep
    store(ADV, s, tile, A)
    store(RET, s, tile, A + v)


@triton.jit
def coeffs_masked(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """With a step-skip mask ``m`` (docs/semantics.md, "Skipped steps"):
    ``δ_t = r_t + γ_t ν_t W_{t+1} − V_t``; ``α_t = m_t δ_t``, ``β_t = m_t γ_t λ_t ν_t + 1 − m_t``."""
    R, V, W, BOOT, TERM, MASK, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    v = load(V, s[1], tile, ACC)
    w_next = value_after(W, s[2], None, s[2], BOOT, s[3], tile, T, ACC)
    kept = load_flag(MASK, s[5], tile, 0, T)
    nu = (~load_flag(TERM, s[4], tile, 0, T)).to(ACC)
    gamma = load_coef(GAMMA, s[6], tile, scalars[0], 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = gamma * load_coef(LMBDA, s[7], tile, scalars[1], 0, T, ACC)
    delta = r + gamma * w_next * nu - v
    return tl.where(kept, delta, 0), tl.where(kept, gamma_lmbda * nu, 1), (v,)
