"""``rlscan.td_lambda``: λ-returns."""
from __future__ import annotations

from ... import _packed
from ..._fast import fast_path
from ..._call import Call, trusted_call
from ..._library import register_fused
from ..._spec import Arguments, Bench, Kernel, OpSpec, PublicOp, Ref
from .. import _forms, _skip, _value_backward
from ..linear_scan import linear_scan


def _differentiable(call, r, v, nv, boot, term, trunc, g_t, l_t, gamma, lmbda, gamma_lmbda):
    r, v, nv, term, trunc = (_forms.time_first(x, call) for x in (r, v, nv, term, trunc))
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    nu, kappa = _forms.masks(term, trunc, r)
    alpha = r + g * nu * (1 - lam * kappa) * _forms.value_after(v, nv, _forms.upcast(boot, call), r)
    return (_forms.result(linear_scan(alpha, g * lam * kappa, reverse=True), call),)


def _backward(call, tensors, scalars, outs, grads, needs):
    """One fused scan (``_value_backward``): the adjoint runs forward in time."""
    return _value_backward.run(_value_backward.LAMBDA_RETURN, call, tensors, scalars, outs[0], (grads[0], None), needs)


OP = OpSpec(
    name="td_lambda",
    inputs=(("rewards", "series"), ("values", "series"), ("next_values", "series"), ("bootstrap_value", "batch"),
            ("terminated", "flag"), ("truncated", "flag"), ("gamma", "coef"), ("lmbda", "coef")),
    n_out=1,
    kernel=Kernel(module="rlscan.ops.td_lambda.kernel", reverse=True),
    cpu=Ref("rlscan.ops.td_lambda.cpu:run"),
    differentiable=_differentiable,
    backward=_backward,
)
register_fused(OP, trusted_call)


def _differentiable_masked(call, r, v, w, boot, term, mask, g_t, l_t, gamma, lmbda, gamma_lmbda):
    r, v, term, mask = (_forms.time_first(x, call) for x in (r, v, term, mask))
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    m = _skip.kept(mask, r)
    nu, _ = _forms.masks(term, None, r)
    boot = _forms.upcast(boot, call)
    alpha = r + g * nu * (1 - lam) * _skip.next_kept_values_form(v, boot, m)
    return (_forms.result(linear_scan(m * alpha, m * (g * lam * nu) + (1 - m), reverse=True, initial=boot), call),)


MASKED = OpSpec(
    name="td_lambda_masked",
    inputs=(("rewards", "series"), ("values", "series"), ("next_kept_values", "series"), ("bootstrap_value", "batch"),
            ("terminated", "flag"), ("mask", "flag"), ("gamma", "coef"), ("lmbda", "coef")),
    n_out=1,
    kernel=Kernel(module="rlscan.ops.td_lambda.kernel", coeffs="coeffs_masked", reverse=True),
    cpu=Ref("rlscan.ops.td_lambda.cpu:run_masked"),
    differentiable=_differentiable_masked,
    init_of=3,
)
register_fused(MASKED, trusted_call)


@fast_path
def td_lambda(
    rewards,
    values,
    *,
    bootstrap_value=None,
    next_values=None,
    terminated=None,
    truncated=None,
    mask=None,
    cu_seqlens=None,
    gamma=0.99,
    lmbda=0.95,
    time_dim=0,
    exact=False,
    out_dtype=None,
    out=None,
):
    """λ-returns (Sutton & Barto 2018, §12.1), cut at episode ends::

        G_t = r_t + γ_t ν_t [ (1 − λ_t κ_t) V'_t + λ_t κ_t G_{t+1} ]

    Inside an episode this is ``r_t + γ_t [(1 − λ_t) V'_t + λ_t G_{t+1}]``; at a
    termination ``r_t``; at a truncation and at the window's edge ``r_t + γ_t V'_t``.
    Takes the same arguments as :func:`rlscan.gae` (see there and
    docs/semantics.md) and returns the λ-returns, of ``rewards``' shape. Only the values
    *after* each step enter, so ``values`` may be ``None`` when ``next_values`` is given.
    With ``mask`` (1 where the step counts, 0 where it is skipped) a skipped step passes
    the return through (``G_t = G_{t+1}``, ``G_T = bootstrap_value``, 0 when left out) and
    ``V'_t`` of a kept step is the value of the next kept step; ``values`` is then required.
    With ``cu_seqlens`` (or nested jagged inputs) the sequences are packed, as in
    :func:`rlscan.gae`: ``G`` past a sequence's end is its ``bootstrap_value`` (0 where
    ``terminated`` or left out).
    """
    if _packed.is_packed(rewards, cu_seqlens):
        return _packed.td_lambda(rewards, values, cu_seqlens=cu_seqlens, bootstrap_value=bootstrap_value,
                                 terminated=terminated, mask=mask, gamma=gamma, lmbda=lmbda, time_dim=time_dim,
                                 exact=exact, out_dtype=out_dtype, next_values=next_values, truncated=truncated,
                                 out=out)
    call = Call("rewards", rewards, time_dim, out_dtype)
    values = call.series("values", values)
    next_values, bootstrap_value, terminated, truncated = call.episode_ends(
        "td_lambda", next_values, bootstrap_value, terminated, truncated, required=mask is None)
    if values is None and next_values is None:
        raise TypeError("td_lambda needs values (or next_values, the values after each step), got neither")
    g = call.coef("gamma", gamma)
    lam = call.coef("lmbda", lmbda)
    if mask is not None:
        mask = _skip.check_mask(call, "td_lambda", mask, next_values, truncated)
        return _skip.run_on_next_kept_values(call, MASKED, values, bootstrap_value, terminated, mask, g, lam, exact,
                                             out)[0]
    tensors = (call.anchor, values, next_values, bootstrap_value, terminated, truncated, g.tensor, lam.tensor)
    return call.run(OP, tensors, (g.value, lam.value, g.value * lam.value), exact=exact, out=out)[0]


PUBLIC = PublicOp(
    name="td_lambda",
    function=td_lambda,
    reference=Ref("rlscan.ops.td_lambda.reference:td_lambda"),
    specs=(OP, MASKED),
    arguments=Arguments(positional=("rewards", "values"), value_after="next_values", bootstrap="required",
                        flags=("terminated", "truncated"), coefs=("gamma", "lmbda")),
    bench=Bench(series=("rewards", "values"), flags=("terminated",), batch=("bootstrap_value",),
                params=dict(gamma=0.99, lmbda=0.95)),
)
