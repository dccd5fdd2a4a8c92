"""REINFORCE++'s returns and advantages, as one public call (what verl's and SkyRL's
adapters run): :func:`reinforce_pp_returns`."""
from __future__ import annotations

from typing import Optional

import torch

from ._inputs import check_unit_float

__all__ = ["reinforce_pp_returns"]


def reinforce_pp_returns(rewards, mask, *, gamma: float, cu_seqlens=None, time_dim: int = -1, exact: bool = False,
                         compute_dtype: Optional[torch.dtype] = None) -> tuple:
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

    Args:
        rewards: a floating tensor, time along ``time_dim`` (verl's ``[B, T]``: -1).
        mask: 0/1 values (bool, integer or floating) of the rewards' shape; ``None`` only
            with ``cu_seqlens`` (every token kept).
        gamma: a float in [0, 1].
        cu_seqlens: packed sequences, as :func:`rlscan.gae` takes them (docs/api.md).
        time_dim: 0 or -1.
        exact: on the Triton path, the return one step at a time in the loop's order (the
            CPU path always is).
        compute_dtype: ``torch.float64`` carries the running return in float64 (verl's with a
            float64 mask); default float32, or float64 for float64 rewards.
    """
    from .ops.discounted_returns import kept_returns

    if compute_dtype not in (None, torch.float32, torch.float64):
        raise ValueError(f"compute_dtype must be None, torch.float32 or torch.float64, got {compute_dtype!r}")
    return kept_returns.returns_and_advantages(rewards, mask, check_unit_float("gamma", gamma),
                                               cu_seqlens=cu_seqlens, time_dim=time_dim, exact=exact,
                                               compute_dtype=compute_dtype)
