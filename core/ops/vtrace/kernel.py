"""V-trace's coefficients and outputs for the scan engine (docs/semantics.md, "V-trace")."""
import triton
import triton.language as tl

from ..._triton.primitives import (
    load, load_or_zero, load_shifted, nan_where_unbounded, offsets, scalar, step_terms, store, value_after,
)


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = ρ̄_t (r_t + γ_t ν_t V'_t − V_t)``, ``β_t = γ_t c_t κ_t`` with
    ``ρ̄_t = min(ρ̄, ρ_t)`` and ``c_t = λ_t min(c̄, ρ_t)``; ``α_t`` is NaN where ``β_t`` is not
    finite, and ``pg_t`` where ``ρ̄ᵖᵍ_t`` is not."""
    R, V, LOG_RHO, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    v = load(V, s[1], tile, ACC)
    rho = tl.exp(load(LOG_RHO, s[2], tile, ACC))
    v_next = value_after(V, s[1], NV, s[3], BOOT, s[4], tile, T, ACC)
    if NV is None:
        v_ahead = v_next  # V_{t+1}, wherever κ_t = 1
    else:
        v_ahead = load_shifted(V, s[1], tile, 1, T, ACC)
    nu, kappa, gamma, lmbda = step_terms(TERM, s[5], TRUNC, s[6], GAMMA, s[7], LMBDA, s[8], scalars, tile, 0, T, ACC)
    rho_bar = tl.minimum(rho, scalar(scalars[2], ACC), propagate_nan=tl.PropagateNan.ALL)
    c = lmbda * tl.minimum(rho, scalar(scalars[3], ACC), propagate_nan=tl.PropagateNan.ALL)
    delta = rho_bar * (r + gamma * v_next * nu - v)
    # pg as an affine map of the state carried in, so that the emit keeps 3 values and a flag
    rho_pg = tl.minimum(rho, scalar(scalars[4], ACC), propagate_nan=tl.PropagateNan.ALL)
    inside = kappa != 0
    slope = rho_pg * (gamma * nu)
    base = nan_where_unbounded(rho_pg * (r + gamma * nu * tl.where(inside, v_ahead, v_next) - v), rho_pg)
    beta = gamma * c * kappa
    return nan_where_unbounded(delta, beta), beta, (v, base, slope, inside)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    """``vs_t = V_t + A_t``; ``pg_t = ρ̄ᵖᵍ_t (r_t + γ_t ν_t v̂_t − V_t)`` with
    ``v̂_t = vs_{t+1} = V_{t+1} + A_{t+1}`` inside the episode and ``V'_t`` where the trace is cut,
    computed as ``pg_t = b_t + [inside] s_t A_{t+1}`` with ``b_t = ρ̄ᵖᵍ_t (r_t + γ_t ν_t v̂⁰_t − V_t)``
    (``v̂⁰_t``: ``V_{t+1}`` inside, ``V'_t`` outside) and ``s_t = ρ̄ᵖᵍ_t γ_t ν_t``."""
    VS, PG = outs
    v, base, slope, inside = keep
    store(VS, s, tile, v + A)
    store(PG, s, tile, tl.where(inside, base + slope * A_in, base))


# ----------------------------------------------------------------------------- backward
#
# With D = vs − V (the scan state), ρ̄ = min(ρ̄, ρ), ĉ = min(c̄, ρ), p = min(ρ̄ᵖᵍ, ρ) and the
# output gradients G_vs, G_pg, the adjoint runs forward in time:
#
#     u_t = G_vs_t + κ_{t−1} γ_{t−1} ν_{t−1} p_{t−1} G_pg_{t−1} + β_{t−1} u_{t−1}
#
# (pg_{t−1} reads D_t through v̂_{t−1} = vs_t), and with w_t = p_t G_pg_t every gradient is local:
#
#     ∂r_t    = ρ̄_t u_t + w_t
#     ∂V_t    = G_vs_t − ρ̄_t u_t − w_t + [the step before reads V_t: γ_{t−1} ν_{t−1} (ρ̄_{t−1} u_{t−1} + w_{t−1})
#               when V'_{t−1} = V_t, else γ_{t−1} ν_{t−1} κ_{t−1} w_{t−1}]
#     ∂V'_t   = γ_t ν_t (ρ̄_t u_t + (1 − κ_t) w_t)
#     ∂log ρ_t = ρ_t ([ρ_t ≤ ρ̄] u_t y_t + [ρ_t ≤ c̄] λ_t γ_t κ_t u_t D_{t+1} + [ρ_t ≤ ρ̄ᵖᵍ] G_pg_t z_t)
#     ∂γ_t    = ρ̄_t u_t ν_t V'_t + λ_t ĉ_t κ_t u_t D_{t+1} + w_t ν_t v̂_t
#     ∂λ_t    = γ_t ĉ_t κ_t u_t D_{t+1}
#
# where y_t = r_t + γ_t ν_t V'_t − V_t and z_t = r_t + γ_t ν_t v̂_t − V_t (the brackets of δ and pg).


@triton.jit
def _backward_step(ins, s, scalars, tile, T, SHIFT: tl.constexpr, ACC: tl.constexpr):
    """``(ρ, ν, κ, γ, λ, ĉ, p, G_pg)`` at ``t + SHIFT``."""
    G_VS, G_PG, R, V, LOG_RHO, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA, VS = ins
    rho = tl.exp(load_shifted(LOG_RHO, s[4], tile, SHIFT, T, ACC))
    nu, kappa, gamma, lmbda = step_terms(TERM, s[7], TRUNC, s[8], GAMMA, s[9], LMBDA, s[10], scalars, tile, SHIFT, T,
                                         ACC)
    c_hat = tl.minimum(rho, scalar(scalars[3], ACC), propagate_nan=tl.PropagateNan.ALL)
    p = tl.minimum(rho, scalar(scalars[4], ACC), propagate_nan=tl.PropagateNan.ALL)
    if G_PG is None:
        g_pg = tl.zeros(tile[3].shape, ACC)
    else:
        g_pg = load_shifted(G_PG, s[1], tile, SHIFT, T, ACC)
    return rho, nu, kappa, gamma, lmbda, c_hat, p, g_pg


@triton.jit
def backward_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """Inputs ``(G_VS, G_PG, R, V, LOG_RHO, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA, VS)``."""
    G_VS, G_PG, R, V, LOG_RHO, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA, VS = ins
    rho, nu, kappa, gamma, lmbda, c_hat, p, g_pg = _backward_step(ins, s, scalars, tile, T, 0, ACC)
    rho_p, nu_p, kappa_p, gamma_p, lmbda_p, c_hat_p, p_p, g_pg_p = _backward_step(ins, s, scalars, tile, T, -1, ACC)
    g_vs = load_or_zero(G_VS, s[0], tile, ACC)
    w_p = p_p * g_pg_p
    rho_bar_p = tl.minimum(rho_p, scalar(scalars[2], ACC), propagate_nan=tl.PropagateNan.ALL)
    if NV is None:  # V'_{t-1} = V_t: step t-1 reads V_t through δ and v̂
        v_from_w = gamma_p * nu_p * w_p
        v_from_u = gamma_p * nu_p * rho_bar_p
        vn_rows = tile[0] == T - 1  # the bootstrap's gradient: the last step only
    else:
        v_from_w = gamma_p * nu_p * kappa_p * w_p
        v_from_u = tl.zeros(tile[3].shape, ACC)
        vn_rows = tile[0] >= 0
    r = load(R, s[2], tile, ACC)
    v = load(V, s[3], tile, ACC)
    v_next = value_after(V, s[3], NV, s[5], BOOT, s[6], tile, T, ACC)
    if NV is None:
        v_ahead = v_next
    else:
        v_ahead = load_shifted(V, s[3], tile, 1, T, ACC)
    vs_ahead = load_shifted(VS, s[11], tile, 1, T, ACC)
    inside = kappa != 0
    d_ahead = tl.where(inside, vs_ahead - v_ahead, 0)
    v_hat = tl.where(inside, vs_ahead, v_next)
    keep = (g_vs, g_pg, p, v_from_w, v_from_u, vn_rows, r, v, v_next, v_hat, d_ahead, rho, c_hat, nu, kappa, gamma,
            lmbda)
    alpha = g_vs + kappa_p * gamma_p * nu_p * w_p
    return alpha, gamma_p * (lmbda_p * c_hat_p) * kappa_p, keep


@triton.jit
def backward_emit(outs, s, scalars, u, u_prev, keep, tile, T):
    """Outputs ``(∂r, ∂V, ∂log ρ, ∂V', ∂γ, ∂λ)``; ``∂V'`` as in ``_value_backward``."""
    G_R, G_V, G_LOG_RHO, G_VN, G_GAMMA, G_LMBDA = outs
    g_vs, g_pg, p, v_from_w, v_from_u, vn_rows, r, v, v_next, v_hat, d_ahead, rho, c_hat, nu, kappa, gamma, lmbda = keep
    ACC = u.dtype
    rho_bar = tl.minimum(rho, scalar(scalars[2], ACC), propagate_nan=tl.PropagateNan.ALL)
    u_d = rho_bar * u  # the gradient of δ's bracket y
    w = p * g_pg  # the gradient of pg's bracket z
    if G_R is not None:
        store(G_R, s, tile, u_d + w)
    if G_V is not None:
        store(G_V, s, tile, g_vs - u_d - w + v_from_w + v_from_u * u_prev)
    if G_VN is not None:
        tl.store(G_VN + offsets(s, tile[0], tile), gamma * nu * (u_d + (1 - kappa) * w), mask=tile[3] & vn_rows)
    if G_LOG_RHO is not None:
        y = r + gamma * nu * v_next - v
        z = r + gamma * nu * v_hat - v
        g = tl.where(rho <= scalar(scalars[2], ACC), u * y, 0)
        g += tl.where(rho <= scalar(scalars[3], ACC), lmbda * gamma * kappa * u * d_ahead, 0)
        g += tl.where(rho <= scalar(scalars[4], ACC), g_pg * z, 0)
        store(G_LOG_RHO, s, tile, rho * g)
    if G_GAMMA is not None:
        store(G_GAMMA, s, tile, u_d * nu * v_next + lmbda * c_hat * kappa * u * d_ahead + w * nu * v_hat)
    if G_LMBDA is not None:
        store(G_LMBDA, s, tile, gamma * c_hat * kappa * u * d_ahead)
