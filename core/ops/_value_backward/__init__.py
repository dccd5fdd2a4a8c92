"""The fused backward of GAE, TD(λ) and discounted returns: one scan forward in time that
writes every input's gradient (the equations are in ``kernel.py``; ``cpu.py`` is the same
scan as a CPU loop).

The three ops share one form: inputs ``(r, V, V_next, bootstrap, terminated, truncated,
γ, λ)`` and the scan state ``A`` (GAE's advantages, the λ-return, the return); a
discounted return is the λ-return with ``V`` absent and ``λ = 1``.
"""
from __future__ import annotations

from ..._autograd import (
    backward_spec, gradient_buffers, run_backward, split_value_after, value_after_source,
)
from ..._spec import Kernel, OpSpec, Ref


def _spec(name: str, is_gae: bool):
    inputs = (("grad", "series"), ("grad_returns", "series"), ("values", "series"), ("next_values", "series"),
              ("bootstrap_value", "batch"), ("terminated", "flag"), ("truncated", "flag"), ("gamma", "coef"),
              ("lmbda", "coef"), ("state", "series"))
    # the forward state is always there, laid out as the outputs: it orients the tiles
    prefix = "gae" if is_gae else "lambda_return"
    kernel = Kernel(module="rlscan.ops._value_backward.kernel", coeffs=f"{prefix}_coeffs", emit=f"{prefix}_emit",
                    reverse=False)
    return backward_spec(name, inputs, 5, kernel, time_contiguous_of=9,
                         cpu=Ref("rlscan.ops._value_backward.cpu:run", is_gae=is_gae))


GAE = _spec("gae_backward", is_gae=True)
LAMBDA_RETURN = _spec("lambda_return_backward", is_gae=False)


def run(spec: OpSpec, call, inputs: tuple, scalars: tuple, state, grads: tuple, needs: tuple) -> tuple:
    """The gradients of ``inputs = (r, V, V_next, bootstrap, terminated, truncated, γ, λ)``
    (``None`` where ``needs`` is False), given the output gradients ``grads = (∂L/∂A,
    ∂L/∂returns)`` and the forward scan state ``A``; ``scalars = (γ, λ, γλ)``."""
    r, v, nv, boot, term, trunc, gamma, lmbda = inputs
    need_r, need_v, need_nv, need_boot, _, _, need_gamma, need_lmbda = needs
    after, need_after = value_after_source(nv, boot, need_nv, need_boot)
    g_r, g_v, g_vn, g_gamma, g_lmbda = gradient_buffers(
        call, (r, v, after, gamma, lmbda), (need_r, need_v, need_after, need_gamma, need_lmbda))
    tensors = (grads[0], grads[1], v, nv, boot, term, trunc, gamma, lmbda, state)
    run_backward(spec, call, tensors, scalars, (g_r, g_v, g_vn, g_gamma, g_lmbda))
    g_nv, g_boot = split_value_after(call, g_vn, nv)
    return (g_r, g_v, g_nv, g_boot, None, None, g_gamma, g_lmbda)
