"""Retrace(λ)'s coefficients for the scan engine (docs/semantics.md, "Retrace(λ)")."""
import triton
import triton.language as tl

from ..._triton.engine import load, load_batch, load_coef, load_flag, load_shifted, offsets, scalar, store, value_after


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
        k = a0 + tl.arange(0, BLOCK_A)[None, None, :]
        mk = m[:, :, None] & (k < n_actions)
        qk = tl.load(Q + q_row[:, :, None] + k * sq[3], mask=mk, other=0).to(ACC)
        pk = tl.load(P + p_row[:, :, None] + k * sp[3], mask=mk, other=0).to(ACC)
        e += tl.sum(qk * pk, axis=2)
    zero = q * 0
    q = tl.where(valid | ~m, q, zero / zero)  # NaN marks an action outside [0, A)
    return q, e, tl.log(p_taken) - mu


@triton.jit
def table_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
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
