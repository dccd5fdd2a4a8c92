"""Checking a call's arguments and describing their memory layout for the kernels.

Every op sees its tensors as a ``[T, B]`` grid: ``T`` steps along ``time_dim`` and
``B`` environments, the product of all the other dimensions. The batch dimensions
are merged into at most two strided groups, ``(hi, lo)``, so that any layout the
user passes (``[T, N]``, ``[N, T]``, TorchRL's ``[*B, T, 1]``, transposed or sliced
views, broadcast flags) is read in place, with no copy. Element ``(t, b)`` of a
tensor lives at ``t * s_t + (b // B_lo) * s_hi + (b % B_lo) * s_lo``.
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
FLAG_DTYPES = (torch.bool, torch.uint8) + FLOAT_DTYPES


class Strides(NamedTuple):
    """Element strides of one tensor on the ``[T, B]`` grid (0 where it does not vary)."""

    t: int
    hi: int
    lo: int


class Layout(NamedTuple):
    """How the user's shape maps onto the ``[T, B]`` grid."""

    shape: torch.Size
    time_dim: int
    T: int
    B: int
    B_lo: int
    hi_dims: tuple  # batch dimensions merged into the outer group
    lo_dims: tuple  # batch dimensions merged into the inner group

    @property
    def two_level(self) -> bool:
        return self.B_lo != self.B

    @property
    def batch_shape(self) -> torch.Size:
        return self.shape[: self.time_dim] + self.shape[self.time_dim + 1 :]

    def strides(self, x: Optional[torch.Tensor]) -> Strides:
        """Strides of a tensor of the full shape."""
        if x is None:
            return Strides(0, 0, 0)
        s = x.stride()
        return Strides(
            s[self.time_dim],
            s[self.hi_dims[-1]] if self.hi_dims else 0,
            s[self.lo_dims[-1]] if self.lo_dims else 0,
        )

    def batch_strides(self, x: Optional[torch.Tensor]) -> Strides:
        """Strides of a tensor of the batch shape (the full shape without ``time_dim``)."""
        if x is None:
            return Strides(0, 0, 0)
        s = x.stride()
        td = self.time_dim
        pick = lambda d: s[d if d < td else d - 1]  # noqa: E731
        return Strides(
            0,
            pick(self.hi_dims[-1]) if self.hi_dims else 0,
            pick(self.lo_dims[-1]) if self.lo_dims else 0,
        )


def plan_layout(shape: torch.Size, time_dim: int, full: Sequence[torch.Tensor], batch: Sequence[torch.Tensor]):
    """The :class:`Layout` that reads every tensor in place, or ``None`` when the batch
    dimensions fall into more than two strided groups (the caller then splits the call).

    ``full`` holds tensors of ``shape``; ``batch`` tensors of the batch shape. Two
    neighbouring batch dimensions merge when every tensor steps over the inner one
    exactly as far as one step of the outer one.
    """
    dims = [d for d in range(len(shape)) if d != time_dim and shape[d] != 1]
    strides = [x.stride() for x in full] + [
        tuple(s[:time_dim]) + (0,) + tuple(s[time_dim:]) for s in (x.stride() for x in batch)
    ]
    groups: list[list[int]] = []
    for d in dims:
        if groups:
            prev = groups[-1][-1]
            if all(s[prev] == s[d] * shape[d] for s in strides):
                groups[-1].append(d)
                continue
        groups.append([d])
    if len(groups) > 2:
        return None
    T = shape[time_dim]
    B = math.prod(shape[d] for d in dims)
    lo = tuple(groups[-1]) if groups else ()
    hi = tuple(groups[0]) if len(groups) == 2 else ()
    B_lo = math.prod(shape[d] for d in lo)
    return Layout(shape, time_dim, T, B, B_lo, hi, lo)


# ----------------------------------------------------------------------------- checks


def type_name(x) -> str:
    """The type of ``x`` as an error message names it: a builtin by its name, any other type
    with its package (``torch.Tensor``, ``numpy.bool_``: numpy 2 names its bool type ``bool``)."""
    kind = type(x)
    if kind.__module__ == "builtins":
        return kind.__name__
    if kind is np.bool_:
        return "numpy.bool_"
    return f"{kind.__module__.split('.')[0]}.{kind.__name__}"


