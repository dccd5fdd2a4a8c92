"""Checks and conversions the adapters share: their arguments checked under the framework's
names (a ``TypeError`` or ``ValueError`` that names the argument and says what was expected),
the release a framework has installed, and responses' group labels as integers.

Only rlscan's public API and torch/numpy: an adapter never reaches into ``rlscan._*``.
"""
from __future__ import annotations

import contextlib
import numbers
import re
from importlib import metadata

import numpy as np
import torch

#: The dtypes a 0/1 mask may have.
MASK_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64)


def kind(x) -> str:
    """``x``'s type as an error message names it (``torch.Tensor``, ``list``, ``numpy.bool_``:
    numpy 2 names its bool type ``bool``)."""
    t = type(x)
    if t is np.bool_:
        return "numpy.bool_"
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__.split('.')[0]}.{t.__name__}"


def check_bool(name: str, x) -> bool:
    """A switch: a bool, or numpy's bool (as a bool)."""
    if type(x) is bool:
        return x
    if isinstance(x, np.bool_):
        return bool(x)
    raise TypeError(f"{name} must be a bool, got {kind(x)}")


def check_dense(name: str, x: torch.Tensor) -> torch.Tensor:
    """A tensor read through its storage and strides: dense (strided), neither nested nor a
    ``torch.masked.MaskedTensor`` (whose mask an op would not see)."""
    if x.layout is not torch.strided or x.is_nested:
        what = "a nested" if x.is_nested else f"a {str(x.layout).replace('torch.', '')}"
        raise TypeError(f"{name} must be a dense (strided) tensor, got {what} tensor; pass {name}.to_dense()")
    if isinstance(x, torch.masked.MaskedTensor):
        raise TypeError(f"{name} is a torch.masked.MaskedTensor, whose mask rlscan would not see: pass its data "
                        f"({name}.get_data()), and the mask as mask= where the op takes one")
    return x


def check_rows(name: str, x, shape=None, device=None) -> torch.Tensor:
    """A floating tensor ``(batch_size, response_len)`` (of ``shape`` and on ``device`` where given)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (batch_size, response_len), got {kind(x)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {x.dtype}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-d (batch_size, response_len), got shape {tuple(x.shape)}")
    if shape is not None and x.shape != shape:
        raise ValueError(f"{name} must have the shape {tuple(shape)} of token_level_rewards, got {tuple(x.shape)}")
    if device is not None and x.device != device:
        raise ValueError(f"{name} must be on token_level_rewards' device {device}, got {x.device}")
    return x


def check_mask(name: str, m, shape, device) -> torch.Tensor:
    """A 0/1 mask tensor (bool, integer or floating) of ``shape`` on ``device``; its values are
    checked by the op that reads it (:func:`mask_errors_as`)."""
    if not isinstance(m, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of 0/1 values, got {kind(m)}")
    if m.dtype not in MASK_DTYPES:
        raise TypeError(f"{name} must be a bool, integer or floating tensor of 0/1 values, got {m.dtype}")
    if m.shape != shape:
        raise ValueError(f"{name} must have the shape {tuple(shape)} of token_level_rewards, got {tuple(m.shape)}")
    if m.device != device:
        raise ValueError(f"{name} must be on token_level_rewards' device {device}, got {m.device}")
    return m


def check_mask_values(name: str, m: torch.Tensor) -> None:
    """That ``m`` holds only 0 and 1 (one pass over it, on its device), for code that reads a
    mask without an rlscan op to check it."""
    if m.dtype != torch.bool and m.numel() and not bool(((m == 0) | (m == 1)).all()):
        raise_mask_values(name)


def raise_mask_values(name: str):
    raise ValueError(f"{name} must hold only 0 and 1 (1 where the step counts, 0 where it is skipped)")


@contextlib.contextmanager
def errors_as(**names):
    """rlscan's errors about its arguments under the framework's names for them:
    ``errors_as(mask="response_mask")`` turns ``mask must ...`` into ``response_mask must ...``."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        message = str(exc)
        for ours, theirs in names.items():
            if message.startswith(ours + " "):
                raise type(exc)(theirs + message[len(ours):]) from None
        raise


def check_unit_float(name: str, value) -> float:
    """A float in [0, 1] (a discount, a λ; not a bool, not a tensor), as a Python float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {kind(value)}")
    value = float(value)
    if not 0.0 <= value <= 1.0:  # also false for NaN
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return value


def coef(name: str, value) -> float:
    """A float in [0, 1], from a float or a one-element tensor."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a float or a 0-d tensor, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float or a 0-d tensor, got {kind(value)}")
    return check_unit_float(name, value)


