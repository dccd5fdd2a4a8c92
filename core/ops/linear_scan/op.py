"""``rlscan.linear_scan``: the first-order linear recurrence every op is built on.

It is also the custom op ``rlscan::linear_scan``, with a registered autograd formula: its
backward is one more fused scan, the other way (``rlscan::linear_scan_adjoint``). The ops'
differentiable forms are torch operations around it, so every op is differentiable,
compiled or not.
"""
from __future__ import annotations

import functools
import numbers
from typing import Optional

import torch
from torch.library import custom_op

from ..._fast import fast_path
from ..._call import Call, trusted_call
from ..._inputs import check_bool
from ..._spec import Arguments, Bench, Kernel, OpSpec, PublicOp, Ref


def _differentiable(call, alpha, beta, initial, beta_value, *, reverse):
    """Through ``rlscan::linear_scan``, whose registered backward is the adjoint scan."""
    return (linear_scan_op(alpha, beta, initial, beta_value, reverse, call.time_dim, call.out_dtype),)


def _compiled(call, tensors, scalars, exact, *, reverse):
    return _differentiable(call, *tensors, *scalars, reverse=reverse)


def _kernel(reverse: bool, adjoint: bool) -> Kernel:
    """The scan's coefficients; the adjoint of a scan runs the other way."""
    if not adjoint:
        return Kernel(module="rlscan.ops.linear_scan.kernel", reverse=reverse)
    return Kernel(module="rlscan.ops.linear_scan.kernel",
                  coeffs="adjoint_of_reverse_coeffs" if reverse else "adjoint_of_forward_coeffs",
                  emit="adjoint_emit", reverse=not reverse)


def _spec(name, reverse, adjoint=False):
    inputs = (("g", "series"), ("beta", "series"), ("A", "series"), ("initial", "batch")) if adjoint else (
        ("alpha", "series"), ("beta", "series"), ("initial", "batch"))
    return OpSpec(
        name=name,
        inputs=inputs,
        n_out=2 if adjoint else 1,
        kernel=_kernel(reverse, adjoint),
        cpu=Ref("rlscan.ops.linear_scan.cpu:run_adjoint" if adjoint else "rlscan.ops.linear_scan.cpu:run_scan",
                reverse=reverse),
        differentiable=functools.partial(_differentiable, reverse=reverse),
        init_of=None if adjoint else 2,
        compiled=functools.partial(_compiled, reverse=reverse),
    )


FORWARD = _spec("linear_scan", reverse=False)
REVERSE = _spec("linear_scan_reverse", reverse=True)
ADJOINT_FORWARD = _spec("linear_scan_adjoint", reverse=False, adjoint=True)
ADJOINT_REVERSE = _spec("linear_scan_reverse_adjoint", reverse=True, adjoint=True)


@fast_path
def linear_scan(alpha, beta, *, reverse=False, initial=None, time_dim=0, exact=False, out_dtype=None, out=None):
    """Solve a first-order linear recurrence along ``time_dim``::

        forward:  A_t = α_t + β_t · A_{t-1},   A_{-1} = initial
        reverse:  A_t = α_t + β_t · A_{t+1},   A_T    = initial

    Args:
        alpha: the additive term ``α``, a floating tensor or array.
        beta: the multiplier ``β``: a tensor of ``alpha``'s shape, or one float.
        reverse: scan from the last step to the first.
        initial: the state before the first step in scan order, one value per
            environment (``alpha``'s shape without ``time_dim``); 0 when ``None``.
        time_dim: the time axis of ``alpha``.
        exact: evaluate one step at a time in loop order (bit-reproducible).
        out_dtype: the result dtype (default: the inputs' promoted dtype).

    Returns:
        ``A``, of ``alpha``'s shape.
    """
    call = Call("alpha", alpha, time_dim, out_dtype)
    reverse = check_bool("reverse", reverse)
    if isinstance(beta, numbers.Real) and not isinstance(beta, bool):
        beta_value, beta = float(beta), None
    elif beta is None:
        raise TypeError("beta is required: a float, or a floating tensor of alpha's shape, got None")
    else:
        beta_value, beta = 0.0, call.series("beta", beta)
    initial = call.batch("initial", initial)
    spec = REVERSE if reverse else FORWARD
    return call.run(spec, (call.anchor, beta, initial), (beta_value,), exact=exact, out=out)[0]


PUBLIC = PublicOp(
    name="linear_scan",
    function=linear_scan,
    reference=Ref("rlscan.ops.linear_scan.reference:linear_scan"),
    specs=(FORWARD, REVERSE),
    arguments=Arguments(positional=("alpha", "beta"), multiplier="beta", initial=True, fixed={"reverse": False},
                        variants={"linear_scan_reverse": {"reverse": True}}),
    bench=Bench(series=("alpha", "beta"), params=dict(reverse=True)),
)


# ----------------------------------------------------------------------------- the custom ops


def _scan_specs(reverse: bool):
    return (REVERSE, ADJOINT_REVERSE) if reverse else (FORWARD, ADJOINT_FORWARD)


@custom_op("rlscan::linear_scan", mutates_args=())
def linear_scan_op(alpha: torch.Tensor, beta: Optional[torch.Tensor], initial: Optional[torch.Tensor],
                   beta_value: float, reverse: bool, time_dim: int, out_dtype: Optional[torch.dtype]) -> torch.Tensor:
    spec, _ = _scan_specs(reverse)
    tensors = (alpha, beta, initial)
    call = trusted_call(spec, tensors, time_dim, out_dtype)
    (out,) = call.new_outputs(1)
    if 0 not in call.shape:
        call.compute(spec, tensors, (beta_value,), (out,), False)
    return out


@linear_scan_op.register_fake
def _(alpha, beta, initial, beta_value, reverse, time_dim, out_dtype):
    spec, _ = _scan_specs(reverse)
    return trusted_call(spec, (alpha, beta, initial), time_dim, out_dtype).new_outputs(1)[0]


@custom_op("rlscan::linear_scan_adjoint", mutates_args=())
def linear_scan_adjoint_op(grad: torch.Tensor, beta: Optional[torch.Tensor], out: torch.Tensor,
                           initial: Optional[torch.Tensor], beta_value: float, reverse: bool,
                           time_dim: int) -> list[torch.Tensor]:
    """``[∂L/∂α, ∂L/∂β]`` for ``out = linear_scan(α, β, reverse, initial)`` (``∂L/∂β`` is empty
    when ``β`` is a scalar)."""
    _, spec = _scan_specs(reverse)
    tensors = (grad, beta, out, initial)
    call = trusted_call(spec, tensors, time_dim, out.dtype)
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
