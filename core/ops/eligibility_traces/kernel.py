"""Eligibility traces' coefficients for the scan engine (docs/semantics.md, "Eligibility traces")."""
import triton
import triton.language as tl

from ..._triton.primitives import load, load_coef, load_flag, offsets, scalar, store


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = x_t``; ``β_t = γ_{t−1} λ_{t−1} (1 − dones_{t−1})``, and ``β_0 = 1`` (``initial`` carries in)."""
    X, DONES, GAMMA, LMBDA, INIT = ins
    x = load(X, s[0], tile, ACC)
    ended = load_flag(DONES, s[1], tile, -1, T)
    if GAMMA is None and LMBDA is None:
        decay = scalar(scalars[2], ACC)
    else:
        decay = load_coef(GAMMA, s[2], tile, scalars[0], -1, T, ACC) * load_coef(LMBDA, s[3], tile, scalars[1], -1, T, ACC)
    beta = tl.where(tile[0] == 0, 1, decay * (~ended).to(ACC))
    return x, beta, (x,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)


# ----------------------------------------------------------------------------- backward


@triton.jit
def backward_coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """The adjoint, in reverse: ``u_t = G_t + β_{t+1} u_{t+1}`` with ``β_{t+1} = γ_t λ_t (1 − dones_t)``.

    Inputs ``(G, DONES, GAMMA, LMBDA, E)``, ``E`` the forward traces; also the episodic prefix
    sum's backward, with ``γ λ = 1``."""
    G, DONES, GAMMA, LMBDA, E = ins
    g = load(G, s[0], tile, ACC)
    kept = (~load_flag(DONES, s[1], tile, 0, T)).to(ACC)
    gamma = load_coef(GAMMA, s[2], tile, scalars[0], 0, T, ACC)
    lmbda = load_coef(LMBDA, s[3], tile, scalars[1], 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        decay = scalar(scalars[2], ACC)
    else:
        decay = gamma * lmbda
    if GAMMA is None and LMBDA is None:
        e = g * 0
    else:
        e = load(E, s[4], tile, ACC)
    return g, decay * kept, (kept, gamma, lmbda, e)


@triton.jit
def backward_emit(outs, s, scalars, u, u_next, keep, tile, T):
    """``∂x_t = u_t``, ``∂initial = u_0``, ``∂γ_t = u_{t+1} λ_t (1 − dones_t) e_t``, ``∂λ_t = u_{t+1} γ_t (1 − dones_t) e_t``."""
    G_X, G_INIT, G_GAMMA, G_LMBDA = outs
    kept, gamma, lmbda, e = keep
    if G_X is not None:
        store(G_X, s, tile, u)
    if G_INIT is not None:
        tl.store(G_INIT + offsets(s, tile[0], tile), u, mask=tile[3] & (tile[0] == 0))
    if G_GAMMA is not None:
        store(G_GAMMA, s, tile, u_next * lmbda * kept * e)
    if G_LMBDA is not None:
        store(G_LMBDA, s, tile, u_next * gamma * kept * e)
