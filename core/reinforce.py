"""REINFORCE++'s returns and advantages, as one public call (what verl's and SkyRL's
adapters run): :func:`reinforce_pp_returns`.

Its reset form (``reset_at_skipped=True``, SkyRL's and verl's before 0.9) runs here: on the
CPU, for ``[B, T]`` rows contiguous in time, one loop over the rows writes the returns and
gathers the whitening's sums (:func:`reset_returns_rows_loop`), then one pass whitens
(``rlscan._cpu_rows.whiten``); elsewhere GAE with values 0 and ``λ = 1``, each step's
episode ending where the next step is skipped, then :func:`rlscan.masked_whiten`. Both add
in the same order: the same bits.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ._call import Call
from ._cpu import njit, prange
from ._cpu_rows import ROWS_AT_ONCE, load_value, row_sums, step_helper
from ._inputs import check_bool, check_unit_float

__all__ = ["reinforce_pp_returns"]


def reinforce_pp_returns(rewards, mask, *, gamma: float, cu_seqlens=None, time_dim: int = -1, exact: bool = False,
                         compute_dtype: Optional[torch.dtype] = None, reset_at_skipped: bool = False) -> tuple:
    """REINFORCE++'s ``(advantages, returns)`` over token rewards with a skip mask ``m``::

        G'_T = 0
        G_t = r_t + γ G'_{t+1},  G'_t = G_t          where m_t = 1
        G_t = 0,                 G'_t = G'_{t+1}     where m_t = 0
        returns = G,  advantages = masked_whiten(G, m) · m

    ``G'`` is the running return: a skipped step (padding after EOS, an observation span of a
    multi-turn response) passes it through unchanged, so a reward after an observation span
    reaches the turns before it. ``G`` at the kept steps is
    ``rlscan.discounted_returns(rewards, mask=m, gamma=γ)``; the whitening is over the kept
    steps of the whole batch, as :func:`rlscan.masked_whiten` (``zero_skipped=True``). Each
    result is in the rewards' dtype; no autograd.

    With ``reset_at_skipped=True`` (SkyRL's, and verl's before 0.9), the running return is
    reset after every skipped step instead, and every step has a return::

        G_T = 0,   G_t = r_t + γ (G_{t+1} · m_{t+1})    at every step

    (a skipped step's own return still takes the one after it; the return of the step before
    it starts again from its reward). The advantages are ``masked_whiten(G, m) · m`` as above.

    Args:
        rewards: a floating tensor, time along ``time_dim`` (verl's ``[B, T]``: -1).
        mask: 0/1 values (bool, integer or floating) of the rewards' shape; ``None`` only
            with ``cu_seqlens`` (every token kept).
        gamma: a float in [0, 1].
        cu_seqlens: packed sequences, as :func:`rlscan.gae` takes them (docs/api.md); not
            with ``reset_at_skipped``.
        time_dim: 0 or -1.
        exact: on the Triton path, the return one step at a time in the loop's order (the
            CPU path always is).
        compute_dtype: ``torch.float64`` carries the running return in float64 (verl's and
            SkyRL's with a float64 mask); default float32, or float64 for float64 rewards.
        reset_at_skipped: the reset form above.
    """
    if compute_dtype not in (None, torch.float32, torch.float64):
        raise ValueError(f"compute_dtype must be None, torch.float32 or torch.float64, got {compute_dtype!r}")
    gamma = check_unit_float("gamma", gamma)
    if check_bool("reset_at_skipped", reset_at_skipped):
        if cu_seqlens is not None:
            raise ValueError("reset_at_skipped takes padded rows (a mask of the rewards' shape), not cu_seqlens")
        return _reset(rewards, mask, gamma, time_dim, check_bool("exact", exact), compute_dtype)
    from .ops.discounted_returns import kept_returns

    return kept_returns.returns_and_advantages(rewards, mask, gamma, cu_seqlens=cu_seqlens, time_dim=time_dim,
                                               exact=exact, compute_dtype=compute_dtype)


# ----------------------------------------------------------------------------- the reset form


def _reset(rewards, mask, gamma: float, time_dim: int, exact: bool, compute_dtype) -> tuple:
    from .ops import _skip

    call = Call("token_level_rewards", rewards, time_dim)
    if mask is None:
        raise ValueError("mask is required: 1 where the step counts, 0 where it is skipped")
    widen = compute_dtype == torch.float64 and call.compute_dtype != torch.float64
    compute = torch.float64 if widen else call.compute_dtype
    on_rows = (call.path() == "cpu" and 0 not in call.shape and not call.numpy_io
               and not torch.compiler.is_compiling())
    # the CPU row loop checks the mask's values as it reads them
    mask = _skip.check_mask(call, "reinforce_plus_plus", mask, None, None, values=not on_rows)
    if on_rows:
        from .ops.discounted_returns.kept_returns import rows_then_whitened

        done = rows_then_whitened(call, mask, gamma, compute, reset_returns_rows_loop)
        if done is not None:
            return done
        _skip.check_mask_values(call, mask)
    from .ops.gae import gae
    from .whiten import masked_whiten

    with torch.no_grad():
        x = call.anchor.to(compute)
        # the episode ends at t where step t + 1 is skipped, and at the last step
        td = call.time_dim
        ends = torch.empty(call.shape, dtype=torch.bool, device=call.device)
        torch.eq(mask.narrow(td, 1, call.shape[td] - 1), 0, out=ends.narrow(td, 0, call.shape[td] - 1))
        ends.narrow(td, call.shape[td] - 1, 1).fill_(True)
        zeros = torch.zeros((), dtype=compute, device=call.device).expand(call.shape)
        returns = gae(x, zeros, bootstrap_value=torch.zeros((), dtype=compute, device=call.device).expand(
            call.batch_shape), terminated=ends, gamma=gamma, lmbda=1.0, time_dim=td, exact=exact).advantages
        returns = returns.to(call.anchor.dtype)
        return masked_whiten(returns, mask, zero_skipped=True), returns


@step_helper
def _reset_step(r, mask, b, t, gamma, one, out, bad, carried, n, s, q, c):
    """One step of one row of :func:`reset_returns_rows_loop`: the carried state in, the state out."""
    g = load_value(r, b, t, one) + gamma * carried
    out[b, t] = g
    k = mask[b, t]
    if k != 0:
        if k != 1:
            bad += 1
        y = np.float64(out[b, t])  # the return as stored, which the whitening reads
        if n == 0.0:
            c = y
        d = y - c
        n += 1.0
        s += d
        q += d * d
    # the product with the mask (SkyRL's), the sign of a zero and a NaN's propagation included
    return bad, g * load_value(mask, b, t, one), n, s, q, c


@njit
def reset_returns_rows_loop(r, mask, gamma, one, out, sums, bad):
    """The reset form's returns over ``[B, T]`` rows contiguous in time, each row walked from
    its end: ``G = r_t + γ G'``, then ``G' = G · m_t`` carried to step ``t − 1``, in
    ``one``'s dtype, written in ``out``'s. A thread walks ``ROWS_AT_ONCE`` rows side by side:
    one row's steps form a chain of dependent operations, and independent rows fill the
    processor's pipeline meanwhile. Each row's count, ``Σ(G − c)`` and ``Σ(G − c)²`` over its
    kept steps, and ``c``, to ``sums``; ``bad[b]`` counts the mask's values other than 0 and 1."""
    B, T = r.shape
    zero = one - one
    for p in prange((B + ROWS_AT_ONCE - 1) // ROWS_AT_ONCE):
        b0 = p * ROWS_AT_ONCE
        # a short last group walks its last row again: the same values, written twice, counted once
        b1, b2, b3 = min(b0 + 1, B - 1), min(b0 + 2, B - 1), min(b0 + 3, B - 1)
        g0, g1, g2, g3 = zero, zero, zero, zero
        n0, s0, q0, c0 = 0.0, 0.0, 0.0, 0.0
        n1, s1, q1, c1 = 0.0, 0.0, 0.0, 0.0
        n2, s2, q2, c2 = 0.0, 0.0, 0.0, 0.0
        n3, s3, q3, c3 = 0.0, 0.0, 0.0, 0.0
        e0, e1, e2, e3 = 0, 0, 0, 0
        for k in range(T):
            t = T - 1 - k
            e0, g0, n0, s0, q0, c0 = _reset_step(r, mask, b0, t, gamma, one, out, e0, g0, n0, s0, q0, c0)
            e1, g1, n1, s1, q1, c1 = _reset_step(r, mask, b1, t, gamma, one, out, e1, g1, n1, s1, q1, c1)
            e2, g2, n2, s2, q2, c2 = _reset_step(r, mask, b2, t, gamma, one, out, e2, g2, n2, s2, q2, c2)
            e3, g3, n3, s3, q3, c3 = _reset_step(r, mask, b3, t, gamma, one, out, e3, g3, n3, s3, q3, c3)
        bad[b0], bad[b1], bad[b2], bad[b3] = e0, e1, e2, e3
        row_sums(sums, b3, n3, s3, q3, c3)
        row_sums(sums, b2, n2, s2, q2, c2)
        row_sums(sums, b1, n1, s1, q1, c1)
        row_sums(sums, b0, n0, s0, q0, c0)
