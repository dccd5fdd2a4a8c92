"""V-trace's coefficients and outputs for the scan engine (docs/semantics.md, "V-trace")."""
import triton
import triton.language as tl

from ..._triton.engine import (
    load, load_coef, load_flag, load_shifted, scalar, store, value_after,
)


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = ρ̄_t (r_t + γ_t ν_t V'_t − V_t)``, ``β_t = γ_t c_t κ_t`` with
    ``ρ̄_t = min(ρ̄, ρ_t)`` and ``c_t = λ_t min(c̄, ρ_t)``."""
    R, V, LOG_RHO, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    v = load(V, s[1], tile, ACC)
    rho = tl.exp(load(LOG_RHO, s[2], tile, ACC))
    v_next = value_after(V, s[1], NV, s[3], BOOT, s[4], tile, T, ACC)
    if NV is None:
        v_ahead = v_next  # V_{t+1}, wherever κ_t = 1
    else:
        v_ahead = load_shifted(V, s[1], tile, 1, T, ACC)
    term = load_flag(TERM, s[5], tile, 0, T)
    done = term | load_flag(TRUNC, s[6], tile, 0, T)
    nu = (~term).to(ACC)
    kappa = (~done) & (tile[0] < T - 1)
    gamma = load_coef(GAMMA, s[7], tile, scalars[0], 0, T, ACC)
    lmbda = load_coef(LMBDA, s[8], tile, scalars[1], 0, T, ACC)
    rho_bar = tl.minimum(rho, scalar(scalars[2], ACC), propagate_nan=tl.PropagateNan.ALL)
    c = lmbda * tl.minimum(rho, scalar(scalars[3], ACC), propagate_nan=tl.PropagateNan.ALL)
    delta = rho_bar * (r + gamma * v_next * nu - v)
    return delta, gamma * c * kappa.to(ACC), (r, v, v_next, v_ahead, rho, gamma, nu, kappa)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    """``vs_t = V_t + A_t``; ``pg_t = ρ̄ᵖᵍ_t (r_t + γ_t ν_t v̂_t − V_t)`` with
    ``v̂_t = vs_{t+1}`` inside the episode and ``V'_t`` where the trace is cut."""
    VS, PG = outs
    r, v, v_next, v_ahead, rho, gamma, nu, kappa = keep
    store(VS, s, tile, v + A)
    vs_ahead = v_ahead + A_in  # vs_{t+1} = V_{t+1} + A_{t+1}
    v_hat = tl.where(kappa, vs_ahead, v_next)
    rho_pg = tl.minimum(rho, scalar(scalars[4], A.dtype), propagate_nan=tl.PropagateNan.ALL)
    store(PG, s, tile, rho_pg * (r + gamma * nu * v_hat - v))
