"""Every op as a PyTorch custom op (``torch.ops.rlscan.*``).

``torch.compile`` sees a custom op as one opaque node with a fake implementation for
shapes and dtypes, so a compiled function that calls any rlscan op traces with no graph
break, on CUDA and on CPU, and CUDA graphs capture the real launch. Eager calls skip the
dispatcher (it costs more than a launch) and run the same implementation directly.

``rlscan::linear_scan`` also carries a registered autograd formula: its backward is one
more fused scan, the other way (``rlscan::linear_scan_adjoint``). The ops' differentiable
forms are torch operations around it, so every op is differentiable, compiled or not.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.library import Library, custom_op

from . import _backend
from ._call import Call, OpSpec, _signature
from ._triton import launch as _launch

_FUSED: dict = {}


def _trusted_call(spec: OpSpec, tensors, time_dim: int, out_dtype) -> Call:
    """A :class:`Call` for arguments the public function has already checked."""
    call = Call.__new__(Call)
    anchor = tensors[0]
    call.anchor_name, call.anchor, call.numpy_io = spec.inputs[0][0], anchor, False
    call.shape, call.device, call.time_dim = anchor.shape, anchor.device, time_dim
    call.batch_shape = call.shape[:time_dim] + call.shape[time_dim + 1 :]
    call.dtypes = [t.dtype for t, (_, kind) in zip(tensors, spec.inputs) if t is not None and kind in ("series", "batch")]
    call.out_dtype = out_dtype
    return call


class _Runners:
    """The runners of one op's custom op by call signature.

    Inside a compiled graph the op runs on arguments the graph has already checked, once per
    replay, so its runner (a Triton launch plan or the CPU loop on a fixed layout) is looked
    up by the tensors' signature (shapes, strides, dtypes, alignment) and the options, and
    run on fresh outputs: no :class:`Call` is built and no layout planned again."""

    def __init__(self, spec: OpSpec):
        self.spec = spec
        self.by_signature: dict = {}

    def __call__(self, tensors: list, scalars: list, time_dim: int, exact: bool, out_dtype) -> list:
        key = (tuple(map(_signature, tensors)), time_dim, exact, out_dtype, _backend.get_backend(),
               _launch.settings_key())
        found = self.by_signature.get(key)
        if found is not None:
            runner, dtype = found
            anchor = tensors[0]
            outs = tuple([torch.empty_like(anchor, dtype=dtype) for _ in range(self.spec.n_out)])
            runner(tuple(tensors), outs, tuple(scalars))
            return list(outs)
        call = _trusted_call(self.spec, tensors, time_dim, out_dtype)
        outs = call.new_outputs(self.spec.n_out)
        if 0 not in call.shape:
            runner = call.compute(self.spec, tuple(tensors), tuple(scalars), outs, exact)
            if runner is not None:  # None: split into several launches, planned each time
                if len(self.by_signature) >= _MAX_RUNNERS:
                    self.by_signature.clear()
                self.by_signature[key] = (runner, outs[0].dtype)
        return list(outs)


_MAX_RUNNERS = 256


# The fused ops are defined through a plain Library, not ``custom_op``: they never need
# autograd (a call that does takes the op's differentiable form), and ``custom_op``'s
# Python autograd layer and dynamo guards cost more per call inside a compiled graph than
# the launch itself.
_LIB = Library("rlscan", "FRAGMENT")
_FUSED_SCHEMA = "(Tensor?[] tensors, float[] scalars, int time_dim, bool exact, ScalarType? out_dtype) -> Tensor[]"


def register_fused(spec: OpSpec):
    """Register ``rlscan::<spec.name>``, the op's fused kernel, and return it."""
    runners = _Runners(spec)

    def fake(tensors, scalars, time_dim, exact, out_dtype):
        return list(_trusted_call(spec, tensors, time_dim, out_dtype).new_outputs(spec.n_out))

    _LIB.define(spec.name + _FUSED_SCHEMA)
    _LIB.impl(spec.name, runners, "CompositeExplicitAutograd")
    torch.library.register_fake(f"rlscan::{spec.name}", fake, lib=_LIB)
    op = getattr(torch.ops.rlscan, spec.name).default
    _FUSED[spec.name] = op
    return op


