"""A stand-in for the seed library's design (rl-triton v0.1.3), timed beside rlscan: one
program per environment row of ``[N, T]`` time-contiguous inputs, the whole row in
registers, one ``tl.associative_scan`` over it, warps scaled with the padded length.
Written here from that description (GAE and discounted returns), so that the comparison
runs without the seed's library::

    A_t = α_t + β_t A_{t+1}
    GAE:        α_t = r_t + γ ν_t V'_t − V_t,            β_t = γ λ κ_t
    discounted: α_t = r_t + γ ν_t [t = T−1] V_T,         β_t = γ κ_t

with ``ν_t = 1 − terminated_t``, ``κ_t = ν_t`` except ``κ_{T−1} = 0``, ``V'_t = V_{t+1}``
and ``V'_{T−1}`` the bootstrap value (docs/semantics.md).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_T = 2**16  # longer rows do not fit one program's registers


@triton.jit
def _then(a_later, b_later, a_now, b_now):
    """A reverse scan's combine: the step now applied after the steps later in time."""
    return a_now + b_now * a_later, b_now * b_later


@triton.jit
def row_kernel(R, V, D, BOOT, OUT, RET, T, gamma, gamma_lmbda, BLOCK_T: tl.constexpr, GAE: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * T
    t = tl.arange(0, BLOCK_T)
    m = t < T
    last = t == T - 1
    r = tl.load(R + base + t, mask=m, other=0)
    nu = 1.0 - tl.load(D + base + t, mask=m, other=0).to(tl.float32)
    kappa = tl.where(last, 0.0, nu)
    boot = tl.load(BOOT + tl.program_id(0))
    if GAE:
        v = tl.load(V + base + t, mask=m, other=0)
        v_next = tl.where(last, boot, tl.load(V + base + t + 1, mask=t + 1 < T, other=0))
        alpha = r + gamma * nu * v_next - v
        beta = gamma_lmbda * kappa
    else:
        alpha = r + gamma * nu * tl.where(last, boot, 0.0)
        beta = gamma * kappa
    a, _ = tl.associative_scan((tl.where(m, alpha, 0.0), tl.where(m, beta, 1.0)), 0, _then, reverse=True)
    tl.store(OUT + base + t, a, mask=m)
    if GAE:
        tl.store(RET + base + t, a + v, mask=m)


def warps_for(block_t: int) -> int:
    """The seed's scaling: 2 warps up to 128 steps, 16 at 2048-4096, 32 beyond."""
    if block_t <= 128:
        return 2
    if block_t <= 512:
        return 4
    if block_t <= 1024:
        return 8
    if block_t <= 4096:
        return 16
    return 32


def run(op: str, rewards, terminated, bootstrap_value, values=None, gamma=0.99, lmbda=0.95):
    """``op`` ("gae" or "discounted_returns") on ``[N, T]`` float32 rows contiguous in time;
    returns ``(advantages, returns)`` or ``(returns,)``, ``[N, T]``."""
    N, T = rewards.shape
    if T > MAX_T:
        raise ValueError(f"the whole-row design holds at most {MAX_T} steps per row, got T={T}")
    gae = op == "gae"
    out = torch.empty_like(rewards)
    ret = torch.empty_like(rewards) if gae else out
    block_t = triton.next_power_of_2(T)
    row_kernel[(N,)](rewards, values if gae else rewards, terminated, bootstrap_value, out, ret, T, gamma,
                  gamma * lmbda, BLOCK_T=block_t, GAE=gae, num_warps=warps_for(block_t))
    return (out, ret) if gae else (out,)
