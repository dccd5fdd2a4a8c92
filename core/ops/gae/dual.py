"""``rlscan.gae(..., value_lmbda=)``: the advantages with ``λ``, the value targets with a second
``λ_value`` (VAPO's decoupled λ: the policy's advantages with ``λ_policy`` ≈ 0.95, the critic's
targets with ``λ_value`` = 1)::

    advantages = Â(λ)                   (whitened with ``whiten=True``)
    returns    = Â(λ_value) + V

Each output's per-step arithmetic is the single-λ op's: ``returns`` are the bits of
``gae(..., lmbda=value_lmbda).returns`` wherever that call is exact (the CPU path, or
``exact=True``), and ``advantages`` those of ``gae(..., lmbda=lmbda).advantages``.

One pass where it applies: on the CPU, masked ``[B, T]`` rows contiguous in time with float
``γ``, ``λ`` and ``λ_value`` (:mod:`rlscan.ops.gae.rows`) run one loop that carries the second
advantage beside the first, so each input element is read once. On the Triton path, rows that
the single-λ op walks with one program each (:mod:`rlscan.ops.gae.one_pass`: no look-back in
the settings table's tile, both λ at least ``gae_lambda_min``, no ``exact``) run
``dual_kernel.dual_rows_kernel``, a third scan beside the row kernel's two. Elsewhere
(another layout, a tensor ``λ``, no mask, chained tiles, ``out=``, ``group=``, gradients to
record, ``torch.compile``) the op runs twice, once with each ``λ``, and keeps one output of
each call: correct, and twice the reads.
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch

from ..._dispatch import path_of
from .. import _skip


_rows_failed: list = []


def gae(call, values, boot, term, next_values, truncated, mask, g, lam, value_lam, whiten: bool, exact: bool, out,
        group, again):
    """The tuple ``(advantages, returns)`` of the dual-λ GAE. ``call`` and the tensors are the op's checked
    arguments, ``lam`` and ``value_lam`` the checked ``λ``s (:class:`rlscan._call.Coef`);
    ``again(lmbda, whiten, group, out)`` calls ``rlscan.gae`` on the caller's own
    arguments with these replaced (the fallback's two calls)."""
    if mask is not None and out is None and group is None:
        result = _one_pass(call, values, boot, term, next_values, truncated, mask, g, lam, value_lam, whiten, exact)
        if result is not None:
            return call.finish(result)
    return _two_calls(again, lam, value_lam, whiten, group, out)


def _one_pass(call, values, boot, term, next_values, truncated, mask, g, lam, value_lam, whiten,
              exact) -> Optional[tuple]:
    """The one-pass forms (as :func:`rlscan._dispatch.run_masked` picks a plan variant), or ``None``."""
    if g.tensor is not None or lam.tensor is not None or value_lam.tensor is not None:
        return None
    inputs = (call.anchor, values, boot)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        return None  # autograd records the two calls
    if torch.compiler.is_compiling() or 0 in call.shape:
        return None
    path = path_of(call)
    mask = _skip.check_mask(call, "gae", mask, next_values, truncated, values=path != "cpu")
    if path == "cpu":
        from . import rows

        return rows.advantages(call, values, boot, term, mask, g.value, lam.value, whiten, value_lam.value)
    if exact or _rows_failed:
        return None
    try:
        return _triton_rows(call, values, boot, term, mask, g.value, lam.value, value_lam.value, whiten)
    except Exception as error:  # noqa: BLE001 - a compiler or launcher failure: the two calls are as correct
        _rows_failed.append(repr(error))
        warnings.warn(f"rlscan.gae: the dual-λ row kernel failed ({error!r}); running two calls", stacklevel=4)
        return None


def _triton_rows(call, v, boot, term, mask, gamma: float, lmbda: float, value_lmbda: float, whiten: bool):
    """``dual_kernel.dual_rows_kernel`` where the single-λ op would walk the rows with one
    program each (``one_pass``: rows contiguous in time, the settings table's tile for ``T``
    with no look-back, ``T`` of at least ``gae_row_min_t``, both λ of at least
    ``gae_lambda_min``); else ``None``."""
    from ..._inputs import plan_layout
    from ..._spec import tensor_signature
    from ..._triton import launch, policy
    from . import dual_kernel, one_pass

    r = call.anchor
    table = launch.policy_table(r.device)
    if min(lmbda, value_lmbda) < policy.value("gae_lambda_min", table):
        return None
    layout = plan_layout(call.shape, call.time_dim, [t for t in (r, v, term, mask) if t is not None],
                         [] if boot is None else [boot])
    if layout is None or layout.two_level:
        return None
    tile = one_pass.rows_tile(layout, r, v, term, mask)
    if tile is None or tile[2]:
        return None  # the chained tiles (a look-back) carry two words per row, not three: the two calls
    block_t, warps, _ = tile
    operands = one_pass.row_operands(call, layout, r, v, boot, term, mask)
    if operands is None:
        return None
    ins, outs, s_row = operands
    compute = call.compute_dtype

    def inverse(x):
        return float(np.float32(1.0 / x)) if compute == torch.float32 else 1.0 / x

    inv, value_inv = inverse(lmbda), inverse(value_lmbda)
    scalars = tuple(launch.split(x) for x in (gamma * lmbda, inv - 1.0, inv, gamma * value_lmbda, value_inv - 1.0,
                                              value_inv))
    from ..._triton.whiten import new_sums, sums_in_any_order

    stats = new_sums(r.device) if whiten and sums_in_any_order() else None
    signature = ("dual", layout.T, layout.B, s_row, whiten, r.device.index, tile,
                 tuple(tensor_signature(x) for x in ins + outs))
    one_pass._launch_rows(signature, dual_kernel.dual_rows_kernel, (layout.B, 1, 1),
                          (ins, outs + (stats,), s_row, layout.T, scalars),
                          dict(ACC=launch._acc_dtype(compute), BLOCK_T=block_t), warps, r.device.index)
    if not whiten:
        return outs
    from ...whiten import apply_whitening, masked_whiten

    if stats is None:  # under deterministic algorithms: the statistics in a fixed order
        return masked_whiten(outs[0], mask), outs[1]
    return apply_whitening(outs[0], stats), outs[1]


def _two_calls(again, lam, value_lam, whiten: bool, group, out) -> tuple:
    """The advantages of a call with ``λ`` and the returns of one with ``λ_value``. With ``out``,
    each call writes its other output into one scratch tensor, so that nothing is copied."""
    lmbda = lam.value if lam.tensor is None else lam.tensor
    value_lmbda = value_lam.value if value_lam.tensor is None else value_lam.tensor
    if out is None:
        advantages = again(lmbda, whiten, group, None).advantages
        return advantages, again(value_lmbda, False, None, None).returns
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return again(lmbda, whiten, group, out)  # the op's own check of out= raises
    scratch = np.empty_like(out[1]) if isinstance(out[1], np.ndarray) else torch.empty_like(out[1])
    advantages = again(lmbda, whiten, group, (out[0], scratch)).advantages
    return advantages, again(value_lmbda, False, None, (scratch, out[1])).returns
