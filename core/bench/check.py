"""Every result is checked before it is timed, so a fast wrong answer never counts.

The truth is the float64 reference loop (``rlscan.reference``) where it is cheap
enough, and otherwise rlscan's sequential ``exact=True`` evaluation in float64 (on
the GPU's exact kernel, or the CPU loop). A result passes when, for every output,
``‖got − truth‖₂ / ‖truth‖₂`` stays within the tolerance of the input dtype.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .cases import Case, outputs_of

REFERENCE_MAX_ELEMENTS = 2_000_000
REFERENCE_MAX_T = 16_384  # the reference is a Python loop over time

TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}

REFERENCE = "float64 reference loop (rlscan.reference)"
EXACT_F64 = "rlscan exact=True in float64"


def truth(case: Case, inputs: dict, T: int, N: int) -> tuple:
    """``(outputs as float64 tensors on the inputs' device, how they were computed)``."""
    import rlscan
    from rlscan import reference

    device = next(iter(inputs.values())).device
    if T * N <= REFERENCE_MAX_ELEMENTS and T <= REFERENCE_MAX_T:
        outs = outputs_of(case.call(reference, inputs))
        return tuple(o.to(device) for o in outs), REFERENCE
    wide = {k: (x.double() if x.is_floating_point() else x) for k, x in inputs.items()}
    return outputs_of(case.call(rlscan, wide, exact=True)), EXACT_F64


def relative_error(got: tuple, want: tuple) -> float:
    """The largest ``‖got − want‖₂ / ‖want‖₂`` over the outputs (inf for NaN or a missing output)."""
    if len(got) != len(want):
        return math.inf
    worst = 0.0
    for g, w in zip(got, want):
        g = torch.from_numpy(np.ascontiguousarray(g)) if isinstance(g, np.ndarray) else g
        g = g.detach().to(w.device, torch.float64)
        if g.shape != w.shape:
            return math.inf
        num = torch.linalg.vector_norm(g - w).item()
        den = torch.linalg.vector_norm(w).item()
        err = num / den if den > 0 else num
        if not math.isfinite(err):
            return math.inf
        worst = max(worst, err)
    return worst
