"""The fused backward pass of the value ops (GAE, TD(λ), discounted returns) for the scan engine.

Forward, each op solves the reverse recurrence (docs/semantics.md)::

    A_t = α_t + β_t A_{t+1},   β_t = γ_t λ_t κ_t
    α_t = r_t + γ_t ν_t w_t V'_t − [GAE] V_t,   w_t = 1 (GAE) or 1 − λ_t κ_t (λ-returns)

(discounted returns are the λ-return with λ = 1). With ``G_t = ∂L/∂A_t`` (for GAE the sum
of the advantages' and the returns' gradients) the adjoint runs forward in time::

    u_t = G_t + β_{t−1} u_{t−1},   u_{−1} = 0

and each input's gradient is local in ``u``::

    ∂L/∂r_t  = u_t
    ∂L/∂V'_t = u_t γ_t ν_t w_t          (next_values[t]; else values[t+1], bootstrap at T−1)
    ∂L/∂V_t  = [GAE] (∂L/∂returns_t − u_t) + ∂L/∂V'_{t−1}   (the last term when V'_{t−1} = V_t)
    ∂L/∂γ_t  = u_t (ν_t w_t V'_t + λ_t κ_t A_{t+1})
    ∂L/∂λ_t  = u_t γ_t κ_t (A_{t+1} − [λ-return] ν_t V'_t)

Inputs: ``(G, G_RETURNS, V, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA, A)``; outputs:
``(∂r, ∂V, ∂V', ∂γ, ∂λ)``, where ``∂V'`` is written at every step into ``next_values``'
gradient, or at ``T − 1`` only into a full-shape buffer whose last step is the bootstrap's.
"""
import triton
import triton.language as tl

from ..._triton.primitives import load_or_zero, load_shifted, offsets, scalar, step_terms, store, value_after


@triton.jit
def _step(ins, s, scalars, tile, T, SHIFT: tl.constexpr, IS_GAE: tl.constexpr, ACC: tl.constexpr):
    """``(γ, λ, ν, κ, w, β)`` at ``t + SHIFT``."""
    G, G_RET, V, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA, A = ins
    nu, kappa, gamma, lmbda = step_terms(TERM, s[5], TRUNC, s[6], GAMMA, s[7], LMBDA, s[8], scalars, tile, SHIFT, T, ACC)
    if GAMMA is None and LMBDA is None:
        beta = scalar(scalars[2], ACC) * kappa  # γλ rounded once, as the forward kernel has it
    else:
        beta = gamma * lmbda * kappa
    if IS_GAE:
        w = tl.full(kappa.shape, 1, ACC)
    else:
        w = 1 - lmbda * kappa
    return gamma, lmbda, nu, kappa, w, beta


@triton.jit
def _coeffs(ins, s, scalars, tile, T, IS_GAE: tl.constexpr, ACC: tl.constexpr):
    G, G_RET, V, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA, A = ins
    zero = tl.zeros(tile[3].shape, ACC)
    g = load_or_zero(G, s[0], tile, ACC)
    g_ret = load_or_zero(G_RET, s[1], tile, ACC)
    gamma, lmbda, nu, kappa, w, _ = _step(ins, s, scalars, tile, T, 0, IS_GAE, ACC)
    gamma_p, _, nu_p, _, w_p, beta_p = _step(ins, s, scalars, tile, T, -1, IS_GAE, ACC)
    if NV is None:
        d_prev = gamma_p * nu_p * w_p  # V'_{t-1} is V_t
        vn_rows = tile[0] == T - 1  # the bootstrap's gradient: the last step only
    else:
        d_prev = zero
        vn_rows = tile[0] >= 0
    if GAMMA is None and LMBDA is None:
        v_next = zero
        a_next = zero
    else:
        v_next = value_after(V, s[2], NV, s[3], BOOT, s[4], tile, T, ACC)
        a_next = load_shifted(A, s[9], tile, 1, T, ACC)
    keep = (g_ret, gamma * nu * w, d_prev, vn_rows, gamma, lmbda, nu, kappa, w, v_next, a_next)
    return g + g_ret, beta_p, keep


@triton.jit
def _emit(outs, s, scalars, u, u_prev, keep, tile, T, IS_GAE: tl.constexpr):
    G_R, G_V, G_VN, G_GAMMA, G_LMBDA = outs
    g_ret, d_vn, d_prev, vn_rows, gamma, lmbda, nu, kappa, w, v_next, a_next = keep
    if G_R is not None:
        store(G_R, s, tile, u)
    if G_V is not None:
        if IS_GAE:
            store(G_V, s, tile, g_ret - u + d_prev * u_prev)
        else:
            store(G_V, s, tile, d_prev * u_prev)
    if G_VN is not None:
        tl.store(G_VN + offsets(s, tile[0], tile), d_vn * u, mask=tile[3] & vn_rows)
    if G_GAMMA is not None:
        store(G_GAMMA, s, tile, u * (nu * w * v_next + lmbda * kappa * a_next))
    if G_LMBDA is not None:
        if IS_GAE:
            store(G_LMBDA, s, tile, u * gamma * kappa * a_next)
        else:
            store(G_LMBDA, s, tile, u * gamma * kappa * (a_next - nu * v_next))


@triton.jit
def gae_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    return _coeffs(ins, s, scalars, tile, T, True, ACC)


@triton.jit
def gae_emit(outs, s, scalars, A, A_in, keep, tile, T):
    _emit(outs, s, scalars, A, A_in, keep, tile, T, True)


@triton.jit
def lambda_return_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    return _coeffs(ins, s, scalars, tile, T, False, ACC)


@triton.jit
def lambda_return_emit(outs, s, scalars, A, A_in, keep, tile, T):
    _emit(outs, s, scalars, A, A_in, keep, tile, T, False)
