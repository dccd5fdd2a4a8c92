"""``rlscan.discounted_returns``: discounted sums of rewards, cut at episode ends."""
from __future__ import annotations

from ... import _packed
from ..._fast import fast_path
from ..._call import Call, trusted_call
from ..._library import register_fused
from ..._spec import Arguments, Bench, Kernel, OpSpec, PublicOp, Ref
from .. import _forms, _skip, _value_backward
from ..linear_scan import linear_scan


def _differentiable(call, r, nv, boot, term, trunc, g_t, gamma):
    r, nv, term, trunc = (_forms.time_first(x, call) for x in (r, nv, term, trunc))
    g = _forms.coef(g_t, gamma, call)
    nu, kappa = _forms.masks(term, trunc, r)
    alpha = r + g * nu * (1 - kappa) * _forms.value_after(None, nv, _forms.upcast(boot, call), r)
    return (_forms.result(linear_scan(alpha, g * kappa, reverse=True), call),)


def _backward(call, tensors, scalars, outs, grads, needs):
    """The λ-return's fused backward (``_value_backward``) with no values and ``λ = 1``."""
    r, nv, boot, term, trunc, g_t = tensors
    (gamma,) = scalars
    g_r, _, g_nv, g_boot, _, _, g_gamma, _ = _value_backward.run(
        _value_backward.LAMBDA_RETURN, call, (r, None, nv, boot, term, trunc, g_t, None), (gamma, 1.0, gamma),
        outs[0], (grads[0], None), (needs[0], False, needs[1], needs[2], False, False, needs[5], False))
    return g_r, g_nv, g_boot, None, None, g_gamma


OP = OpSpec(
    name="discounted_returns",
    inputs=(("rewards", "series"), ("next_values", "series"), ("bootstrap_value", "batch"),
            ("terminated", "flag"), ("truncated", "flag"), ("gamma", "coef")),
    n_out=1,
    kernel=Kernel(module="rlscan.ops.discounted_returns.kernel", reverse=True),
    cpu=Ref("rlscan.ops.discounted_returns.cpu:run"),
    differentiable=_differentiable,
    backward=_backward,
)
register_fused(OP, trusted_call)


def _differentiable_masked(call, r, boot, term, mask, g_t, gamma):
    r, term, mask = (_forms.time_first(x, call) for x in (r, term, mask))
    g = _forms.coef(g_t, gamma, call)
    m = _skip.kept(mask, r)
    nu, _ = _forms.masks(term, None, r)
    beta = m * (g * nu) + (1 - m)
    return (_forms.result(linear_scan(m * r, beta, reverse=True, initial=_forms.upcast(boot, call)), call),)


MASKED = OpSpec(
    name="discounted_returns_masked",
    inputs=(("rewards", "series"), ("bootstrap_value", "batch"), ("terminated", "flag"), ("mask", "flag"),
            ("gamma", "coef")),
    n_out=1,
    kernel=Kernel(module="rlscan.ops.discounted_returns.kernel", coeffs="coeffs_masked", reverse=True),
    cpu=Ref("rlscan.ops.discounted_returns.cpu:run_masked"),
    differentiable=_differentiable_masked,
    init_of=1,
)
register_fused(MASKED, trusted_call)


@fast_path
def discounted_returns(
    rewards,
    *,
    bootstrap_value=None,
    next_values=None,
    terminated=None,
    truncated=None,
    mask=None,
    cu_seqlens=None,
    gamma=0.99,
    time_dim=0,
    exact=False,
    out_dtype=None,
    out=None,
):
    """Discounted returns, cut at episode ends::

        G_t = r_t + γ_t ν_t [ (1 − κ_t) V'_t + κ_t G_{t+1} ]

    Values enter only where the trace is cut with a bootstrap: at truncations (from
    ``next_values``, which ``truncated`` requires) and at the window's edge (from
    ``bootstrap_value``; without it the return stops there, the Monte Carlo return
    of complete episodes). This is :func:`rlscan.td_lambda` with ``λ = 1``. See
    docs/semantics.md.

    With ``mask`` (1 where the step counts, 0 where it is skipped) a skipped step passes
    the return through (``G_t = G_{t+1}``, ``G_T = bootstrap_value``, 0 when left out);
    not with ``next_values`` or ``truncated``. With ``cu_seqlens`` (or nested jagged
    inputs) the sequences are packed, as in :func:`rlscan.gae`.
    """
    if _packed.is_packed(rewards, cu_seqlens):
        return _packed.discounted_returns(rewards, cu_seqlens=cu_seqlens, bootstrap_value=bootstrap_value,
                                          terminated=terminated, mask=mask, gamma=gamma, time_dim=time_dim,
                                          exact=exact, out_dtype=out_dtype, next_values=next_values,
                                          truncated=truncated, out=out)
    call = Call("rewards", rewards, time_dim, out_dtype)
    next_values, bootstrap_value, terminated, truncated = call.episode_ends(
        "discounted_returns", next_values, bootstrap_value, terminated, truncated, required=False)
    g = call.coef("gamma", gamma)
    if mask is not None:
        mask = _skip.check_mask(call, "discounted_returns", mask, next_values, truncated)
        tensors = (call.anchor, bootstrap_value, terminated, mask, g.tensor)
        return call.run(MASKED, tensors, (g.value,), exact=exact, out=out)[0]
    tensors = (call.anchor, next_values, bootstrap_value, terminated, truncated, g.tensor)
    return call.run(OP, tensors, (g.value,), exact=exact, out=out)[0]


PUBLIC = PublicOp(
    name="discounted_returns",
    function=discounted_returns,
    reference=Ref("rlscan.ops.discounted_returns.reference:discounted_returns"),
    specs=(OP, MASKED),
    arguments=Arguments(positional=("rewards",), value_after="next_values", bootstrap="optional",
                        flags=("terminated", "truncated"), coefs=("gamma",)),
    bench=Bench(series=("rewards",), flags=("terminated",), batch=("bootstrap_value",), params=dict(gamma=0.99)),
)
