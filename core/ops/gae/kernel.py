"""GAE's coefficients and outputs for the scan engine (docs/semantics.md, "GAE")."""
import triton
import triton.language as tl

from ..._triton.engine import load, scalar, step_terms, store, value_after


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
