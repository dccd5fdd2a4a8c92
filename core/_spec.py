"""What an op is: its inputs, its outputs, its kernels and its reference forms.

An :class:`OpSpec` describes an op to every layer that runs one: the call machinery
(``_call``) checks arguments and picks a path, the CPU path (``_cpu``) runs ``cpu``, the
Triton path (``_triton.launch``) runs ``kernel``, autograd (``_autograd``) runs
``backward`` and the custom ops (``_library``) register it for ``torch.compile``. Those
layers import this module, not each other's.

The helpers here describe how an op's tensors meet a kernel, independent of any one call:
the strides each kind of input is read with, and the part of a tensor a launch plan's
cache is keyed on.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch


class OpSpec(NamedTuple):
    """What :meth:`rlscan._call.Call.run` needs to know about an op.

    ``inputs`` names the tensors in the order the kernel and the CPU loop take them,
    with their kind: ``"series"`` (the full shape), ``"batch"`` (one value per
    environment), ``"flag"`` or ``"coef"`` (the full shape, possibly broadcast),
    ``"index"`` (integer, the full shape) or ``"table"`` (the full shape plus a last
    axis of actions).
    """

    name: str
    inputs: tuple  # ((name, kind), ...)
    n_out: int
    kernel: Callable  # () -> (COEFFS, EMIT, REVERSE); imports Triton lazily
    cpu: Callable  # (layout, arrays, scalars, outs) -> None
    differentiable: Callable  # (call, *tensors, *scalars) -> tuple of outputs
    time_contiguous_of: int = 0  # which input decides the tile orientation
    init_of: Optional[int] = None  # which input, if any, is the carry into the first step
    compiled: Optional[Callable] = None  # (call, tensors, scalars, exact) -> outputs, inside torch.compile
    # (call, tensors, scalars, outs, grads, needs) -> gradients of the tensors: a fused backward
    # on the Triton path, used instead of differentiating ``differentiable``
    backward: Optional[Callable] = None

    @property
    def batch_mask(self) -> tuple:
        """For each input, whether it holds one value per environment (no time axis)."""
        return tuple(kind == "batch" for _, kind in self.inputs)

    @property
    def kinds(self) -> tuple:
        return tuple(kind for _, kind in self.inputs)


def triton_only(*args):
    """The ``differentiable`` of a fused backward, which has no torch form of its own: the call
    machinery gives its launch plans no CPU fallback."""
    raise RuntimeError("a fused backward has no torch form; where its kernel cannot run, the op's torch form is differentiated")


def grid_view(x: torch.Tensor, kind: str) -> torch.Tensor:
    """The part of ``x`` laid out on the ``[T, *B]`` grid: an action table's first column."""
    return x.select(-1, 0) if kind == "table" else x


def kernel_strides(layout, x: Optional[torch.Tensor], kind: str) -> tuple:
    """``(s_t, s_hi, s_lo)``; an action table adds ``(s_action, n_actions)``."""
    if kind == "batch":
        return tuple(layout.batch_strides(x))
    if kind == "table":
        return tuple(layout.strides(x.select(-1, 0))) + (x.stride(-1), x.shape[-1])
    return tuple(layout.strides(x))


def tensor_signature(x: Optional[torch.Tensor]):
    """What a cached launch plan depends on: everything Triton specialises a pointer and its
    strides on (shape, strides, dtype, 16-byte alignment)."""
    if x is None:
        return None
    return x.shape, x.stride(), x.dtype, x.data_ptr() % 16 == 0
