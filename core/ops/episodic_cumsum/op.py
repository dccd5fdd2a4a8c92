"""``rlscan.episodic_cumsum``: prefix sums that restart at episode boundaries."""
from __future__ import annotations

from ..._fast import fast_path
from ..._call import Call, trusted_call
from ..._library import register_fused
from ..._spec import Arguments, Bench, Kernel, OpSpec, PublicOp, Ref
from .. import _forms
from ..eligibility_traces.op import traces_backward
from ..linear_scan import linear_scan


def _differentiable(call, x, dones, init):
    x, dones = _forms.time_first(x, call), _forms.time_first(dones, call)
    keep = x.new_ones(x.shape) if dones is None else (dones == 0).to(x.dtype)
    return (_forms.result(linear_scan(x, _forms.shift_back(keep, 1.0), initial=_forms.upcast(init, call)), call),)


def _backward(call, tensors, scalars, outs, grads, needs):
    """Eligibility traces' fused backward with ``γ λ = 1``."""
    x, dones, init = tensors
    g_x, _, _, g_init = traces_backward(call, x, dones, None, None, init, (1.0, 1.0, 1.0), outs[0], grads[0],
                                        (needs[0], False, False, needs[2]))
    return g_x, None, g_init


OP = OpSpec(
    name="episodic_cumsum",
    inputs=(("x", "series"), ("dones", "flag"), ("initial", "batch")),
    n_out=1,
    kernel=Kernel(module="rlscan.ops.episodic_cumsum.kernel", reverse=False),
    cpu=Ref("rlscan.ops.episodic_cumsum.cpu:run"),
    differentiable=_differentiable,
    init_of=2,
    backward=_backward,
)
register_fused(OP, trusted_call)


@fast_path
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


PUBLIC = PublicOp(
    name="episodic_cumsum",
    function=episodic_cumsum,
    reference=Ref("rlscan.ops.episodic_cumsum.reference:episodic_cumsum"),
    specs=(OP,),
    arguments=Arguments(positional=("x",), flags=("dones",), initial=True),
    bench=Bench(series=("x",), flags=("dones",), batch=("initial",)),
)
