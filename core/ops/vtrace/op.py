"""``rlscan.vtrace``: IMPALA's off-policy value targets and policy-gradient advantages."""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..._fast import fast_path
from ..._call import Call, trusted_call
from ..._autograd import (
    backward_spec, gradient_buffers, run_backward, split_value_after, value_after_source,
)
from ..._library import register_fused
from ..._inputs import check_clip
from ..._spec import Arguments, Bench, Kernel, OpSpec, PublicOp, Ref
from .. import _forms
from ..linear_scan import linear_scan


class VTraceOutput(NamedTuple):
    vs: torch.Tensor
    pg_advantages: torch.Tensor


def _differentiable(call, r, v, log_rho, nv, boot, term, trunc, g_t, l_t, gamma, lmbda, rho_clip, c_clip, pg_clip):
    r, v, log_rho, nv, term, trunc = (_forms.time_first(x, call) for x in (r, v, log_rho, nv, term, trunc))
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    nu, kappa = _forms.masks(term, trunc, r)
    rho = log_rho.exp()
    v_next = _forms.value_after(v, nv, _forms.upcast(boot, call), r)
    delta = rho.clamp(max=rho_clip) * (r + g * v_next * nu - v)
    vs_minus_v = linear_scan(delta, g * lam * rho.clamp(max=c_clip) * kappa, reverse=True)
    vs = v + vs_minus_v
    vs_ahead = torch.cat([vs[1:], vs[-1:]])  # only read where κ_t = 1, i.e. t < T-1
    v_hat = torch.where(kappa != 0, vs_ahead, v_next)
    rho_pg = rho.clamp(max=pg_clip)
    pg = torch.where(rho_pg.isfinite(), rho_pg * (r + g * nu * v_hat - v), torch.nan)
    return _forms.result(vs, call), _forms.result(pg, call)


BACKWARD = backward_spec(
    "vtrace_backward",
    (("grad_vs", "series"), ("grad_pg", "series"), ("rewards", "series"), ("values", "series"),
     ("log_rhos", "series"), ("next_values", "series"), ("bootstrap_value", "batch"), ("terminated", "flag"),
     ("truncated", "flag"), ("gamma", "coef"), ("lmbda", "coef"), ("vs", "series")),
    n_out=6, time_contiguous_of=11,
    kernel=Kernel(module="rlscan.ops.vtrace.kernel", coeffs="backward_coeffs", emit="backward_emit", reverse=False),
    cpu=Ref("rlscan.ops.vtrace.cpu:run_backward"))


def _backward(call, tensors, scalars, outs, grads, needs):
    """One fused scan forward in time (``kernel.backward_coeffs``, or ``cpu.vtrace_backward_loop``)."""
    r, v, log_rho, nv, boot, term, trunc, g_t, l_t = tensors
    need_r, need_v, need_rho, need_nv, need_boot, _, _, need_g, need_l = needs
    after, need_after = value_after_source(nv, boot, need_nv, need_boot)
    g_r, g_v, g_rho, g_vn, g_g, g_l = gradient_buffers(
        call, (r, v, log_rho, after, g_t, l_t), (need_r, need_v, need_rho, need_after, need_g, need_l))
    run_backward(BACKWARD, call, (grads[0], grads[1], r, v, log_rho, nv, boot, term, trunc, g_t, l_t, outs[0]),
                 scalars, (g_r, g_v, g_rho, g_vn, g_g, g_l))
    g_nv, g_boot = split_value_after(call, g_vn, nv)
    return g_r, g_v, g_rho, g_nv, g_boot, None, None, g_g, g_l


OP = OpSpec(
    name="vtrace",
    inputs=(("rewards", "series"), ("values", "series"), ("log_rhos", "series"), ("next_values", "series"),
            ("bootstrap_value", "batch"), ("terminated", "flag"), ("truncated", "flag"),
            ("gamma", "coef"), ("lmbda", "coef")),
    n_out=2,
    kernel=Kernel(module="rlscan.ops.vtrace.kernel", reverse=True),
    cpu=Ref("rlscan.ops.vtrace.cpu:run"),
    differentiable=_differentiable,
    backward=_backward,
)
register_fused(OP, trusted_call)


@fast_path
def vtrace(
    rewards,
    values,
    log_rhos,
    *,
    bootstrap_value=None,
    next_values=None,
    terminated=None,
    truncated=None,
    gamma=0.99,
    lmbda=1.0,
    rho_clip=1.0,
    c_clip=1.0,
    pg_rho_clip=1.0,
    time_dim=0,
    exact=False,
    out_dtype=None,
    out=None,
) -> VTraceOutput:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018)::

        ρ_t = exp(log_rhos[t]),  ρ̄_t = min(ρ̄, ρ_t),  c_t = λ_t min(c̄, ρ_t)
        (v − V)_t = ρ̄_t (r_t + γ_t ν_t V'_t − V_t) + γ_t c_t κ_t (v − V)_{t+1}
        vs_t = V_t + (v − V)_t
        pg_t = min(ρ̄ᵖᵍ, ρ_t) (r_t + γ_t ν_t v̂_t − V_t),  v̂_t = vs_{t+1} if κ_t else V'_t

    ``log_rhos`` are ``log π(a_t|s_t) − log μ(a_t|s_t)``: target over behaviour.
    ``rho_clip``, ``c_clip`` and ``pg_rho_clip`` are ``ρ̄``, ``c̄`` and ``ρ̄ᵖᵍ``
    (``float('inf')`` disables a clip). At a truncated step the pg advantage
    bootstraps from the final observation's value (``next_values``), never from
    the next episode's ``vs``. The other arguments are those of :func:`rlscan.gae`;
    see docs/semantics.md.

    Returns:
        ``VTraceOutput(vs, pg_advantages)``, each of ``rewards``' shape.
    """
    call = Call("rewards", rewards, time_dim, out_dtype)
    values = call.series("values", values, required=True)
    log_rhos = call.series("log_rhos", log_rhos, required=True)
    next_values, bootstrap_value, terminated, truncated = call.episode_ends(
        "vtrace", next_values, bootstrap_value, terminated, truncated, required=True)
    g = call.coef("gamma", gamma)
    lam = call.coef("lmbda", lmbda)
    clips = tuple(check_clip(n, x) for n, x in (("rho_clip", rho_clip), ("c_clip", c_clip), ("pg_rho_clip", pg_rho_clip)))
    tensors = (call.anchor, values, log_rhos, next_values, bootstrap_value, terminated, truncated, g.tensor, lam.tensor)
    return VTraceOutput(*call.run(OP, tensors, (g.value, lam.value) + clips, exact=exact, out=out))


PUBLIC = PublicOp(
    name="vtrace",
    function=vtrace,
    reference=Ref("rlscan.ops.vtrace.reference:vtrace"),
    specs=(OP,),
    exports=(VTraceOutput,),
    arguments=Arguments(positional=("rewards", "values", "log_rhos"), value_after="next_values", bootstrap="required",
                        flags=("terminated", "truncated"), coefs=("gamma", "lmbda"),
                        clips=("rho_clip", "c_clip", "pg_rho_clip")),
    bench=Bench(series=("rewards", "values", "log_rhos"), flags=("terminated",), batch=("bootstrap_value",),
                params=dict(gamma=0.99, lmbda=1.0, rho_clip=1.0, c_clip=1.0, pg_rho_clip=1.0)),
)
