"""The CPU path: each op's loop over time, compiled by numba, vectorised over environments.

The loops run one step at a time in the order of the reference loop's code, in the
compute dtype (float32, or float64 for float64 inputs), so they are exact: bit for bit
the plain float32 loops that Stable-Baselines3 and CleanRL run.

Each loop sees ``[T, Bh, Bl]`` numpy views of its inputs (see ``_inputs``), made
without copies. Absent inputs arrive as ``None``, so numba compiles a version per
combination with the dead branches pruned and the loop over environments vectorises.
float16 and bfloat16 inputs (which numba cannot read) are converted to float32 first.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

try:
    from numba import njit as _njit

    def njit(fn):
        return _njit(cache=True, nogil=True)(fn)

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps exotic platforms working
    HAVE_NUMBA = False

    def njit(fn):
        return fn


_NUMPY_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}


def _geometry(t: torch.Tensor, layout, kind: str) -> tuple:
    """``(shape, strides)`` of ``t`` seen as ``[T, Bh, Bl]`` (``[1, Bh, Bl]`` for
    per-environment values, ``[T, Bh, Bl, A]`` for action tables)."""
    from ._call import kernel_strides

    s = kernel_strides(layout, t, kind)
    shape = (1 if kind == "batch" else layout.T, layout.B // layout.B_lo, layout.B_lo)
    if kind == "table":
        shape, s = shape + (t.shape[-1],), s[:4]
    return shape, tuple(s)


def _array(t: torch.Tensor, geometry: tuple, kind: str, compute_dtype: torch.dtype) -> np.ndarray:
    """The numpy view of ``t`` that the loop reads (a converted copy for types numba cannot read)."""
    v = t.detach().as_strided(*geometry, t.storage_offset())
    if v.dtype == torch.bool:
        return v.numpy().view(np.uint8)
    if kind == "flag" and v.dtype not in (torch.uint8, torch.float32, torch.float64):
        return (v != 0).to(torch.uint8).numpy()  # numba reads neither half type; "set" is "non-zero"
    if kind == "flag":
        return v.numpy()
    if v.is_floating_point() and v.dtype != compute_dtype:
        v = v.to(compute_dtype)  # numba reads no half types; mixed dtypes meet in the compute dtype
    return v.numpy()


def cpu_runner(op, layout, compute_dtype):
    """``runner(tensors, outs, scalars)``: the CPU loop of ``op`` for tensors laid out as ``layout``.

    A runner serves one call signature (shapes, strides, dtypes), so the views' geometry is
    worked out on its first call and kept."""
    geometry = []

    def runner(tensors, outs, scalars):
        if not HAVE_NUMBA:
            warnings.warn("numba is not installed: rlscan's CPU path runs as plain Python, slowly", stacklevel=2)
        # outputs not in the compute dtype are computed in a buffer of it, then copied
        work = [o if o is None or o.dtype == compute_dtype else torch.empty_like(o, dtype=compute_dtype) for o in outs]
        if not geometry:
            geometry.append([None if t is None else _geometry(t, layout, k) for t, k in zip(tensors, op.kinds)])
            geometry.append([None if w is None else _geometry(w, layout, "series") for w in work])
        ins_geometry, work_geometry = geometry
        arrays = [None if t is None else _array(t, g, k, compute_dtype)
                  for t, g, k in zip(tensors, ins_geometry, op.kinds)]
        views = [None if w is None else _array(w, g, "series", compute_dtype) for w, g in zip(work, work_geometry)]
        op.cpu(layout, arrays, scalars, views, _NUMPY_DTYPE[compute_dtype])
        for o, w in zip(outs, work):
            if o is not w:
                o.copy_(w)

    return runner
