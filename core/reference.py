"""Float64 reference implementations of every op and of ``masked_whiten``, written straight
from docs/semantics.md.

Each op's is a plain loop over time, vectorised over environments, computed in float64 on
the CPU; each returns float64 CPU tensors. They take the same arguments as the ops
(without ``exact``, ``out_dtype`` and ``out``).
"""
import functools

import numpy as np
import torch

from ._reference import as_f64
from .ops import REGISTRY


def _quiet(fn):
    """``fn`` without numpy's warnings about NaN and infinity, which propagate as docs/semantics.md
    ("Numbers") says, as they do in the ops."""
    @functools.wraps(fn)
    def reference(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return reference


globals().update({op.name: _quiet(op.ref) for op in REGISTRY})


@_quiet
def masked_whiten(values, mask, *, shift_mean=True, eps=1e-8, zero_skipped=False):
    """docs/semantics.md, "Masked whitening": the kept positions' mean and Bessel-corrected
    variance, in float64, applied to every position."""
    x = as_f64(values)
    keep = as_f64(mask) != 0
    n = int(keep.sum())
    if n < 2:
        raise ValueError(f"masked_whiten needs at least two positions with mask = 1 for the variance, got {n}")
    mean = x[keep].sum() / n
    var = ((x[keep] - mean) ** 2).sum() / (n - 1)
    out = (x - mean) / np.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    if zero_skipped:
        out = np.where(keep, out, 0.0)
    return torch.from_numpy(out)


__all__ = [*REGISTRY.names(), "masked_whiten"]
