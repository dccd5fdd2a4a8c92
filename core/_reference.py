"""Helpers for the float64 reference loops: inputs as float64 numpy arrays with time first.

The references favour plain reading over speed: each is a loop over time, vectorised
over environments, written from docs/semantics.md.
"""
from __future__ import annotations

import numbers

import numpy as np
import torch


def as_f64(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


def time_first(x, time_dim: int, shape=None):
    """``x`` as float64 with time on axis 0; a float or broadcastable tensor is spread over ``shape``."""
    if x is None:
        return None
    if isinstance(x, numbers.Real):
        x = np.full(shape, float(x))
    x = as_f64(x)
    if shape is not None:
        x = np.broadcast_to(x, shape)
    return np.moveaxis(x, time_dim, 0)


def flags(x, time_dim: int, shape):
    """A time-first boolean array: where the flag is set (all False when absent)."""
    if x is None:
        return np.moveaxis(np.zeros(shape, dtype=bool), time_dim, 0)
    return np.moveaxis(as_f64(x) != 0, time_dim, 0)


def batch_f64(x, like: np.ndarray) -> np.ndarray:
    """A per-environment value (zeros when absent) for time-first ``like``."""
    return np.zeros(like.shape[1:]) if x is None else as_f64(x)


def value_after(values, next_values, bootstrap_value) -> np.ndarray:
    """``V'_t``: ``next_values[t]``, else ``V_{t+1}`` and the bootstrap after the last step."""
    if next_values is not None:
        return next_values
    out = np.empty_like(values)
    out[:-1] = values[1:]
    out[-1] = batch_f64(bootstrap_value, values)
    return out


def from_time_first(x: np.ndarray, time_dim: int) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(x, 0, time_dim)))