def to_tensor(name: str, x):
    """``(tensor, was_numpy)``; numpy arrays are wrapped without a copy."""
    if isinstance(x, torch.Tensor):
        check_dense(name, x)
        return x, False
    if isinstance(x, np.ndarray):
        if isinstance(x, np.ma.MaskedArray):
            raise TypeError(
                f"{name} is a numpy masked array, whose mask rlscan would not see: pass {name}.data, "
                f"or {name}.filled(value), and the mask as mask= where the op takes one"
            )
        if not x.dtype.isnative:
            raise ValueError(
                f"{name} has non-native byte order ({x.dtype.str}); convert it first, "
                f"e.g. {name}.astype({name}.dtype.newbyteorder('='))"
            )
        if x.dtype.kind not in "biuf":
            raise TypeError(f"{name} must hold real numbers, got a numpy array of {x.dtype}")
        if any(s < 0 for s in x.strides):
            raise ValueError(
                f"{name} is a numpy view with negative strides (a reversed view), which torch cannot "
                f"wrap without a copy; pass np.ascontiguousarray({name})"
            )
        if not x.flags.writeable:
            # torch warns that it cannot protect the array; an input is only read (out= refuses one)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The given NumPy array is not writable", UserWarning)
                return torch.from_numpy(x), True
        return torch.from_numpy(x), True
    raise TypeError(f"{name} must be a torch.Tensor or a numpy array, got {type_name(x)}")


def check_dense(name: str, x: torch.Tensor) -> None:
    """A tensor that rlscan reads through its storage and strides: dense, neither nested nor masked."""
    if x.layout is not torch.strided or x.is_nested:
        what = "a nested" if x.is_nested else f"a {str(x.layout).replace('torch.', '')}"
        raise TypeError(f"{name} must be a dense (strided) tensor, got {what} tensor; pass {name}.to_dense()")
    if isinstance(x, torch.masked.MaskedTensor):
        raise TypeError(
            f"{name} is a torch.masked.MaskedTensor, whose mask rlscan would not see: pass its data "
            f"({name}.get_data()), and the mask as mask= where the op takes one"
        )


def check_bool(name: str, value) -> bool:
    """A switch: a bool, or numpy's bool."""
    if type(value) is bool:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type_name(value)}")


def check_float(name: str, x: torch.Tensor) -> None:
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating tensor (float16, bfloat16, float32 or float64), got {x.dtype}"
        )


def check_flag(name: str, x: torch.Tensor) -> None:
    if x.dtype not in FLAG_DTYPES:
        raise TypeError(f"{name} must be a bool, uint8 or floating tensor of 0/1 flags, got {x.dtype}")


def check_shape(name: str, x: torch.Tensor, shape, anchor: str) -> None:
    if x.shape != shape:
        raise ValueError(
            f"{name} must have the shape of {anchor}, {tuple(shape)}, got {tuple(x.shape)} "
            "(rlscan does not broadcast series or flags)"
        )


def check_device(name: str, x: torch.Tensor, device: torch.device, anchor: str) -> None:
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but {anchor} is on {device}: all tensors must be on one device")


def normalise_time_dim(time_dim, ndim: int, anchor: str) -> int:
    if type(time_dim) is int and 0 <= time_dim < ndim:
        return time_dim
    if isinstance(time_dim, bool) or not isinstance(time_dim, numbers.Integral):
        raise TypeError(f"time_dim must be an int, got {type_name(time_dim)}")
    if ndim == 0:
        raise ValueError(f"{anchor} must have a time dimension, got a 0-d tensor")
    if not -ndim <= time_dim < ndim:
        raise ValueError(f"time_dim={time_dim} is out of range for {anchor} with {ndim} dimension(s)")
    return int(time_dim) % ndim


def check_unit_interval(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:  # also false for NaN
        raise ValueError(f"{name} must lie in [0, 1], got {value}")


def check_unit_float(name: str, value) -> float:
    """A float in [0, 1] (a discount, a λ), as a Python float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type_name(value)}")
    value = float(value)
    check_unit_interval(name, value)
    return value


def check_clip(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type_name(value)}")
    value = float(value)
    if not value >= 0.0:  # also false for NaN
        raise ValueError(f"{name} must be >= 0 (float('inf') disables the clip), got {value}")
    return value
