"""Checks the adapters share: a framework's installed release, and a coefficient in [0, 1]."""
from __future__ import annotations

import importlib.metadata
import numbers
import re

import torch


def installed(distribution: str) -> str | None:
    """The installed version of ``distribution`` (pip's name), or ``None``."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_release(adapter: str, framework: str, version: str | None, low: tuple, high: tuple, spec: str) -> None:
    """Raise ``ImportError`` naming both when ``version`` is outside ``low <= version < high``
    (``(major, minor, patch)`` tuples; ``spec`` is the same range as pip writes it).
    ``None`` (nothing installed) passes: the import that follows says what is missing."""
    if version is None:
        return
    parts = tuple(int(p) for p in re.findall(r"\d+", version)[:len(low)])
    if not low <= parts < high:
        raise ImportError(f"rlscan.adapters.{adapter} follows {framework} {spec}; the installed release is {version}")


def unit_coef(name: str, value) -> float:
    """A float in [0, 1] from a float or a one-element tensor, under the framework's ``name``."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a float or a one-element tensor, got a tensor of shape "
                             f"{tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1], got {type(value).__name__}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return value
