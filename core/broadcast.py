"""``rlscan.masked_broadcast``: one value per row written over the row's positions, times a
0/1 mask (an outcome estimator's advantage over its response's tokens)."""
from __future__ import annotations

import torch

from . import _cpu_rows
from ._inputs import check_float, to_tensor
from .ops._skip import mask_tensor, raise_mask_values


def masked_broadcast(values, mask):
    """Each row's value over its positions, times the mask::

        out[..., t] = values[...] · mask[..., t]

    in the product's dtype (``torch.result_type``: float32 values give float32 with a bool,
    integer or float32 mask, float64 with a float64 mask), with the bits of torch's
    ``values.unsqueeze(-1) * mask``: ``v`` where the mask is 1; ``0`` (``-0`` for a negative
    ``v``, NaN for an infinite or NaN ``v``) where it is 0.

    On the CPU, for ``[B]`` values over a ``[B, T]`` mask whose rows are contiguous, one
    compiled loop over the rows writes the result and checks the mask's values as it reads
    them (torch's product of a float and an integer tensor converts element by element,
    far below the copy rate); elsewhere (and where ``values`` needs gradients) torch's
    product, after a pass that checks the mask on the CPU (on the GPU its values are not read
    twice, as rlscan's ops).

    Args:
        values: a floating tensor ``[...]`` (or numpy array), one value per row.
        mask: 0/1 values (bool, integer or floating) of shape ``values.shape + (T,)``, on
            ``values``' device.

    Returns:
        A new tensor of ``mask``'s shape.

    Raises:
        ValueError: ``mask`` (on the CPU) holds values other than 0 and 1, or its shape is
            not ``values``' with one more dimension.
    """
    x, numpy_io = to_tensor("values", values)
    check_float("values", x)
    m = mask_tensor(mask, x.device, "values")
    if m.dim() != x.dim() + 1 or m.shape[:-1] != x.shape:
        raise ValueError(f"mask must have the shape of values with one more dimension, {tuple(x.shape)} + (T,), "
                         f"got {tuple(m.shape)}")
    written = None
    if m.dim() == 2 and not torch.compiler.is_compiling() and not (torch.is_grad_enabled() and x.requires_grad):
        written = _cpu_rows.broadcast(x, m)  # None where the row loop does not read the inputs in place
    if written is None:
        if m.device.type == "cpu" and m.dtype != torch.bool and m.numel() and not bool(((m == 0) | (m == 1)).all()):
            raise_mask_values()
        out = x.unsqueeze(-1) * m
    else:
        out, bad = written
        if bad and m.dtype != torch.bool:
            raise_mask_values()
    return out.numpy() if numpy_io else out


__all__ = ["masked_broadcast"]
