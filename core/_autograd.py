"""Autograd for an op whose backward is a fused scan of its own.

The forward runs the op's fused kernel (or its CPU loop) as the no-grad path does; the
backward hands the saved inputs and outputs to ``OpSpec.backward``, which runs one more
scan on the same path: a fused Triton kernel, or on the CPU path a compiled loop. Where no
backward kernel compiles on this stack, the backward differentiates the op's torch form
instead (recomputing it once, only if backward runs).
"""
from __future__ import annotations

import contextlib

import torch
from torch.autograd.function import once_differentiable

from . import _cache
from ._spec import OpSpec, tensor_signature, triton_only
from ._triton.launch import NoKernel


class Fused:
    """The forward of one fused call signature: its ``exact`` option and, once a call has
    run it, the runner and output dtype that later calls of the signature reuse (``_fast``'s
    replay keeps this object; a call split into several launches keeps no runner)."""

    __slots__ = ("exact", "runner", "dtype")

    def __init__(self, exact: bool):
        self.exact, self.runner, self.dtype = exact, None, None

    def forward(self, call, op: OpSpec, tensors: tuple, scalars: tuple) -> tuple:
        runner = self.runner
        if runner is not None:
            dtype, anchor = self.dtype, call.anchor
            outs = tuple([torch.empty_like(anchor, dtype=dtype) for _ in range(op.n_out)])
            runner(tensors, outs, scalars)
            return outs
        outs = call.new_outputs(op.n_out)
        self.runner = call.compute(op, tensors, scalars, outs, self.exact)
        self.dtype = outs[0].dtype
        return outs


class _FusedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call, op, scalars, fused, *tensors):
        outs = fused.forward(call, op, tensors, scalars)
        ctx.set_materialize_grads(False)
        ctx.call, ctx.op, ctx.scalars = call, op, scalars
        ctx.save_for_backward(*tensors, *outs)
        return outs

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        n = len(saved) - ctx.op.n_out
        if all(g is None for g in grads):
            return (None,) * (4 + n)
        call = ctx.call
        if _torch_forms:
            return (None, None, None, None) + _through_torch_form(ctx, call, saved[:n], grads)
        try:
            grads_in = ctx.op.backward(call, saved[:n], ctx.scalars, saved[n:], grads, ctx.needs_input_grad[4:])
        except NoKernel:  # no backward kernel compiles on this stack: differentiate the op's torch form
            grads_in = _through_torch_form(ctx, call, saved[:n], grads)
        return (None, None, None, None) + tuple(grads_in)


_torch_forms = False


@contextlib.contextmanager
def differentiating_torch_forms():
    """Inside a ``with`` block, backward passes differentiate the ops' torch forms instead of
    running their backward scans: the reference the tests check the scans against."""
    global _torch_forms
    previous, _torch_forms = _torch_forms, True
    try:
        yield
    finally:
        _torch_forms = previous


def _through_torch_form(ctx, call, tensors: tuple, grads: tuple) -> tuple:
    """The inputs' gradients through ``op.differentiable`` (torch operations around
    :func:`rlscan.linear_scan`), for where the fused backward kernel cannot run."""
    needs = ctx.needs_input_grad[4:]
    leaves = [t.detach().requires_grad_() if t is not None and need else t for t, need in zip(tensors, needs)]
    with torch.enable_grad():
        outs = ctx.op.differentiable(call, *leaves, *ctx.scalars)
    wanted = [x for x, need in zip(leaves, needs) if x is not None and need]
    pairs = [(o, g) for o, g in zip(outs, grads) if g is not None]
    found = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True))
    return tuple(next(found) if x is not None and need else None for x, need in zip(leaves, needs))


# a fused backward's name -> how many of its first inputs (named grad...) are output gradients
_LEADING_GRADS: dict = {}


