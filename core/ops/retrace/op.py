"""``rlscan.retrace``: Retrace(λ) Q-value targets for discrete actions."""
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


class RetraceOutput(NamedTuple):
    q_targets: torch.Tensor
    advantages: torch.Tensor


def retrace_form(call, r, q, e, rho, ne, boot, term, trunc, g_t, l_t, gamma, lmbda, c_clip):
    """The differentiable form, from time-first ``q_t``, ``E_t`` and ``ρ_t`` (shared with
    :func:`rlscan.retrace_from_q`)."""
    g, lam = _forms.coef(g_t, gamma, call), _forms.coef(l_t, lmbda, call)
    nu, kappa = _forms.masks(term, trunc, r)
    c_ahead = _forms.shift_ahead(rho.clamp(max=c_clip), 0.0)
    trace = g * lam * kappa * c_ahead
    alpha = r + g * nu * _forms.value_after(e, ne, _forms.upcast(boot, call), r) - trace * _forms.shift_ahead(q, 0.0)
    q_ret = linear_scan(alpha, trace, reverse=True)
    return _forms.result(q_ret, call), _forms.result(q_ret - e, call)


def _differentiable(call, r, q, e, log_rho, ne, boot, term, trunc, g_t, l_t, gamma, lmbda, gamma_lmbda, c_clip):
    r, q, e, log_rho, ne, term, trunc = (_forms.time_first(x, call) for x in (r, q, e, log_rho, ne, term, trunc))
    return retrace_form(call, r, q, e, log_rho.exp(), ne, boot, term, trunc, g_t, l_t, gamma, lmbda, c_clip)


BACKWARD = backward_spec(
    "retrace_backward",
    (("grad_q_targets", "series"), ("grad_advantages", "series"), ("q_taken", "series"), ("expected_q", "series"),
     ("log_rhos", "series"), ("next_expected_q", "series"), ("bootstrap_value", "batch"), ("terminated", "flag"),
     ("truncated", "flag"), ("gamma", "coef"), ("lmbda", "coef"), ("q_targets", "series")),
    n_out=7, time_contiguous_of=11,
    kernel=Kernel(module="rlscan.ops.retrace.kernel", coeffs="backward_coeffs", emit="backward_emit", reverse=False),
    cpu=Ref("rlscan.ops.retrace.cpu:run_backward"))


def _backward(call, tensors, scalars, outs, grads, needs):
    """One fused scan forward in time (``kernel.backward_coeffs``, or ``cpu.retrace_backward_loop``)."""
    r, q, e, log_rho, ne, boot, term, trunc, g_t, l_t = tensors
    need_r, need_q, need_e, need_rho, need_ne, need_boot, _, _, need_g, need_l = needs
    after, need_after = value_after_source(ne, boot, need_ne, need_boot)
    g_r, g_q, g_e, g_rho, g_en, g_g, g_l = gradient_buffers(
        call, (r, q, e, log_rho, after, g_t, l_t), (need_r, need_q, need_e, need_rho, need_after, need_g, need_l))
    run_backward(BACKWARD, call, (grads[0], grads[1], q, e, log_rho, ne, boot, term, trunc, g_t, l_t, outs[0]),
                 scalars, (g_r, g_q, g_e, g_rho, g_en, g_g, g_l))
    g_ne, g_boot = split_value_after(call, g_en, ne)
    return g_r, g_q, g_e, g_rho, g_ne, g_boot, None, None, g_g, g_l


OP = OpSpec(
    name="retrace",
    inputs=(("rewards", "series"), ("q_taken", "series"), ("expected_q", "series"), ("log_rhos", "series"),
            ("next_expected_q", "series"), ("bootstrap_value", "batch"), ("terminated", "flag"),
            ("truncated", "flag"), ("gamma", "coef"), ("lmbda", "coef")),
    n_out=2,
    kernel=Kernel(module="rlscan.ops.retrace.kernel", reverse=True),
    cpu=Ref("rlscan.ops.retrace.cpu:run"),
    differentiable=_differentiable,
    backward=_backward,
)
register_fused(OP, trusted_call)


