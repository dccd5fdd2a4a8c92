"""The masked GAE in one pass over its inputs (docs/semantics.md, "One pass: two lanes").

With a mask, a kept step needs the value of the next kept step, however far: the scan
must carry two numbers, ``Â`` and ``W`` (the next kept value). For a scalar ``λ > 0``
the pair decouples into two independent scans, ``E = Â + W/λ`` (``β = m γλν + 1 − m``)
and ``W`` (``β = 1 − m``), so the engine runs each environment as two lanes of its
batch axis that read the same inputs, and the emit step writes ``Â = E − W/λ``. Every
kernel kind applies, each input is read from memory once, and the whitening's sums can
be gathered on the way (``stats``).

Used on the Triton path for a scalar ``λ ≥ LAMBDA_MIN`` (below it ``W/λ`` would cost
precision), a layout with one batch group, and no ``exact``; otherwise, or if the
kernels fail, the op runs its two scans (:func:`rlscan.gae`'s masked path).
"""
from __future__ import annotations

import warnings
from typing import Optional

import numpy as np
import torch

from ..._inputs import Layout, plan_layout
from ..._spec import tensor_signature

LAMBDA_MIN = 0.5
_failed: list = []


def advantages(call, r, v, boot, term, mask, gamma_value, gamma_tensor, lmbda: float, stats: Optional[torch.Tensor]):
    """``(advantages, returns)`` of the masked GAE, or ``None`` where this path does not apply."""
    if _failed or not lmbda >= LAMBDA_MIN:
        return None
    layout = plan_layout(call.shape, call.time_dim, [t for t in (r, v, term, mask, gamma_tensor) if t is not None],
                         [] if boot is None else [boot])
    if layout is None or layout.two_level:
        return None
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
