"""REINFORCE++'s returns in one pass, with the whitening's sums (verl's semantics)::

    G_t = r_t + γ m_{t+1} G_{t+1}        (0 past the end)

the discounted return with the trace cut after every step whose successor is skipped
(``m = 0``: verl multiplies the running return by the mask after each step). On the way
the scan adds the count, the sum and the sum of squares of ``G`` over the kept steps
(``m_t = 1``) to ``[3, SUM_SLOTS]`` float64 slots, so that the advantages,
``masked_whiten(G, m) · m``, cost one more pass (``rlscan.whiten.apply_whitening``).

On the Triton path, for one batch group, without autograd and outside ``torch.compile``;
elsewhere, or where the kernel fails, :func:`returns_and_advantages` returns ``None`` and
the caller runs :func:`rlscan.discounted_returns` on the cut as flags, then
:func:`rlscan.masked_whiten`.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch

from ..._call import Call
from ..._inputs import plan_layout
from ..._spec import tensor_signature
from .. import _skip

_failed: list = []


def returns_and_advantages(rewards, mask, gamma: float, time_dim: int = -1) -> Optional[tuple]:
    """``(advantages, returns)``: ``masked_whiten(G, mask) · mask`` (the rewards' dtype) and
    ``G``, or ``None`` where this path does not apply."""
    if _failed or torch.compiler.is_compiling():
        return None
    call = Call("token_level_rewards", rewards, time_dim)
    if call.numpy_io or call.path() != "triton" or 0 in call.shape:
        return None
    mask = _skip.check_mask(call, "reinforce_plus_plus", mask, None, None)
    if torch.is_grad_enabled() and call.anchor.requires_grad:
        return None
    layout = plan_layout(call.shape, call.time_dim, [call.anchor, mask], [])
    if layout is None or layout.two_level:
        return None
    try:
        returns, sums = _scan(call, layout, mask, float(gamma))
    except Exception as error:  # noqa: BLE001 - a compiler or launcher failure: the other path is as correct
        _failed.append(repr(error))
        warnings.warn(f"REINFORCE++: the one-pass kernel failed ({error!r}); running the return, then the whitening",
                      stacklevel=3)
        return None
    from ...whiten import apply_whitening

    advantages = apply_whitening(returns, sums, mask=mask, out=torch.empty_like(returns))
    return advantages, returns


def _scan(call, layout, mask, gamma: float) -> tuple:
    from ..._triton import launch
    from ..._triton.whiten import new_sums
    from . import kernel

    if mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)
    (returns,) = call.new_outputs(1)
    sums = new_sums(call.device)
    ins, outs = (call.anchor, mask), (returns, sums)
    signature = ("discounted_returns_cut_after_skips", layout.shape, layout.time_dim,
                 tuple(tensor_signature(x) for x in ins + outs[:1]))
    plan = launch.cached_plan(signature)
    if plan is None:
        plan = launch.new_plan(
            (kernel.coeffs_cut_after_skips, kernel.emit_with_sums, True), layout, ins,
            tuple(tuple(layout.strides(x)) for x in ins), outs, tuple(layout.strides(returns)),
            compute_dtype=call.compute_dtype, time_contiguous=call.anchor.stride(call.time_dim) == 1 and layout.T > 1,
            signature=signature)
    plan(ins, outs, (gamma,))
    return returns, sums