@fast_path
def retrace(
    rewards,
    q_taken,
    expected_q,
    log_rhos,
    *,
    bootstrap_value=None,
    next_expected_q=None,
    terminated=None,
    truncated=None,
    gamma=0.99,
    lmbda=1.0,
    c_clip=1.0,
    time_dim=0,
    exact=False,
    out_dtype=None,
    out=None,
) -> RetraceOutput:
    """Retrace(λ) targets (Munos et al. 2016), written recursively::

        c_t = min(c̄, exp(log_rhos[t]))
        Qʳᵉᵗ_t = r_t + γ_t ν_t E'_t + γ_t λ_t κ_t c_{t+1} (Qʳᵉᵗ_{t+1} − q_{t+1})
        advantage_t = Qʳᵉᵗ_t − E_t

    Args:
        rewards: ``r_t``.
        q_taken: ``q_t = Q(s_t, a_t)``, the action-value of the action taken.
        expected_q: ``E_t = E_{a∼π} Q(s_t, a)``, the state's value under the target policy.
        log_rhos: ``log π(a_t|s_t) − log μ(a_t|s_t)``.
        bootstrap_value: ``E_π Q(s_T, ·)``, after the window, one per environment.
        next_expected_q: ``E_π Q(s_{t+1}, ·)`` for every step, instead of
            ``bootstrap_value``; required with ``truncated``, where it must be the
            expectation at the final observation.
        c_clip: ``c̄`` (1 in the paper).

    The trace coefficient linking ``t`` and ``t+1`` uses the ratio of the action at
    ``t+1``; at episode ends and at the window's edge nothing of the next step leaks
    in. The remaining arguments are those of :func:`rlscan.gae`; see docs/semantics.md.

    Returns:
        ``RetraceOutput(q_targets, advantages)``, each of ``rewards``' shape.
    """
    call = Call("rewards", rewards, time_dim, out_dtype)
    q_taken = call.series("q_taken", q_taken, required=True)
    expected_q = call.series("expected_q", expected_q, required=True)
    log_rhos = call.series("log_rhos", log_rhos, required=True)
    next_expected_q, bootstrap_value, terminated, truncated = call.episode_ends(
        "retrace", next_expected_q, bootstrap_value, terminated, truncated, required=True, value_name="expected_q")
    g = call.coef("gamma", gamma)
    lam = call.coef("lmbda", lmbda)
    c_clip = check_clip("c_clip", c_clip)
    tensors = (call.anchor, q_taken, expected_q, log_rhos, next_expected_q, bootstrap_value, terminated, truncated,
               g.tensor, lam.tensor)
    return RetraceOutput(*call.run(OP, tensors, (g.value, lam.value, g.value * lam.value, c_clip), exact=exact, out=out))


def _table_differentiable(call, r, q_values, probs, actions, mu, ne, boot, term, trunc, g_t, l_t, gamma, lmbda,
                          gamma_lmbda, c_clip):
    q_values, probs = (_forms.time_first(x, call) for x in (q_values, probs))
    r, actions, mu, ne, term, trunc = (_forms.time_first(x, call) for x in (r, actions, mu, ne, term, trunc))
    index = actions.long().unsqueeze(-1)
    q = q_values.gather(-1, index).squeeze(-1)
    e = (q_values * probs).sum(-1)
    rho = probs.gather(-1, index).squeeze(-1) / mu.exp()
    return retrace_form(call, r, q, e, rho, ne, boot, term, trunc, g_t, l_t, gamma, lmbda, c_clip)


def _table_backward(call, tensors, scalars, outs, grads, needs):
    """Retrace's fused backward on ``q_t``, ``E_t`` and ``log ρ_t`` recomputed from the table,
    then their gradients spread over the table::

        ∂L/∂Q[t, a] = π[t, a] ∂L/∂E_t + [a = a_t] ∂L/∂q_t
        ∂L/∂π[t, a] = Q[t, a] ∂L/∂E_t + [a = a_t] ∂L/∂log ρ_t / π[t, a_t]
        ∂L/∂log μ_t = −∂L/∂log ρ_t
    """
    r, q_values, probs, actions, mu, ne, boot, term, trunc, g_t, l_t = tensors
    need_r, need_qv, need_probs, _, need_mu, need_ne, need_boot, _, _, need_g, need_l = needs
    qv, pr = (x.to(call.compute_dtype) for x in (q_values, probs))
    index = actions.long().clamp(0, q_values.shape[-1] - 1).unsqueeze(-1)  # out of range: NaN outputs already
    q = qv.gather(-1, index).squeeze(-1)
    p_taken = pr.gather(-1, index).squeeze(-1)
    e = (qv * pr).sum(-1)
    log_rho = torch.log(p_taken) - mu.to(call.compute_dtype)
    step_needs = (need_r, need_qv, need_qv or need_probs, need_probs or need_mu, need_ne, need_boot, False, False,
                  need_g, need_l)
    g_r, g_q, g_e, g_rho, g_ne, g_boot, _, _, g_g, g_l = _backward(
        call, (r, q, e, log_rho, ne, boot, term, trunc, g_t, l_t), scalars, outs, grads, step_needs)
    g_qv = g_probs = g_mu = None
    if need_qv:
        g_qv = (g_e.unsqueeze(-1) * pr).scatter_add_(-1, index, g_q.unsqueeze(-1)).to(q_values.dtype)
    if need_probs:
        g_probs = (g_e.unsqueeze(-1) * qv).scatter_add_(-1, index, (g_rho / p_taken).unsqueeze(-1)).to(probs.dtype)
    if need_mu:
        g_mu = (-g_rho).to(mu.dtype)
    return g_r, g_qv, g_probs, None, g_mu, g_ne, g_boot, None, None, g_g, g_l


