"""``rlscan.discounted_returns``: discounted sums of rewards, cut at episode ends."""
from __future__ import annotations

from ..._call import Call, OpSpec
from ..._library import register_fused
from .. import _forms
from ..linear_scan import linear_scan


def _kernel():
    from . import kernel

    return kernel.coeffs, kernel.emit, True


def _cpu(*args):
    from . import cpu

    cpu.run(*args)


def _differentiable(call, r, nv, boot, term, trunc, g_t, gamma):
    r, nv, term, trunc = (_forms.time_first(x, call) for x in (r, nv, term, trunc))
    g = _forms.coef(g_t, gamma, call)
    nu, kappa = _forms.masks(term, trunc, r)
    alpha = r + g * nu * (1 - kappa) * _forms.value_after(None, nv, _forms.upcast(boot, call), r)
    return (_forms.result(linear_scan(alpha, g * kappa, reverse=True), call),)


OP = OpSpec(
    name="discounted_returns",
    inputs=(("rewards", "series"), ("next_values", "series"), ("bootstrap_value", "batch"),
            ("terminated", "flag"), ("truncated", "flag"), ("gamma", "coef")),
    n_out=1,
    kernel=_kernel,
    cpu=_cpu,
    differentiable=_differentiable,
)
register_fused(OP)


def discounted_returns(
    rewards,
    *,
    bootstrap_value=None,
    next_values=None,
    terminated=None,
    truncated=None,
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
    """
    call = Call("rewards", rewards, time_dim, out_dtype)
    next_values, bootstrap_value, terminated, truncated = call.episode_ends(
        "discounted_returns", next_values, bootstrap_value, terminated, truncated, required=False)
    g = call.coef("gamma", gamma)
    tensors = (call.anchor, next_values, bootstrap_value, terminated, truncated, g.tensor)
    return call.run(OP, tensors, (g.value,), exact=exact, out=out)[0]
