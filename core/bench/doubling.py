"""The vectorised alternative: each op's ``(α, β)`` pairs, then a log-depth doubling scan.

Hillis–Steele on the pairs: after the stage with shift ``s`` each position holds the
composition of the ``2s`` pairs ending at it,

    (α_t, β_t) ← (α_t + β_t · α_{t−s}, β_t · β_{t−s})        for t ≥ s,

so ``⌈log₂ T⌉`` stages of whole-tensor torch operations solve
``A_t = α_t + β_t A_{t−1}``; a reverse scan runs on the flipped pairs. Under
``torch.compile`` this was the baseline of earlier Triton work on these scans. It
computes in float32 for half-precision inputs, as rlscan does. Tensors are
``[T, N]``; the coefficient builders follow docs/semantics.md for the benchmark's
setting (terminations only, a bootstrap value after the window).
"""
from __future__ import annotations

import torch

from ..ops import REGISTRY


def doubling_scan(alpha: torch.Tensor, beta: torch.Tensor, reverse: bool) -> torch.Tensor:
    if reverse:
        alpha, beta = alpha.flip(0), beta.flip(0)
    T, shift = alpha.shape[0], 1
    while shift < T:
        alpha = torch.cat([alpha[:shift], alpha[shift:] + beta[shift:] * alpha[:-shift]])
        beta = torch.cat([beta[:shift], beta[shift:] * beta[:-shift]])
        shift *= 2
    return alpha.flip(0) if reverse else alpha


def _compute(x: torch.Tensor) -> torch.Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _masks(term: torch.Tensor, like: torch.Tensor):
    """``ν_t = 1 − term_t`` and ``κ_t`` (``ν_t``, and 0 at the window's edge)."""
    nu = 1.0 - term.to(like.dtype)
    kappa = torch.cat([nu[:-1], torch.zeros_like(nu[:1])])
    return nu, kappa


def _shift_ahead(x: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """``x_{t+1}``, with ``last`` after the final step."""
    return torch.cat([x[1:], last.unsqueeze(0).to(x.dtype)])


def gae(d, p):
    r, v = _compute(d["rewards"]), _compute(d["values"])
    nu, kappa = _masks(d["terminated"], r)
    delta = r + p["gamma"] * nu * _shift_ahead(v, d["bootstrap_value"]) - v
    adv = doubling_scan(delta, p["gamma"] * p["lmbda"] * kappa, reverse=True)
    return adv, adv + v


def td_lambda(d, p):
    r, v = _compute(d["rewards"]), _compute(d["values"])
    nu, kappa = _masks(d["terminated"], r)
    g, lam = p["gamma"], p["lmbda"]
    alpha = r + g * nu * (1.0 - lam * kappa) * _shift_ahead(v, d["bootstrap_value"])
    return (doubling_scan(alpha, g * lam * kappa, reverse=True),)


def discounted_returns(d, p):
    r = _compute(d["rewards"])
    nu, kappa = _masks(d["terminated"], r)
    edge = _shift_ahead(torch.zeros_like(r), d["bootstrap_value"])
    alpha = r + p["gamma"] * nu * (1.0 - kappa) * edge
    return (doubling_scan(alpha, p["gamma"] * kappa, reverse=True),)


def vtrace(d, p):
    r, v = _compute(d["rewards"]), _compute(d["values"])
    nu, kappa = _masks(d["terminated"], r)
    g = p["gamma"]
    rho = torch.exp(_compute(d["log_rhos"]))
    v_next = _shift_ahead(v, d["bootstrap_value"])
    delta = rho.clamp(max=p["rho_clip"]) * (r + g * nu * v_next - v)
    c = p["lmbda"] * rho.clamp(max=p["c_clip"])
    vs = v + doubling_scan(delta, g * c * kappa, reverse=True)
    # v̂_t = vs_{t+1} where the trace continues; elsewhere ν_t = 0 or t = T−1 (the bootstrap).
    target_next = _shift_ahead(vs, d["bootstrap_value"])
    pg = rho.clamp(max=p["pg_rho_clip"]) * (r + g * nu * target_next - v)
    return vs, pg


def retrace(d, p):
    r, q, e = _compute(d["rewards"]), _compute(d["q_taken"]), _compute(d["expected_q"])
    nu, kappa = _masks(d["terminated"], r)
    g, lam = p["gamma"], p["lmbda"]
    c = torch.exp(_compute(d["log_rhos"])).clamp(max=p["c_clip"])
    zero = torch.zeros_like(r[0])
    trace = g * lam * kappa * _shift_ahead(c, zero)
    alpha = r + g * nu * _shift_ahead(e, d["bootstrap_value"]) - trace * _shift_ahead(q, zero)
    target = doubling_scan(alpha, trace, reverse=True)
    return target, target - e


def _forward_decay(dones: torch.Tensor, decay: float, like: torch.Tensor) -> torch.Tensor:
    """``β_t = decay · (1 − dones_{t−1})``, ``β_0 = 1``."""
    keep = decay * (1.0 - dones[:-1].to(like.dtype))
    return torch.cat([torch.ones_like(like[:1]), keep])


def _with_initial(x: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
    """``α_0 = x_0 + initial`` (the carry folded into the first step, where ``β_0 = 1``)."""
    return torch.cat([x[:1] + initial.unsqueeze(0).to(x.dtype), x[1:]])


def eligibility_traces(d, p):
    x = _compute(d["x"])
    beta = _forward_decay(d["dones"], p["gamma"] * p["lmbda"], x)
    return (doubling_scan(_with_initial(x, d["initial"]), beta, reverse=False),)


def episodic_cumsum(d, p):
    x = _compute(d["x"])
    beta = _forward_decay(d["dones"], 1.0, x)
    return (doubling_scan(_with_initial(x, d["initial"]), beta, reverse=False),)


def linear_scan(d, p):
    return (doubling_scan(_compute(d["alpha"]), _compute(d["beta"]), reverse=p["reverse"]),)


# each registered op's doubling form: the function of its name above (an op without one has none)
SCANS = {op.name: globals()[op.name] for op in REGISTRY if callable(globals().get(op.name))}


def casting(fn, dtype: torch.dtype):
    """``fn`` with its results cast back to the inputs' ``dtype``."""

    def run(d, p):
        return tuple(o.to(dtype) for o in fn(d, p))

    return run
