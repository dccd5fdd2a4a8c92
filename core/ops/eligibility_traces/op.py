"""``rlscan.eligibility_traces``: accumulating traces that reset after each episode end."""
from __future__ import annotations

from ..._fast import fast_path
from ..._call import Call, trusted_call
from ..._autograd import backward_spec, gradient_buffers, run_backward
from ..._library import register_fused
from ..._spec import Arguments, Bench, Kernel, OpSpec, PublicOp, Ref
from .. import _forms
from ..linear_scan import linear_scan


def _differentiable(call, x, dones, g_t, l_t, init, gamma, lmbda, gamma_lmbda):
    x, dones = _forms.time_first(x, call), _forms.time_first(dones, call)
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    keep = 1.0 if dones is None else (dones == 0).to(x.dtype)
    decay = g * lam * keep * x.new_ones(x.shape)
    beta = _forms.shift_back(decay, 1.0)
    return (_forms.result(linear_scan(x, beta, initial=_forms.upcast(init, call)), call),)


BACKWARD = backward_spec(
    "eligibility_traces_backward",
    (("grad", "series"), ("dones", "flag"), ("gamma", "coef"), ("lmbda", "coef"), ("traces", "series")),
    n_out=4, time_contiguous_of=4,
    kernel=Kernel(module="rlscan.ops.eligibility_traces.kernel", coeffs="backward_coeffs", emit="backward_emit",
                  reverse=True),
    cpu=Ref("rlscan.ops.eligibility_traces.cpu:run_backward"))


def traces_backward(call, x, dones, g_t, l_t, init, scalars, traces, grad, needs) -> tuple:
    """``(∂x, ∂γ, ∂λ, ∂initial)`` by one fused scan in reverse (``kernel.backward_coeffs``, or
    ``cpu.traces_backward_loop``);
    the episodic prefix sum's too, with ``γ λ = 1``."""
    need_x, need_g, need_l, need_init = needs
    g_x, g_init, g_g, g_l = gradient_buffers(call, (x, init, g_t, l_t), (need_x, need_init, need_g, need_l))
    run_backward(BACKWARD, call, (grad, dones, g_t, l_t, traces), scalars, (g_x, g_init, g_g, g_l))
    return g_x, g_g, g_l, None if g_init is None else g_init.select(call.time_dim, 0)


def _backward(call, tensors, scalars, outs, grads, needs):
    x, dones, g_t, l_t, init = tensors
    g_x, g_g, g_l, g_init = traces_backward(call, x, dones, g_t, l_t, init, scalars, outs[0], grads[0],
                                            (needs[0], needs[2], needs[3], needs[4]))
    return g_x, None, g_g, g_l, g_init


OP = OpSpec(
    name="eligibility_traces",
    inputs=(("x", "series"), ("dones", "flag"), ("gamma", "coef"), ("lmbda", "coef"), ("initial", "batch")),
    n_out=1,
    kernel=Kernel(module="rlscan.ops.eligibility_traces.kernel", reverse=False),
    cpu=Ref("rlscan.ops.eligibility_traces.cpu:run"),
    differentiable=_differentiable,
    init_of=4,
    backward=_backward,
)
register_fused(OP, trusted_call)


@fast_path
def eligibility_traces(x, *, dones, gamma, lmbda, initial=None, time_dim=0, exact=False, out_dtype=None, out=None):
    """Accumulating eligibility traces (Sutton & Barto 2018, §12.2), reset after episode ends::

        e_0 = x_0 + initial
        e_t = x_t + γ_{t−1} λ_{t−1} (1 − dones_{t−1}) e_{t−1}

    Args:
        x: what enters the trace at each step (e.g. a per-step feature or gradient term).
        dones: flags, set where the episode ended at step ``t`` (``None``: never).
        gamma, lmbda: floats in [0, 1], or tensors that broadcast to ``x``; the
            coefficient linking ``t−1`` and ``t`` is that of step ``t−1``.
        initial: the trace carried into step 0, already decayed (``γλ·e`` of the
            previous window's last step, or 0 after an episode end); one per environment.

    Returns:
        ``e``, of ``x``'s shape. See docs/semantics.md.
    """
    call = Call("x", x, time_dim, out_dtype)
    dones = call.flags("dones", dones)
    g = call.coef("gamma", gamma)
    lam = call.coef("lmbda", lmbda)
    initial = call.batch("initial", initial)
    tensors = (call.anchor, dones, g.tensor, lam.tensor, initial)
    return call.run(OP, tensors, (g.value, lam.value, g.value * lam.value), exact=exact, out=out)[0]


PUBLIC = PublicOp(
    name="eligibility_traces",
    function=eligibility_traces,
    reference=Ref("rlscan.ops.eligibility_traces.reference:eligibility_traces"),
    specs=(OP,),
    arguments=Arguments(positional=("x",), flags=("dones",), coefs=("gamma", "lmbda"), initial=True),
    bench=Bench(series=("x",), flags=("dones",), batch=("initial",), params=dict(gamma=0.99, lmbda=0.95)),
)
