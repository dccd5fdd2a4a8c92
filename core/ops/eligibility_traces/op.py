"""``rlscan.eligibility_traces``: accumulating traces that reset after each episode end."""
from __future__ import annotations

from ..._call import Call, OpSpec
from ..._library import register_fused
from .. import _forms
from ..linear_scan import linear_scan


def _kernel():
    from . import kernel

    return kernel.coeffs, kernel.emit, False


def _cpu(*args):
    from . import cpu

    cpu.run(*args)


def _differentiable(call, x, dones, g_t, l_t, init, gamma, lmbda, gamma_lmbda):
    x, dones = _forms.time_first(x, call), _forms.time_first(dones, call)
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    keep = 1.0 if dones is None else (dones == 0).to(x.dtype)
    decay = g * lam * keep * x.new_ones(x.shape)
    beta = _forms.shift_back(decay, 1.0)
    return (_forms.result(linear_scan(x, beta, initial=_forms.upcast(init, call)), call),)


OP = OpSpec(
    name="eligibility_traces",
    inputs=(("x", "series"), ("dones", "flag"), ("gamma", "coef"), ("lmbda", "coef"), ("initial", "batch")),
    n_out=1,
    kernel=_kernel,
    cpu=_cpu,
    differentiable=_differentiable,
    init_of=4,
)
register_fused(OP)


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
