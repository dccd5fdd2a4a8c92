"""The step-skip mask shared by ``gae``, ``td_lambda`` and ``discounted_returns``
(docs/semantics.md, "Skipped steps").

``mask[t] = 1`` where step ``t`` counts, ``0`` where it is skipped (padding after a
response's end, observation tokens inside a multi-turn response). A skipped step passes
the recurrence through (``β = 1``, ``α = 0``) and the value after a kept step is the
value of the next *kept* step::

    W_t = m_t V_t + (1 − m_t) W_{t+1},   W_T = bootstrap_value (0 when absent)

``W`` is itself a reverse linear scan (``α = m V``, ``β = 1 − m``), run here as its own
op (``next_kept_values``); the masked ops read ``W_{t+1}`` where they read ``V_{t+1}``.
"""
from __future__ import annotations

import torch

from ..._call import Call, _compiling, trusted_call
from ..._inputs import check_device, check_shape, to_tensor
from ..._library import register_fused
from ..._spec import Kernel, OpSpec, Ref
from .. import _forms
from ..linear_scan import linear_scan

MASK_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
               torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_mask(call: Call, name: str, mask, next_values, truncated, values: bool = True,
               argument: str = "mask") -> torch.Tensor:
    """``mask`` of op ``name`` (passed as ``argument``): bool, integer or floating 0/1 values of the
    anchor's shape (1 = the step counts). A masked op takes the value after each step from
    ``values`` (the next kept step's), so it takes neither ``next_values`` nor ``truncated``.
    ``values=False`` leaves the 0/1 check to the caller (a CPU row loop counts other values as it
    reads the mask; :func:`check_mask_values` otherwise)."""
    if next_values is not None:
        raise ValueError(f"{name}: mask and next_values cannot be combined; with a mask the value after a kept step "
                         "is the value of the next kept step, read from values (and bootstrap_value past the end)")
    if truncated is not None:
        raise ValueError(f"{name}: mask and truncated cannot be combined (a truncation needs next_values); "
                         "mark the end of a sequence with terminated, or leave the steps after it out with mask")
    x = call._tensor(argument, mask)
    if x.dtype not in MASK_DTYPES:
        raise TypeError(f"{argument} must be a bool, integer or floating tensor of 0/1 values (1 where the step "
                        f"counts), got {x.dtype}")
    check_shape(argument, x, call.shape, call.anchor_name)
    if values:
        check_mask_values(call, x, argument)
    return x


def mask_tensor(mask, device: torch.device, like: str) -> torch.Tensor:
    """``mask`` (a tensor or a numpy array) as a tensor on ``device`` (``like``'s, the argument
    it goes with) of a dtype a mask may have; its shape and values are the caller's to check."""
    m, _ = to_tensor("mask", mask)
    check_device("mask", m, device, like)
    if m.dtype not in MASK_DTYPES:
        raise TypeError(f"mask must be a bool, integer or floating tensor of 0/1 values, got {m.dtype}")
    return m


def check_mask_values(call: Call, x: torch.Tensor, argument: str = "mask") -> None:
    """That a mask on the CPU holds only 0 and 1 (a pass over it)."""
    if x.dtype != torch.bool and x.device.type == "cpu" and not _compiling():
        call.checked_values = True
        check_values(x, argument)


def check_values(x: torch.Tensor, argument: str = "mask") -> None:
    """That ``x`` holds only 0 and 1 (a pass over it, wherever it is)."""
    if x.dtype != torch.bool and x.numel() and not bool(((x == 0) | (x == 1)).all()):
        raise_mask_values(argument)


def check_counted_values(call: Call, mask: torch.Tensor, bad) -> None:
    """What :func:`check_mask_values` checks, from a CPU row loop's count of the mask's values
    other than 0 and 1 (``bad``, per row), which it gathered as it read the mask."""
    if mask.dtype != torch.bool:
        call.checked_values = True
        if bad.any():
            raise_mask_values()


def raise_mask_values(argument: str = "mask"):
    raise ValueError(f"{argument} must hold only 0 and 1 (1 where the step counts, 0 where it is skipped)")


def kept(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The time-first mask as 0/1 floats of ``like``'s dtype (for the differentiable forms)."""
    return (mask != 0).to(like.dtype)


def next_kept_values_form(v: torch.Tensor, boot, m: torch.Tensor) -> torch.Tensor:
    """``W_{t+1}`` (time first, differentiable): the value of the first kept step after ``t``,
    ``boot`` (or 0) past the end."""
    W = linear_scan(m * v, 1 - m, reverse=True, initial=boot)
    boot = torch.zeros_like(v[0]) if boot is None else boot.to(v.dtype)
    return torch.cat([W[1:], boot.unsqueeze(0)])


def _differentiable(call, v, boot, mask):
    v = _forms.time_first(v, call)
    m = kept(_forms.time_first(mask, call), v)
    W = linear_scan(m * v, 1 - m, reverse=True, initial=_forms.upcast(boot, call))
    return (_forms.result(W, call),)


NEXT_KEPT = OpSpec(
    name="next_kept_values",
    inputs=(("values", "series"), ("bootstrap_value", "batch"), ("mask", "flag")),
    n_out=1,
    kernel=Kernel(module="rlscan.ops._skip.kernel", reverse=True),
    cpu=Ref("rlscan.ops._skip.cpu:run"),
    differentiable=_differentiable,
    init_of=1,
)
register_fused(NEXT_KEPT, trusted_call)


def next_kept_values(call: Call, values: torch.Tensor, bootstrap, mask: torch.Tensor, exact: bool) -> torch.Tensor:
    """``W_t``, the value of the first kept step at or after ``t`` (the bootstrap past the end),
    in the promoted dtype of ``values`` and ``bootstrap`` (a selection: no rounding)."""
    sub = Call("values", values, call.time_dim)
    if bootstrap is not None:
        sub.batch("bootstrap_value", bootstrap)
    with torch.no_grad():
        return sub.run(NEXT_KEPT, (values, bootstrap, mask), (), exact=exact)[0]


def run_on_next_kept_values(call: Call, spec, values, bootstrap, terminated, mask, g, lam, exact: bool, out):
    """A masked TD-style op (GAE, TD(λ)) in two scans: ``W`` (:func:`next_kept_values`), then
    ``spec`` on ``(rewards, values, W, bootstrap, terminated, mask, γ, λ)``."""
    w = next_kept_values(call, values, bootstrap, mask, exact)
    tensors = (call.anchor, values, w, bootstrap, terminated, mask, g.tensor, lam.tensor)
    return call.run(spec, tensors, (g.value, lam.value, g.value * lam.value), exact=exact, out=out)
