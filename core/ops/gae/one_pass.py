"""The masked GAE in one pass over its inputs (docs/semantics.md, "One pass: two lanes").

With a mask, a kept step needs the value of the next kept step, however far: the scan
must carry two numbers, ``Â`` and ``W`` (the next kept value). For a scalar ``λ > 0``
the pair decouples into two independent scans, ``E = Â + W/λ`` (``β = m γλν + 1 − m``)
and ``W`` (``β = 1 − m``), so the engine runs each environment as two lanes of its
batch axis that read the same inputs, and the emit step writes ``Â = E − W/λ``. Every
kernel kind applies, each input is read from memory once, and the whitening's sums can
be gathered on the way (``stats``).

Rows contiguous in time (``[B, T]`` responses) with a scalar ``γ`` and at least the
settings table's ``gae_row_min_t`` steps run the same two scans in a kernel of their own:
both scans in one ``tl.associative_scan`` of four series, each tile walked from its end,
the tiles of a row walked by one program (``kernel.masked_rows_kernel``) or, for long rows,
one per program and chained (``kernel.masked_rows_chained_kernel``), as the table's
``gae_row_tiles`` says: ``(most T, BLOCK_T, warps, look-back)``, the first entry whose
bound holds the rows; a look-back of 0: one program walks each row; above 0: one program
per tile, chained along the row by a look-back of that many words per round trip.

Used on the Triton path for a scalar ``λ`` of at least the table's ``gae_lambda_min``
(below it ``W/λ`` would cost precision), a layout with one batch group, and no ``exact``;
otherwise, or if the kernels fail, the dispatcher runs the op's two scans (this module is
the Triton plan variant of :func:`rlscan._dispatch.run_masked`). If the row kernel fails,
the lanes take over. The three decisions, with their reasons and evidence, are in the
table's ``policy`` (``rlscan plan gae`` prints them).
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch

from ... import _cache
from ..._inputs import Layout, plan_layout
from ..._spec import tensor_signature
from ..._triton import policy

#: tests only: chained tiles at odd positions publish no state, so that the look-back must
#: compose published pairs (Triton's interpreter runs programs one after another)
ROW_TEST_LOOKBACK = False
_failed: list = []
_rows_failed: list = []


def plan(call, tensors: tuple, scalars: tuple, whiten: bool) -> Optional[tuple]:
    """The masked GAE's Triton plan variant (:class:`rlscan._spec.Masked`): :func:`advantages`
    on the op's inputs, where ``λ`` is a float; with ``whiten``, the advantages standardised
    from the sums the scan gathered (under deterministic algorithms, by :func:`rlscan.masked_whiten`,
    which adds them in a fixed order)."""
    r, v, _, boot, term, mask, gamma_tensor, lmbda_tensor = tensors
    if lmbda_tensor is not None:
        return None
    from ..._triton.whiten import new_sums, sums_in_any_order

    gamma, lmbda, _ = scalars
    stats = new_sums(call.device) if whiten and sums_in_any_order() else None
    result = advantages(call, r, v, boot, term, mask, gamma, gamma_tensor, lmbda, stats)
    if result is None or not whiten:
        return result
    from ...whiten import apply_whitening, masked_whiten

    adv, ret = result
    if stats is None:  # under deterministic algorithms: the statistics in a fixed order
        return masked_whiten(adv, mask), ret
    return apply_whitening(adv, stats), ret


def advantages(call, r, v, boot, term, mask, gamma_value, gamma_tensor, lmbda: float, stats: Optional[torch.Tensor]):
    """``(advantages, returns)`` of the masked GAE, or ``None`` where this path does not apply."""
    if _failed or not lmbda >= policy.value("gae_lambda_min", _policy_table(r.device)):
        return None
    layout = plan_layout(call.shape, call.time_dim, [t for t in (r, v, term, mask, gamma_tensor) if t is not None],
                         [] if boot is None else [boot])
    if layout is None or layout.two_level:
        return None
    if gamma_tensor is None and not _rows_failed:
        try:
            result = _run_rows(call, layout, r, v, boot, term, mask, gamma_value, lmbda, stats)
        except Exception as error:  # noqa: BLE001 - a compiler or launcher failure: the lanes are as correct
            _rows_failed.append(repr(error))
            warnings.warn(f"rlscan.gae: the masked row kernel failed ({error!r}); running two lanes", stacklevel=3)
            result = None
        if result is not None:
            return result
    # every environment as two neighbouring lanes: environments become the outer group,
    # and the lane axis has stride 0 in every input, so both lanes read the same elements
    lanes = Layout(layout.shape, layout.time_dim, layout.T, 2 * layout.B, 2, layout.lo_dims, ())
    try:
        return _run(call, lanes, r, v, boot, term, mask, gamma_value, gamma_tensor, lmbda, stats)
    except Exception as error:  # noqa: BLE001 - a compiler or launcher failure: the two scans are as correct
        _failed.append(repr(error))
        warnings.warn(f"rlscan.gae: the one-pass masked kernel failed ({error!r}); running two scans", stacklevel=3)
        return None


def _run(call, lanes, r, v, boot, term, mask, gamma_value, gamma_tensor, lmbda, stats):
    from ..._triton import launch
    from . import kernel

    compute = call.compute_dtype
    inv = float(np.float32(1.0 / lmbda)) if compute == torch.float32 else 1.0 / lmbda
    init = None
    if boot is not None:  # the carries past the end: E_T = W_T / λ (rounded as the emit step divides), W_T
        b = boot.to(compute)
        init = torch.stack([b * torch.tensor(inv, dtype=compute, device=b.device), b], dim=-1).contiguous()
    if mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)
    outs = call.new_outputs(2) + (stats,)
    ins = (r, v, term, mask, gamma_tensor, init)
    signature = ("gae_lanes", lanes.shape, lanes.time_dim, stats is not None,
                 tuple(tensor_signature(x) for x in ins + outs[:2]))
    plan = launch.cached_plan(signature)
    if plan is None:
        strides = tuple((0, 0, 0) if x is None else tuple(lanes.strides(x)) for x in ins[:5]) + ((0, 0, 0),)
        plan = launch.new_plan(
            (kernel.coeffs_lanes, kernel.emit_lanes, True), lanes, ins, strides, outs, tuple(lanes.strides(outs[0])),
            compute_dtype=compute, time_contiguous=r.stride(call.time_dim) == 1 and lanes.T > 1,
            init_of=5, init_strides=(0, 2, 1), signature=signature, lane_pairs=True)
    if any(c.block_b % 2 for c in plan.candidates):
        return None  # a lane pair must share a program (forced settings only)
    gamma_lmbda = gamma_value * lmbda
    plan(ins, outs, (gamma_value, lmbda, gamma_lmbda, inv - 1.0, inv))
    return outs[:2]


def _policy_table(device):
    from ..._triton import launch

    return launch.policy_table(device)


def _row_tile(T: int, device):
    tiles = policy.value("gae_row_tiles", _policy_table(device))
    return next((tuple(tile) for most, *tile in tiles if T <= most), None)


def rows_tile(layout, r, v, term, mask):
    """The settings table's ``(BLOCK_T, warps, look-back)`` for walking ``layout``'s rows one
    program each, or ``None`` where the rows are not contiguous in time, their length is under
    ``gae_row_min_t`` or has no entry in ``gae_row_tiles``."""
    tile = _row_tile(layout.T, r.device)
    min_t = policy.value("gae_row_min_t", _policy_table(r.device))
    if tile is None or layout.T < min_t or any(x is not None and layout.strides(x)[0] != 1 for x in (r, v, term, mask)):
        return None
    return tile


def row_operands(call, layout, r, v, boot, term, mask):
    """The row kernels' ``(ins, outs, s_row)``: the inputs with bool flags read as bytes, two
    fresh outputs, and each operand's stride from row to row; ``None`` where an output is not
    contiguous in time."""
    outs = call.new_outputs(2)
    if any(layout.strides(o)[0] != 1 for o in outs):
        return None
    if mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)
    if term is not None and term.dtype == torch.bool:
        term = term.view(torch.uint8)
    ins = (r, v, term, mask, boot)
    s_row = tuple(layout.strides(x)[2] for x in (r, v, term, mask)) + (layout.batch_strides(boot)[2],) + tuple(
        layout.strides(o)[2] for o in outs)
    return ins, outs, s_row


def _run_rows(call, layout, r, v, boot, term, mask, gamma_value, lmbda, stats):
    """The masked GAE over rows contiguous in time (``kernel.masked_rows_kernel``, or its
    chained form), or ``None`` where the rows are not contiguous in time, their length is
    under the table's ``gae_row_min_t`` or has no entry in its ``gae_row_tiles``, or the
    chained form would need float64 words or run under ``torch.use_deterministic_algorithms``
    (the engine's two lanes then run)."""
    from ..._triton import launch
    from . import kernel

    tile = rows_tile(layout, r, v, term, mask)
    if tile is None:
        return None
    block_t, warps, lookback = tile
    compute = call.compute_dtype
    if lookback and (compute != torch.float32 or torch.are_deterministic_algorithms_enabled()):
        return None  # a look-back word holds two float32 values, and composes in a varying order
    operands = row_operands(call, layout, r, v, boot, term, mask)
    if operands is None:
        return None
    ins, outs, s_row = operands
    inv = float(np.float32(1.0 / lmbda)) if compute == torch.float32 else 1.0 / lmbda
    scalars = (launch.split(gamma_value * lmbda), launch.split(inv - 1.0), launch.split(inv))
    signature = (layout.T, layout.B, s_row, stats is not None, r.device.index, tile,
                 tuple(tensor_signature(x) for x in ins + outs))
    constexprs = dict(ACC=launch._acc_dtype(compute), BLOCK_T=block_t)
    if lookback:
        n_chunks = -(-layout.T // block_t)
        # a word per tile, row and scan (E, W), then the ticket counter: every bit set
        words = torch.full((n_chunks * 2 * layout.B + 1,), -1, dtype=torch.int64, device=r.device)
        args = (ins, outs + (stats,), s_row, layout.T, scalars, words, layout.B, n_chunks)
        _launch_rows(signature, kernel.masked_rows_chained_kernel, (n_chunks * layout.B, 1, 1), args,
                     dict(constexprs, LOOKBACK=lookback, TEST_LOOKBACK=ROW_TEST_LOOKBACK), warps, r.device.index)
    else:
        args = (ins, outs + (stats,), s_row, layout.T, scalars)
        _launch_rows(signature, kernel.masked_rows_kernel, (layout.B, 1, 1), args, constexprs, warps,
                     r.device.index)
    return outs


def _launch_rows(signature, fn, grid, args, constexprs, warps, device_index) -> None:
    """Through Triton's ``JITFunction`` the first time for a signature, then the compiled
    kernel's launcher directly, as ``LaunchPlan`` does."""
    from ..._triton import launch

    key = ("gae rows",) + signature + launch.settings_key()  # a forced tile compiles another kernel
    compiled = _cache.CACHE.get(key)
    if compiled is not None:
        launch.direct_launch(compiled, grid, device_index, args)
        return
    compiled = launch.first_launch(fn, grid, args, constexprs, warps)
    if compiled is not None:
        _cache.CACHE.keep(key, compiled)
