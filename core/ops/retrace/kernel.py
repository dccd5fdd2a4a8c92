"""Retrace(λ)'s coefficients for the scan engine (docs/semantics.md, "Retrace(λ)")."""
import triton
import triton.language as tl

from ..._triton.engine import load, load_coef, load_flag, load_shifted, scalar, store, value_after


@triton.jit
def trace_coeffs(r, e, e_next, q_ahead, rho_ahead, tile, s_term, s_trunc, TERM, TRUNC, GAMMA, s_g, LMBDA, s_l,
                 scalars, T, ACC: tl.constexpr):
    """``α_t = r_t + γ_t ν_t E'_t − γ_t λ_t κ_t c_{t+1} q_{t+1}``, ``β_t = γ_t λ_t κ_t c_{t+1}``,
    from the per-step quantities (shared with the fused ``retrace_from_q`` kernel)."""
    term = load_flag(TERM, s_term, tile, 0, T)
    done = term | load_flag(TRUNC, s_trunc, tile, 0, T)
    nu = (~term).to(ACC)
    kappa = ((~done) & (tile[0] < T - 1)).to(ACC)
    gamma = load_coef(GAMMA, s_g, tile, scalars[0], 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = gamma * load_coef(LMBDA, s_l, tile, scalars[1], 0, T, ACC)
    c_ahead = tl.minimum(rho_ahead, scalar(scalars[3], ACC), propagate_nan=tl.PropagateNan.ALL)
    trace = gamma_lmbda * kappa * c_ahead
    alpha = r + gamma * nu * e_next - trace * q_ahead
    return alpha, trace, (e,)


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    R, Q, E, LOG_RHO, NE, BOOT, TERM, TRUNC, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    e = load(E, s[2], tile, ACC)
    e_next = value_after(E, s[2], NE, s[4], BOOT, s[5], tile, T, ACC)
    q_ahead = load_shifted(Q, s[1], tile, 1, T, ACC)
    rho_ahead = tl.exp(load_shifted(LOG_RHO, s[3], tile, 1, T, ACC))
    return trace_coeffs(r, e, e_next, q_ahead, rho_ahead, tile, s[6], s[7], TERM, TRUNC, GAMMA, s[8], LMBDA, s[9],
                        scalars, T, ACC)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    """``q_targets = Qʳᵉᵗ``, ``advantages = Qʳᵉᵗ − E``."""
    QRET, ADV = outs
    (e,) = keep
    store(QRET, s, tile, A)
    store(ADV, s, tile, A - e)
