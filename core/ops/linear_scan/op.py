"""``rlscan.linear_scan``: the first-order linear recurrence every op is built on."""
from __future__ import annotations

import functools
import numbers

import torch

from ..._call import Call, OpSpec


def _kernel(reverse: bool):
    from . import kernel

    return kernel.coeffs, kernel.emit, reverse


def _adjoint_kernel(reverse: bool):
    from . import kernel

    coeffs = kernel.adjoint_of_reverse_coeffs if reverse else kernel.adjoint_of_forward_coeffs
    return coeffs, kernel.adjoint_emit, not reverse


def _cpu(reverse: bool, adjoint: bool):
    from . import cpu

    return functools.partial(cpu.run_adjoint if adjoint else cpu.run_scan, reverse=reverse)


class _LinearScan(torch.autograd.Function):
    """Forward: one fused scan. Backward: one fused scan the other way (the adjoint)."""

    @staticmethod
    def forward(ctx, call, spec, alpha, beta, initial, beta_value, reverse):
        (out,) = call.new_outputs(1)
        call.compute(spec, (alpha, beta, initial), (beta_value,), (out,), exact=False)
        ctx.save_for_backward(beta, initial, out)
        ctx.call, ctx.beta_value, ctx.reverse = call, beta_value, reverse
        return out

    @staticmethod
    def backward(ctx, grad):
        beta, initial, out = ctx.saved_tensors
        call, reverse = ctx.call, ctx.reverse
        need_alpha, need_beta, need_init = ctx.needs_input_grad[2:5]
        g = Call("grad", grad, call.time_dim)
        grad_alpha = torch.empty_like(out)
        grad_beta = torch.empty_like(out) if need_beta else None
        spec = ADJOINT_REVERSE if reverse else ADJOINT_FORWARD
        g.batch_ids = {id(initial)} if initial is not None else set()
        g.compute(spec, (grad, beta, out, initial), (ctx.beta_value,), (grad_alpha, grad_beta), exact=False)
        grad_init = None
        if need_init:
            T = out.shape[call.time_dim]
            edge = T - 1 if reverse else 0
            b = ctx.beta_value if beta is None else beta.select(call.time_dim, edge)
            grad_init = (grad_alpha.select(call.time_dim, edge) * b).to(initial.dtype)
        return (
            None, None,
            grad_alpha if need_alpha else None,
            grad_beta, grad_init, None, None,
        )


def _differentiable(call, alpha, beta, initial, beta_value, *, reverse):
    spec = REVERSE if reverse else FORWARD
    return (_LinearScan.apply(call, spec, alpha, beta, initial, beta_value, reverse),)


def _spec(name, reverse, adjoint=False):
    inputs = (("g", "series"), ("beta", "series"), ("A", "series"), ("initial", "batch")) if adjoint else (
        ("alpha", "series"), ("beta", "series"), ("initial", "batch"))
    return OpSpec(
        name=name,
        inputs=inputs,
        n_out=2 if adjoint else 1,
        kernel=functools.partial(_adjoint_kernel if adjoint else _kernel, reverse),
        cpu=_cpu(reverse, adjoint),
        differentiable=functools.partial(_differentiable, reverse=reverse),
        init_of=None if adjoint else 2,
    )


FORWARD = _spec("linear_scan", reverse=False)
REVERSE = _spec("linear_scan", reverse=True)
ADJOINT_FORWARD = _spec("linear_scan_adjoint", reverse=False, adjoint=True)
ADJOINT_REVERSE = _spec("linear_scan_adjoint", reverse=True, adjoint=True)


def linear_scan(alpha, beta, *, reverse=False, initial=None, time_dim=0, exact=False, out_dtype=None):
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
    if isinstance(beta, numbers.Real) and not isinstance(beta, bool):
        beta_value, beta = float(beta), None
    else:
        beta_value, beta = 0.0, call.series("beta", beta)
    initial = call.batch("initial", initial)
    if not isinstance(reverse, bool):
        raise TypeError(f"reverse must be a bool, got {type(reverse).__name__}")
    spec = REVERSE if reverse else FORWARD
    return call.run(spec, (call.anchor, beta, initial), (beta_value,), exact=exact)[0]