def check_clip(name: str, value) -> float:
    """A clip threshold: a float ``>= 0`` (``float('inf')``: no clip)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {kind(value)}")
    value = float(value)
    if not value >= 0.0:  # also false for NaN
        raise ValueError(f"{name} must be >= 0 (float('inf') disables the clip), got {value}")
    return value


def check_float(name: str, value) -> float:
    """A finite float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {kind(value)}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


# ----------------------------------------------------------------------------- releases


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def in_range(version: str, low: tuple, high: tuple) -> bool:
    """Whether ``version`` lies in ``[low, high)``, compared on as many leading numbers as
    ``low`` has (``(major, minor)`` or ``(major, minor, patch)``)."""
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:len(low)])
    return len(parts) == len(low) and low <= parts < high


def check_release(adapter: str, framework: str, version: str | None, low: tuple, high: tuple, spec: str) -> None:
    """Raise ``ImportError`` naming both when ``version`` is outside ``[low, high)`` (``spec`` is
    the same range as pip writes it). ``None`` (nothing installed) passes: the import that
    follows says what is missing."""
    if version is not None and not in_range(version, low, high):
        raise ImportError(f"rlscan.adapters.{adapter} follows {framework} {spec}; the installed release is {version}")


# ----------------------------------------------------------------------------- patch() and unpatch()


class Patches:
    """The places an adapter's ``patch()`` wrote (module attributes, registry entries, class
    methods: any key), each with what it held before and rlscan's object put there. The
    adapter reads and writes a place with its own ``get(place)`` and ``put(place, value)``."""

    def __init__(self):
        self._saved: dict = {}  # place -> (what it held before, rlscan's)

    def __bool__(self) -> bool:
        return bool(self._saved)

    def apply(self, places, get, put) -> None:
        """Write rlscan's object of each ``(place, ours)`` in ``places``, saving what the place
        held; nothing while a patch is in effect (``patch()`` again changes no place)."""
        if self._saved:
            return
        for place, ours in list(places):
            self._saved[place] = (get(place), ours)
            put(place, ours)

    def restore(self, get, put) -> None:
        """Put back what each place held, where rlscan's object is still there (one that
        someone else has set since is left as theirs); then nothing is saved."""
        for place, (original, ours) in self._saved.items():
            if get(place) is ours:
                put(place, original)
        self._saved.clear()

    def in_effect(self, get) -> bool:
        """Whether a patch was applied and every place still holds rlscan's object."""
        return bool(self._saved) and all(get(place) is ours for place, (_, ours) in self._saved.items())


# ----------------------------------------------------------------------------- group labels


def group_ids(index, n: int, device) -> tuple[torch.Tensor, int]:
    """``(ids, G)``: each response's group as an integer ``0 .. G-1``, responses whose labels
    are equal in one group (as a dict keyed by the labels groups them: the trainers' loops).

    Args:
        index: ``n`` labels: a numpy array, a sequence (the prompts' uids, strings), or an
            integer tensor. One ``numpy.unique`` groups them (no Python loop over the labels).
    """
    if isinstance(index, torch.Tensor):
        if index.is_floating_point() or index.is_complex() or index.dim() != 1:
            raise TypeError(f"index must be a 1-d integer tensor, a numpy array or a sequence of group labels, "
                            f"got a {index.dim()}-d {index.dtype} tensor")
        index = index.cpu().numpy()
    elif not isinstance(index, np.ndarray):
        try:
            length = len(index)
        except TypeError:
            raise TypeError(f"index must be a numpy array, a sequence or an integer tensor of group labels, "
                            f"got {kind(index)}") from None
        labels = np.empty(length, dtype=object)
        labels[:] = list(index)
        index = labels
    if index.ndim != 1 or len(index) != n:
        raise ValueError(f"index must hold one group label per response ({n}), got shape {index.shape}")
    if index.dtype.kind == "f" and np.isnan(index).any():
        raise ValueError("index holds NaN labels (a NaN equals no label, not even another NaN)")
    try:
        _, ids = np.unique(index, return_inverse=True)  # objects: sorted and compared as the labels compare
    except TypeError:
        raise TypeError(f"index labels must be of one kind that orders (strings, or integers), got labels of "
                        f"types {sorted({type(x).__name__ for x in index})}") from None
    ids = torch.from_numpy(ids.reshape(-1).astype(np.int64, copy=False))
    return ids.to(device), int(ids.max()) + 1 if n else 0