TABLE_OP = OpSpec(
    name="retrace_from_q",
    inputs=(("rewards", "series"), ("q_values", "table"), ("target_probs", "table"), ("actions", "index"),
            ("behaviour_log_probs", "series"), ("next_expected_q", "series"), ("bootstrap_value", "batch"),
            ("terminated", "flag"), ("truncated", "flag"), ("gamma", "coef"), ("lmbda", "coef")),
    n_out=2,
    kernel=Kernel(module="rlscan.ops.retrace.kernel", coeffs="table_coeffs", reverse=True,
                  prologue=Ref("rlscan.ops.retrace.table:plan")),
    cpu=Ref("rlscan.ops.retrace.cpu:run_table"),
    differentiable=_table_differentiable,
    backward=_table_backward,
)
register_fused(TABLE_OP, trusted_call)


@fast_path
def retrace_from_q(
    rewards,
    q_values,
    actions,
    target_probs,
    behaviour_log_probs,
    *,
    bootstrap_value=None,
    next_expected_q=None,
    terminated=None,
    truncated=None,
    gamma=0.99,
    lmbda=1.0,
    c_clip=1.0,
    time_dim=0,
    exact=False,
    out_dtype=None,
    out=None,
) -> RetraceOutput:
    """Retrace(λ) from the full action-value table. On the GPU a first kernel reads
    ``Q(s_t, ·)`` and ``π(·|s_t)`` once, in memory order, into three scratch series of
    ``rewards``' shape in the compute dtype, then the Retrace scan runs on them (with
    ``exact=True``, one fused kernel reduces over actions in blocks at each step)::

        q_t = Q[t, a_t],   E_t = Σ_a π[t, a] Q[t, a],   log ρ_t = log π[t, a_t] − log μ_t

    then exactly :func:`rlscan.retrace`.

    Args:
        q_values: ``Q(s_t, a)``, of ``rewards``' shape plus a last axis of ``A`` actions.
        actions: the actions taken, integer indices in ``[0, A)`` of ``rewards``' shape
            (checked on the CPU; on the GPU an index out of range yields NaN).
        target_probs: ``π(a|s_t)``, the target policy's probabilities, shaped like ``q_values``.
        behaviour_log_probs: ``log μ(a_t|s_t)`` of the actions taken.
        bootstrap_value: ``E_π Q(s_T, ·)``, one per environment; or ``next_expected_q``.

    The other arguments are those of :func:`rlscan.retrace`.
    """
    call = Call("rewards", rewards, time_dim, out_dtype)
    q_values = call.table("q_values", q_values)
    target_probs = call.table("target_probs", target_probs, like=q_values)
    actions = call.actions("actions", actions, q_values.shape[-1])
    behaviour_log_probs = call.series("behaviour_log_probs", behaviour_log_probs, required=True)
    next_expected_q, bootstrap_value, terminated, truncated = call.episode_ends(
        "retrace_from_q", next_expected_q, bootstrap_value, terminated, truncated, required=True,
        value_name="expected_q")
    g = call.coef("gamma", gamma)
    lam = call.coef("lmbda", lmbda)
    c_clip = check_clip("c_clip", c_clip)
    tensors = (call.anchor, q_values, target_probs, actions, behaviour_log_probs, next_expected_q, bootstrap_value,
               terminated, truncated, g.tensor, lam.tensor)
    return RetraceOutput(*call.run(TABLE_OP, tensors, (g.value, lam.value, g.value * lam.value, c_clip), exact=exact, out=out))


PUBLIC = PublicOp(
    name="retrace",
    function=retrace,
    reference=Ref("rlscan.ops.retrace.reference:retrace"),
    specs=(OP,),
    exports=(RetraceOutput,),
    arguments=Arguments(positional=("rewards", "q_taken", "expected_q", "log_rhos"), value_after="next_expected_q",
                        bootstrap="required", flags=("terminated", "truncated"), coefs=("gamma", "lmbda"),
                        clips=("c_clip",)),
    bench=Bench(series=("rewards", "q_taken", "expected_q", "log_rhos"), flags=("terminated",),
                batch=("bootstrap_value",), params=dict(gamma=0.99, lmbda=1.0, c_clip=1.0)),
)
PUBLIC_FROM_Q = PublicOp(
    name="retrace_from_q",
    function=retrace_from_q,
    reference=Ref("rlscan.ops.retrace.reference:retrace_from_q"),
    specs=(TABLE_OP,),
    arguments=Arguments(positional=("rewards", "q_values", "actions", "target_probs", "behaviour_log_probs"),
                        tables=("q_values", "target_probs"), actions="actions", value_after="next_expected_q",
                        bootstrap="required", flags=("terminated", "truncated"), coefs=("gamma", "lmbda"),
                        clips=("c_clip",)),
)
