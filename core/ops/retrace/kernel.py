"""Retrace(λ)'s coefficients for the scan engine (docs/semantics.md, "Retrace(λ)")."""
import triton
import triton.language as tl

from ..._triton.primitives import (
    load, load_batch, load_or_zero, load_shifted, nan_where_unbounded, offsets, scalar, step_terms, store,
    value_after,
)


@triton.jit
def trace_coeffs(r, e, e_next, q_ahead, rho_ahead, tile, s_term, s_trunc, TERM, TRUNC, GAMMA, s_g, LMBDA, s_l,
                 scalars, T, ACC: tl.constexpr):
    """``α_t = r_t + γ_t ν_t E'_t − γ_t λ_t κ_t c_{t+1} q_{t+1}`` (NaN where ``β_t`` is not finite),
    ``β_t = γ_t λ_t κ_t c_{t+1}``, from the per-step quantities (shared with the fused
    ``retrace_from_q`` kernel)."""
    nu, kappa, gamma, lmbda = step_terms(TERM, s_term, TRUNC, s_trunc, GAMMA, s_g, LMBDA, s_l, scalars, tile, 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = gamma * lmbda
    c_ahead = tl.minimum(rho_ahead, scalar(scalars[3], ACC), propagate_nan=tl.PropagateNan.ALL)
    trace = gamma_lmbda * kappa * c_ahead
    alpha = nan_where_unbounded(r + gamma * nu * e_next - trace * q_ahead, trace)
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


# ----------------------------------------------------------------------------- from the action table

BLOCK_A = tl.constexpr(16)  # actions reduced per step of the loop over the table's last axis


@triton.jit
def _step_stats(Q, sq, P, sp, ACT, s_act, MU, s_mu, t, tile, T, ACC: tl.constexpr):
    """``q_t = Q[t, a_t]``, ``E_t = Σ_a π[t, a] Q[t, a]`` and ``log ρ_t = log π[t, a_t] − log μ_t``
    at time ``t`` (zeros outside ``[0, T)``; NaN for an action outside ``[0, A)``). The sum
    over actions runs in blocks of ``BLOCK_A``, so registers do not grow with ``A``."""
    m = tile[3] & (t >= 0) & (t < T)
    n_actions = sq[4]
    a = tl.load(ACT + offsets(s_act, t, tile), mask=m, other=0)
    valid = (a >= 0) & (a < n_actions)
    q_row = offsets(sq, t, tile)
    p_row = offsets(sp, t, tile)
    q = tl.load(Q + q_row + a * sq[3], mask=m & valid, other=0).to(ACC)
    p_taken = tl.load(P + p_row + a * sp[3], mask=m & valid, other=1).to(ACC)
    mu = tl.load(MU + offsets(s_mu, t, tile), mask=m, other=0).to(ACC)
    e = tl.zeros(q.shape, ACC)
    for a0 in range(0, n_actions, BLOCK_A):
        k = a0 + tl.arange(0, BLOCK_A)  # a new last axis, whatever the tile's rank
        mk = tl.expand_dims(m, -1) & (k < n_actions)
        qk = tl.load(Q + tl.expand_dims(q_row, -1) + k * sq[3], mask=mk, other=0).to(ACC)
        pk = tl.load(P + tl.expand_dims(p_row, -1) + k * sp[3], mask=mk, other=0).to(ACC)
        e += tl.sum(qk * pk, axis=-1)
    zero = q * 0
    q = tl.where(valid | ~m, q, zero / zero)  # NaN marks an action outside [0, A)
    return q, e, tl.log(p_taken) - mu


@triton.jit
def table_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """:func:`trace_coeffs` from the action tables, read at ``t`` and at ``t + 1``: for the
    ``exact`` kernel (otherwise a prologue reads the tables once and the plain kernel runs:
    ``table.py``)."""
    R, Q, P, ACT, MU, NE, BOOT, TERM, TRUNC, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    q, e, log_rho = _step_stats(Q, s[1], P, s[2], ACT, s[3], MU, s[4], tile[0], tile, T, ACC)
    q_ahead, e_ahead, log_rho_ahead = _step_stats(Q, s[1], P, s[2], ACT, s[3], MU, s[4], tile[0] + 1, tile, T, ACC)
    if NE is not None:
        e_next = load(NE, s[5], tile, ACC)
    else:
        e_next = tl.where(tile[0] == T - 1, load_batch(BOOT, s[6], tile, ACC), e_ahead)
    return trace_coeffs(r, e, e_next, q_ahead, tl.exp(log_rho_ahead), tile, s[7], s[8], TERM, TRUNC, GAMMA, s[9],
                        LMBDA, s[10], scalars, T, ACC)


# ----------------------------------------------------------------------------- backward
#
# Forward, Q_t = α_t + β_t Q_{t+1} with β_t = γ_t λ_t κ_t ĉ_{t+1} (ĉ = min(c̄, ρ)) and
# α_t = r_t + γ_t ν_t E'_t − β_t q_{t+1}. With G_t = ∂L/∂q_targets_t + ∂L/∂advantages_t the
# adjoint runs forward in time, u_t = G_t + β_{t−1} u_{t−1}, and:
#
#     ∂r_t     = u_t
#     ∂q_t     = −β_{t−1} u_{t−1}
#     ∂E_t     = −∂L/∂advantages_t + [E'_{t−1} = E_t] γ_{t−1} ν_{t−1} u_{t−1}
#     ∂E'_t    = γ_t ν_t u_t
#     ∂log ρ_t = [ρ_t ≤ c̄] ρ_t γ_{t−1} λ_{t−1} κ_{t−1} u_{t−1} (Q_t − q_t)
#     ∂γ_t     = u_t (ν_t E'_t + λ_t κ_t ĉ_{t+1} (Q_{t+1} − q_{t+1}))
#     ∂λ_t     = u_t γ_t κ_t ĉ_{t+1} (Q_{t+1} − q_{t+1})


@triton.jit
def _backward_step(ins, s, scalars, tile, T, SHIFT: tl.constexpr, ACC: tl.constexpr):
    """``(γ, λ, ν, κ, ĉ_{t+1}, γλκ, β)`` at ``t + SHIFT``."""
    G_Q, G_ADV, Q, E, LOG_RHO, NE, BOOT, TERM, TRUNC, GAMMA, LMBDA, QRET = ins
    nu, kappa, gamma, lmbda = step_terms(TERM, s[7], TRUNC, s[8], GAMMA, s[9], LMBDA, s[10], scalars, tile, SHIFT, T,
                                         ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = gamma * lmbda
    rho_ahead = tl.exp(load_shifted(LOG_RHO, s[4], tile, SHIFT + 1, T, ACC))
    c_ahead = tl.minimum(rho_ahead, scalar(scalars[3], ACC), propagate_nan=tl.PropagateNan.ALL)
    return gamma, lmbda, nu, kappa, c_ahead, gamma_lmbda * kappa, gamma_lmbda * kappa * c_ahead


@triton.jit
def backward_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """Inputs ``(G_Q, G_ADV, Q, E, LOG_RHO, NE, BOOT, TERM, TRUNC, GAMMA, LMBDA, QRET)``."""
    G_Q, G_ADV, Q, E, LOG_RHO, NE, BOOT, TERM, TRUNC, GAMMA, LMBDA, QRET = ins
    zero = tl.zeros(tile[3].shape, ACC)
    g = load_or_zero(G_Q, s[0], tile, ACC)
    g_adv = load_or_zero(G_ADV, s[1], tile, ACC)
    gamma, lmbda, nu, kappa, c_ahead, _, _ = _backward_step(ins, s, scalars, tile, T, 0, ACC)
    gamma_p, _, nu_p, _, _, glk_p, beta_p = _backward_step(ins, s, scalars, tile, T, -1, ACC)
    if NE is None:
        e_prev = gamma_p * nu_p  # E'_{t-1} = E_t
        en_rows = tile[0] == T - 1  # the bootstrap's gradient: the last step only
    else:
        e_prev = zero
        en_rows = tile[0] >= 0
    rho = tl.exp(load(LOG_RHO, s[4], tile, ACC))
    rho_grad = tl.where(rho <= scalar(scalars[3], ACC), rho, 0)  # ∂ĉ_t/∂log ρ_t
    gap = load(QRET, s[11], tile, ACC) - load(Q, s[2], tile, ACC)  # Q_t − q_t
    if GAMMA is None and LMBDA is None:
        e_next = zero
        gap_ahead = zero
    else:
        e_next = value_after(E, s[3], NE, s[5], BOOT, s[6], tile, T, ACC)
        gap_ahead = load_shifted(QRET, s[11], tile, 1, T, ACC) - load_shifted(Q, s[2], tile, 1, T, ACC)
        gap_ahead = tl.where(kappa != 0, gap_ahead, 0)
    keep = (g_adv, gamma * nu, e_prev, en_rows, beta_p, glk_p * rho_grad * gap, e_next, gap_ahead, nu, kappa, gamma,
            lmbda, c_ahead)
    return g + g_adv, beta_p, keep


@triton.jit
def backward_emit(outs, s, scalars, u, u_prev, keep, tile, T):
    """Outputs ``(∂r, ∂q, ∂E, ∂log ρ, ∂E', ∂γ, ∂λ)``; ``∂E'`` as ``∂V'`` in ``_value_backward``."""
    G_R, G_Q, G_E, G_LOG_RHO, G_EN, G_GAMMA, G_LMBDA = outs
    g_adv, d_en, e_prev, en_rows, beta_p, rho_term, e_next, gap_ahead, nu, kappa, gamma, lmbda, c_ahead = keep
    if G_R is not None:
        store(G_R, s, tile, u)
    if G_Q is not None:
        store(G_Q, s, tile, -beta_p * u_prev)
    if G_E is not None:
        store(G_E, s, tile, e_prev * u_prev - g_adv)
    if G_LOG_RHO is not None:
        store(G_LOG_RHO, s, tile, rho_term * u_prev)
    if G_EN is not None:
        tl.store(G_EN + offsets(s, tile[0], tile), d_en * u, mask=tile[3] & en_rows)
    if G_GAMMA is not None:
        store(G_GAMMA, s, tile, u * (nu * e_next + lmbda * kappa * c_ahead * gap_ahead))
    if G_LMBDA is not None:
        store(G_LMBDA, s, tile, u * gamma * kappa * c_ahead * gap_ahead)
