"""``moving_sum``, the test-only op, and its registry entry."""
from rlscan._call import Call, trusted_call
from rlscan._fast import fast_path
from rlscan._library import register_fused
from rlscan._spec import Arguments, Bench, Kernel, OpSpec, PublicOp, Ref
from rlscan.ops import _forms
from rlscan.ops.eligibility_traces.op import traces_backward
from rlscan.ops.linear_scan import linear_scan


def _differentiable(call, x, dones, init, gamma):
    x, dones = _forms.time_first(x, call), _forms.time_first(dones, call)
    keep = x.new_ones(x.shape) if dones is None else (dones == 0).to(x.dtype)
    beta = _forms.shift_back(gamma * keep, 1.0)
    return (_forms.result(linear_scan(x, beta, initial=_forms.upcast(init, call)), call),)


def _backward(call, tensors, scalars, outs, grads, needs):
    """Eligibility traces' fused backward with ``λ = 1``."""
    x, dones, init = tensors
    (gamma,) = scalars
    g_x, _, _, g_init = traces_backward(call, x, dones, None, None, init, (gamma, 1.0, gamma), outs[0], grads[0],
                                        (needs[0], False, False, needs[2]))
    return g_x, None, g_init


OP = OpSpec(
    name="toy_moving_sum",
    inputs=(("x", "series"), ("dones", "flag"), ("initial", "batch")),
    n_out=1,
    kernel=Kernel(module="toy_scan.kernel", reverse=False),
    cpu=Ref("toy_scan.cpu:run"),
    differentiable=_differentiable,
    init_of=2,
    backward=_backward,
)
register_fused(OP, trusted_call)


@fast_path
def moving_sum(x, *, dones=None, gamma, initial=None, time_dim=0, exact=False, out_dtype=None, out=None):
    """``S_t = x_t + γ (1 − dones_{t−1}) S_{t−1}``, ``S_{−1} = initial`` (``γ`` a float)."""
    call = Call("x", x, time_dim, out_dtype)
    dones = call.flags("dones", dones)
    initial = call.batch("initial", initial)
    return call.run(OP, (call.anchor, dones, initial), (float(gamma),), exact=exact, out=out)[0]


PUBLIC = PublicOp(
    name="moving_sum",
    function=moving_sum,
    reference=Ref("toy_scan.reference:moving_sum"),
    specs=(OP,),
    arguments=Arguments(positional=("x",), flags=("dones",), coefs=("gamma",), initial=True),
    bench=Bench(series=("x",), flags=("dones",), batch=("initial",), params=dict(gamma=0.9)),
)