def backward_spec(name: str, inputs: tuple, n_out: int, kernel, time_contiguous_of: int, cpu):
    """The :class:`OpSpec` of a fused backward scan: ``inputs`` are the output gradients and
    what the forward saved; its outputs are the inputs' gradients. ``cpu`` is its CPU loop."""
    _LEADING_GRADS[name] = next(k for k, (input_name, _) in enumerate(inputs) if not input_name.startswith("grad"))
    return OpSpec(name=name, inputs=inputs, n_out=n_out, kernel=kernel, cpu=cpu,
                  differentiable=triton_only, time_contiguous_of=time_contiguous_of)


def gradient_buffers(call, inputs: tuple, needs: tuple) -> tuple:
    """An uninitialised gradient for each input that needs one (else ``None``), in the input's
    dtype and laid out as the call's anchor: the scan engine writes all of a kernel's outputs
    with one set of strides. A per-environment input (``bootstrap_value``, ``initial``) gets a
    full buffer, of which the backward kernel writes one step."""
    return tuple(torch.empty_like(call.anchor, dtype=x.dtype) if x is not None and need else None
                 for x, need in zip(inputs, needs))


def value_after_source(next_values, bootstrap, need_next: bool, need_boot: bool) -> tuple:
    """``(input, whether it needs a gradient)`` for the value after each step: ``next_values``
    when given, else ``bootstrap_value`` (whose gradient a backward kernel writes into the last
    step of a full buffer, see :func:`gradient_buffers`)."""
    return (next_values, need_next) if next_values is not None else (bootstrap, need_boot)


def split_value_after(call, grad, next_values) -> tuple:
    """``(∂next_values, ∂bootstrap_value)`` from the gradient buffer of the value after each step."""
    if grad is None or next_values is not None:
        return grad, None
    return None, grad.select(call.time_dim, -1)


def run_backward(spec, call, tensors: tuple, scalars: tuple, outs: tuple) -> None:
    """Run a fused backward scan (an :class:`OpSpec` whose outputs are gradients) on the
    call's path.

    On a call that ``_fast`` replays (``call.backward_key`` set) the runner is kept in the
    signature cache under that key and the output gradients' signatures alone: the other
    tensors are the forward's inputs, outputs and fresh gradient buffers, laid out as the
    replay's signature says, and which gradients are computed is fixed by its
    ``requires_grad`` flags."""
    if call.backward_key is None:
        call.compute(spec, tensors, scalars, outs, False)
        return
    grads = tensors[:_LEADING_GRADS[spec.name]]
    key = ("backward", call.backward_key, spec.name, tuple(map(tensor_signature, grads)))
    runner = _cache.CACHE.get(key)
    if runner is None:
        runner = call.compute(spec, tensors, scalars, outs, False)
        if runner is not None:
            _cache.CACHE.keep(key, runner)
        return
    runner(tensors, outs, scalars)


def _applying():
    """``apply(call, op, scalars, fused, tensors)``: :class:`_FusedFunction`'s outputs.

    ``Function.apply`` is a Python layer over torch's C++ ``apply``. Outside functorch's
    transforms it only unwraps tensors that outlived one, and costs more than the C++ call
    itself (``rlscan bench --host``'s autograd section times an empty function). So outside
    the transforms this calls the C++ ``apply`` on the unwrapped tensors; inside them, or on
    a torch without these names, ``Function.apply``."""
    public = _FusedFunction.apply
    try:
        in_cpp = super(torch.autograd.Function, _FusedFunction).apply
        transforms_active = torch._C._are_functorch_transforms_active
        unwrap_if_dead = torch._C._functorch.unwrap_if_dead
    except AttributeError:  # pragma: no cover - a torch whose internals moved
        return lambda call, op, scalars, fused, tensors: public(call, op, scalars, fused, *tensors)

    def apply(call, op, scalars, fused, tensors):
        if transforms_active():
            return public(call, op, scalars, fused, *tensors)
        return in_cpp(call, op, scalars, fused, *[None if t is None else unwrap_if_dead(t) for t in tensors])

    return apply


_apply = _applying()


def with_fused_backward(call, op, tensors: tuple, scalars: tuple, fused: Fused) -> tuple:
    """The op's outputs, differentiable through ``op.backward``; ``fused`` runs the forward
    (and keeps its runner for the replays of the call's signature)."""
    return _apply(call, op, scalars, fused, tensors)
