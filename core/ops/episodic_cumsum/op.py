"""``rlscan.episodic_cumsum``: prefix sums that restart at episode boundaries."""
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


def _differentiable(call, x, dones, init):
    x, dones = _forms.time_first(x, call), _forms.time_first(dones, call)
    keep = x.new_ones(x.shape) if dones is None else (dones == 0).to(x.dtype)
    return (_forms.result(linear_scan(x, _forms.shift_back(keep, 1.0), initial=_forms.upcast(init, call)), call),)


OP = OpSpec(
    name="episodic_cumsum",
    inputs=(("x", "series"), ("dones", "flag"), ("initial", "batch")),
    n_out=1,
    kernel=_kernel,
    cpu=_cpu,
    differentiable=_differentiable,
    init_of=2,
)
register_fused(OP)


def episodic_cumsum(x, *, dones, initial=None, time_dim=0, exact=False, out_dtype=None, out=None):
    """A prefix sum over time that restarts after each episode end::

        S_0 = x_0 + initial
        S_t = x_t + (1 − dones_{t−1}) S_{t−1}

    With ``x = rewards``, ``S`` at a done step is the episode's return; with ``x = 1``,
    its length. ``initial`` is the running sum of the episode in progress before
    step 0 (one per environment, 0 when ``None``). See docs/semantics.md.
    """
    call = Call("x", x, time_dim, out_dtype)
    dones = call.flags("dones", dones)
    initial = call.batch("initial", initial)
    return call.run(OP, (call.anchor, dones, initial), (), exact=exact, out=out)[0]
