"""REINFORCE++'s returns and advantages (verl ≥ 0.9's semantics)::

    G'_T = 0
    G_t = r_t + γ G'_{t+1},  G'_t = G_t          where m_t = 1
    G_t = 0,                 G'_t = G'_{t+1}     where m_t = 0
    advantages = masked_whiten(G, m) · m

``G'`` is the running return: a skipped step (``m = 0``: padding after EOS, an observation
span inside a multi-turn response) passes it through unchanged, so a reward after an
observation span reaches the turns before it, and its own return is 0. ``G`` at the kept
steps is the masked discounted return (``rlscan.discounted_returns(..., mask=m)``).

Three paths, each computing ``G`` in the order of verl's loop (``r_t + γ G'``):

* the Triton path (one batch group, no autograd, outside ``torch.compile``, not exact):
  one scan that writes ``G`` and adds the count, sum and sum of squares of ``G`` over the
  kept steps to ``[3, SUM_SLOTS]`` float64 slots, then one pass that whitens and masks
  (``rlscan.whiten.apply_whitening``);
* the CPU path, rows contiguous in time (verl's ``[B, T]``): one loop over each row that
  also gathers the sums, then one pass that whitens and masks (:mod:`rlscan._cpu_rows`);
* elsewhere: :func:`rlscan.discounted_returns` with the mask, its skipped steps set to 0,
  then :func:`rlscan.masked_whiten`.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch

from ... import _packed
from ..._call import Call
from ..._inputs import check_bool, plan_layout
from ..._spec import tensor_signature
from .. import _skip

_failed: list = []


def returns_and_advantages(rewards, mask, gamma: float, *, cu_seqlens=None, time_dim: int = -1, exact: bool = False,
                           compute_dtype: Optional[torch.dtype] = None) -> tuple:
    """``(advantages, returns)``: ``masked_whiten(G, mask) · mask`` and ``G``, each in the
    rewards' dtype.

    Args:
        rewards: a floating tensor, time along ``time_dim``.
        mask: 0/1 values (bool, integer or floating) of the rewards' shape.
        gamma: a float in [0, 1].
        cu_seqlens: packed sequences (``rlscan.gae``'s ``cu_seqlens``): ``rewards`` and
            ``mask`` 1-D ``[total]``, sequence ``s`` from ``cu_seqlens[s]`` to
            ``cu_seqlens[s + 1]``; ``mask`` may then be ``None`` (every token kept). Nested
            jagged ``rewards`` and ``mask`` carry their offsets instead. The whitening is
            over the kept tokens of all sequences. No autograd.
        exact: on the Triton path, run the return one step at a time in the loop's order
            (the CPU path always does).
        compute_dtype: float64 carries the running return in float64 (verl does with a
            float64 mask); default float32, or float64 for float64 rewards.
    """
    if _packed.is_packed(rewards, cu_seqlens):
        return _packed.kept_returns(rewards, mask, gamma, cu_seqlens=cu_seqlens, time_dim=time_dim, exact=exact,
                                    compute_dtype=compute_dtype)
    call = Call("token_level_rewards", rewards, time_dim)
    exact = check_bool("exact", exact)  # the fused paths answer before call.run would check it
    widen = compute_dtype == torch.float64 and call.compute_dtype != torch.float64
    fusable = 0 not in call.shape and not call.numpy_io and not torch.compiler.is_compiling()
    path = call.path()
    on_rows = fusable and path == "cpu" and not (torch.is_grad_enabled() and call.anchor.requires_grad)
    # the CPU row loop checks the mask's values as it reads them
    mask = _skip.check_mask(call, "reinforce_plus_plus", mask, None, None, values=not on_rows)
    if fusable and path == "triton" and not exact and not widen and not torch.are_deterministic_algorithms_enabled():
        # (the one pass gathers the whitening's sums in the order its programs finish)
        fused = _one_pass(call, mask, float(gamma))
        if fused is not None:
            return fused
    if on_rows:
        fused = _rows(call, mask, float(gamma), torch.float64 if widen else call.compute_dtype)
        if fused is not None:
            return fused
        _skip.check_mask_values(call, mask)
    from ...whiten import masked_whiten
    from .op import discounted_returns

    with torch.no_grad():
        # verl carries a float64 running return where the mask is float64 (a rare input: a copy)
        anchor = call.anchor.double() if widen else call.anchor
        returns = discounted_returns(anchor, mask=mask, gamma=gamma, time_dim=call.time_dim, exact=exact)
        returns = returns.to(call.anchor.dtype).masked_fill_(mask == 0, 0)
        return masked_whiten(returns, mask, zero_skipped=True), returns


def _rows(call: Call, mask, gamma: float, compute: torch.dtype) -> Optional[tuple]:
    """The CPU row loop with the sums, then the whitening (:func:`rows_then_whitened`)."""
    from .cpu import kept_returns_rows_loop

    return rows_then_whitened(call, mask, gamma, compute, kept_returns_rows_loop)


def rows_then_whitened(call: Call, mask, gamma: float, compute: torch.dtype, loop) -> Optional[tuple]:
    """``(advantages, returns)`` from a row loop of a return form (``loop(r, mask, gamma, one,
    out, sums, bad)``: the returns written and each row's whitening sums gathered), then the
    whitening pass; ``None`` where it does not apply (rows not contiguous in time, dtypes the
    row loops do not read). Raises ``ValueError`` where the mask holds values other than 0
    and 1 (the loop counts them)."""
    from ... import _cpu_rows

    if not _cpu_rows.readable((call.anchor,), (mask,)) or call.anchor.dtype not in (torch.float32, torch.float64):
        return None
    r, m = _cpu_rows.rows_of(call.anchor, call.time_dim), _cpu_rows.rows_of(mask, call.time_dim)
    if r is None or m is None:
        return None
    returns = _cpu_rows.new_rows(r, call.anchor.dtype)
    advantages = _cpu_rows.new_rows(r, call.anchor.dtype)
    a_r, a_m, a_ret, a_adv = (_cpu_rows.array(x) for x in (r, m, returns, advantages))
    one = (np.float64 if compute == torch.float64 else np.float32)(1)
    sums = np.empty((r.shape[0], 4))
    bad = np.zeros(r.shape[0], dtype=np.int64)
    key = (loop.__name__, _cpu_rows.signature(a_r, a_m, a_ret), compute)
    groups = -(-r.shape[0] // _cpu_rows.ROWS_AT_ONCE)
    _cpu_rows.run(loop, key, (groups, r.numel()), a_r, a_m, type(one)(gamma), one, a_ret, sums, bad)
    _skip.check_counted_values(call, mask, bad)
    # the advantages in the returns' dtype, as masked_whiten computes them
    _cpu_rows.whiten(a_ret, sums, a_ret.dtype.type(1), mask=a_m, out=a_adv)
    if call.time_dim not in (1, -1):
        returns, advantages = returns.t(), advantages.t()
    return advantages, returns


def _one_pass(call: Call, mask, gamma: float) -> Optional[tuple]:
    """The Triton scan with the sums, then the whitening; ``None`` where it does not apply."""
    if _failed or (torch.is_grad_enabled() and call.anchor.requires_grad):
        return None
    layout = plan_layout(call.shape, call.time_dim, [call.anchor, mask], [])
    if layout is None or layout.two_level:
        return None
    try:
        returns, sums = _scan(call, layout, mask, gamma)
    except Exception as error:  # noqa: BLE001 - a compiler or launcher failure: the other path is as correct
        _failed.append(repr(error))
        warnings.warn(f"REINFORCE++: the one-pass kernel failed ({error!r}); running the return, then the whitening",
                      stacklevel=4)
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
    signature = ("discounted_returns_kept_returns", layout.shape, layout.time_dim,
                 tuple(tensor_signature(x) for x in ins + outs[:1]))
    plan = launch.cached_plan(signature)
    if plan is None:
        plan = launch.new_plan(
            (kernel.coeffs_kept_returns, kernel.emit_kept_with_sums, True), layout, ins,
            tuple(tuple(layout.strides(x)) for x in ins), outs, tuple(layout.strides(returns)),
            compute_dtype=call.compute_dtype, time_contiguous=call.anchor.stride(call.time_dim) == 1 and layout.T > 1,
            signature=signature)
    plan(ins, outs, (gamma,))
    return returns, sums