def fused(spec: OpSpec):
    return _FUSED[spec.name]


# ----------------------------------------------------------------------------- linear scan


def _scan_specs(reverse: bool):
    from .ops.linear_scan import op as ls

    return (ls.REVERSE, ls.ADJOINT_REVERSE) if reverse else (ls.FORWARD, ls.ADJOINT_FORWARD)


@custom_op("rlscan::linear_scan", mutates_args=())
def linear_scan_op(alpha: torch.Tensor, beta: Optional[torch.Tensor], initial: Optional[torch.Tensor],
                   beta_value: float, reverse: bool, time_dim: int, out_dtype: Optional[torch.dtype]) -> torch.Tensor:
    spec, _ = _scan_specs(reverse)
    tensors = (alpha, beta, initial)
    call = _trusted_call(spec, tensors, time_dim, out_dtype)
    (out,) = call.new_outputs(1)
    if 0 not in call.shape:
        call.compute(spec, tensors, (beta_value,), (out,), False)
    return out


@linear_scan_op.register_fake
def _(alpha, beta, initial, beta_value, reverse, time_dim, out_dtype):
    spec, _ = _scan_specs(reverse)
    return _trusted_call(spec, (alpha, beta, initial), time_dim, out_dtype).new_outputs(1)[0]


@custom_op("rlscan::linear_scan_adjoint", mutates_args=())
def linear_scan_adjoint_op(grad: torch.Tensor, beta: Optional[torch.Tensor], out: torch.Tensor,
                           initial: Optional[torch.Tensor], beta_value: float, reverse: bool,
                           time_dim: int) -> list[torch.Tensor]:
    """``[∂L/∂α, ∂L/∂β]`` for ``out = linear_scan(α, β, reverse, initial)`` (``∂L/∂β`` is empty
    when ``β`` is a scalar)."""
    _, spec = _scan_specs(reverse)
    tensors = (grad, beta, out, initial)
    call = _trusted_call(spec, tensors, time_dim, out.dtype)
    grad_alpha = torch.empty_like(out)
    grad_beta = torch.empty_like(out) if beta is not None else out.new_empty(0)
    if 0 not in call.shape:
        call.compute(spec, tensors, (beta_value,), (grad_alpha, grad_beta if beta is not None else None), False)
    return [grad_alpha, grad_beta]


@linear_scan_adjoint_op.register_fake
def _(grad, beta, out, initial, beta_value, reverse, time_dim):
    return [torch.empty_like(out), torch.empty_like(out) if beta is not None else out.new_empty(0)]


def _setup_context(ctx, inputs, output):
    alpha, beta, initial, beta_value, reverse, time_dim, out_dtype = inputs
    ctx.save_for_backward(beta, initial, output)
    ctx.beta_value, ctx.reverse, ctx.time_dim = beta_value, reverse, time_dim
    ctx.dtypes = (alpha.dtype, None if beta is None else beta.dtype, None if initial is None else initial.dtype)


def _backward(ctx, grad):
    beta, initial, out = ctx.saved_tensors
    grad_alpha, grad_beta = linear_scan_adjoint_op(grad, beta, out, initial, ctx.beta_value, ctx.reverse, ctx.time_dim)
    need_alpha, need_beta, need_init = ctx.needs_input_grad[:3]
    alpha_dtype, beta_dtype, init_dtype = ctx.dtypes
    grad_init = None
    if need_init:
        # ∂A_edge/∂initial = β at the step that reads it: the last step in reverse, the first forward.
        edge = out.shape[ctx.time_dim] - 1 if ctx.reverse else 0
        b = ctx.beta_value if beta is None else beta.select(ctx.time_dim, edge)
        grad_init = (grad_alpha.select(ctx.time_dim, edge) * b).to(init_dtype)
    return (
        grad_alpha.to(alpha_dtype) if need_alpha else None,
        grad_beta.to(beta_dtype) if need_beta else None,
        grad_init,
        None, None, None, None,
    )


torch.library.register_autograd("rlscan::linear_scan", _backward, setup_context=_setup_context)
