"""Building blocks of the differentiable forms: the ops written with torch operations
around :func:`rlscan.linear_scan`, so that autograd differentiates the coefficients and
the scan's own backward is one more fused scan. Tensors here have time first."""
from __future__ import annotations

from typing import Optional

import torch


def upcast(x: Optional[torch.Tensor], call) -> Optional[torch.Tensor]:
    """A floating input in the call's compute dtype (float32, or float64), as the fused
    kernels compute; flags and indices unchanged."""
    if x is None or not x.is_floating_point():
        return x
    return x.to(call.compute_dtype)


def time_first(x: Optional[torch.Tensor], call) -> Optional[torch.Tensor]:
    """An input with time first, in the compute dtype."""
    return None if x is None else upcast(x.movedim(call.time_dim, 0), call)


def coef(tensor: Optional[torch.Tensor], value: float, call):
    """A per-step coefficient: the time-first tensor in the compute dtype, or the float."""
    return value if tensor is None else time_first(tensor, call)


def result(x: torch.Tensor, call) -> torch.Tensor:
    """An output back in the caller's layout and result dtype."""
    return x.movedim(0, call.time_dim).to(call.result_dtype)


def value_after(values, next_values, bootstrap, like: torch.Tensor) -> torch.Tensor:
    """``V'_t``: ``next_values``, else ``values`` shifted one step with the bootstrap appended."""
    if next_values is not None:
        return next_values
    boot = torch.zeros_like(like[0]) if bootstrap is None else bootstrap
    if values is None:
        return torch.cat([torch.zeros_like(like[1:]), boot.unsqueeze(0).to(like.dtype)])
    return torch.cat([values[1:], boot.unsqueeze(0).to(values.dtype)])


def masks(terminated, truncated, like: torch.Tensor):
    """``(ν, κ)``: the bootstrap mask ``1 - term_t`` and the continuation ``κ_t`` (0 where done
    and at the last step), as floats of ``like``'s dtype."""
    T = like.shape[0]
    inside = (torch.arange(T, device=like.device) < T - 1).reshape((T,) + (1,) * (like.dim() - 1))
    term = torch.zeros_like(like, dtype=torch.bool) if terminated is None else terminated != 0
    done = term if truncated is None else term | (truncated != 0)
    return (~term).to(like.dtype), (~done & inside).to(like.dtype)


def shift_back(x: torch.Tensor, first) -> torch.Tensor:
    """``x_{t-1}``, with ``first`` at ``t = 0``."""
    head = torch.full_like(x[:1], first) if not isinstance(first, torch.Tensor) else first.unsqueeze(0)
    return torch.cat([head, x[:-1]])


def shift_ahead(x: torch.Tensor, last) -> torch.Tensor:
    """``x_{t+1}``, with ``last`` at ``t = T-1``."""
    tail = torch.full_like(x[:1], last) if not isinstance(last, torch.Tensor) else last.unsqueeze(0)
    return torch.cat([x[1:], tail])
