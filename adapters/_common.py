"""Checks the adapters share: the arguments a framework's function takes, checked under the
framework's names, before rlscan's public functions check them under their own."""
from __future__ import annotations

import numbers

import torch

#: dtypes a 0/1 mask may have
MASK_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64)


def check_floating(name: str, x, like: torch.Tensor | None = None, like_name: str = "") -> torch.Tensor:
    """``x``: a floating tensor, of ``like``'s (argument ``like_name``'s) shape and device if given."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {x.dtype}")
    if like is not None:
        _same_place(name, x, like, like_name)
    return x


def check_mask(name: str, mask, like: torch.Tensor, like_name: str) -> torch.Tensor:
    """``mask``: a bool, integer or floating tensor of ``like``'s shape and device (its 0/1
    values are :func:`check_mask_values`' or a loop's that reads it)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype not in MASK_DTYPES:
        raise TypeError(f"{name} must be a bool, integer or floating tensor of 0/1 values, got {mask.dtype}")
    _same_place(name, mask, like, like_name)
    return mask


def check_mask_values(name: str, mask: torch.Tensor) -> None:
    """That ``mask`` holds only 0 and 1 (a pass over it, on its device)."""
    if mask.dtype != torch.bool and mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
        raise_mask_values(name)


def raise_mask_values(name: str):
    raise ValueError(f"{name} must hold only 0 and 1 (1 where the step counts, 0 where it is skipped)")


def check_bool(name: str, x) -> bool:
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be a bool, got {type(x).__name__}")
    return x


def check_real(name: str, x) -> float:
    """A finite float (not a bool)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(x).__name__}")
    x = float(x)
    if x != x or x in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {x}")
    return x


def _same_place(name: str, x: torch.Tensor, like: torch.Tensor, like_name: str) -> None:
    if x.shape != like.shape:
        raise ValueError(f"{name} must have the shape {tuple(like.shape)} of {like_name}, got {tuple(x.shape)}")
    if x.device != like.device:
        raise ValueError(f"{name} must be on the device of {like_name} ({like.device}), got {x.device}")
