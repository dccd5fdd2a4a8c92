"""The plain loops over time that users write: the CleanRL / Stable-Baselines3 pattern.

Each function runs one op's recurrence one step at a time, vectorised over
environments, exactly as the equations in docs/semantics.md read for the benchmark's
setting (terminations only, a bootstrap value after the window). The same code runs
on numpy arrays (on the CPU) and on torch tensors (on any device): ``xp`` supplies the
few calls that differ. Flags are turned into floats first, as the frameworks store
them. Inputs are ``[T, N]``; the results are in the inputs' dtype.
"""
from __future__ import annotations

import numpy as np
import torch

from ..ops import REGISTRY


class NumpyOps:
    name = "numpy"
    exp = staticmethod(np.exp)
    empty_like = staticmethod(np.empty_like)

    @staticmethod
    def clip_max(x, c):
        return np.minimum(x, c)

    @staticmethod
    def as_float(flag, like):
        return flag.astype(like.dtype)


class TorchOps:
    name = "torch"
    exp = staticmethod(torch.exp)
    empty_like = staticmethod(torch.empty_like)

    @staticmethod
    def clip_max(x, c):
        return torch.clamp(x, max=c)

    @staticmethod
    def as_float(flag, like):
        return flag.to(like.dtype)


def gae(d, p, xp):
    """CleanRL's loop: ``δ_t = r_t + γ ν_t V'_t − V_t``, ``Â_t = δ_t + γλ ν_t Â_{t+1}``."""
    r, v, boot = d["rewards"], d["values"], d["bootstrap_value"]
    term = xp.as_float(d["terminated"], r)
    gamma, lmbda = p["gamma"], p["lmbda"]
    T = r.shape[0]
    adv = xp.empty_like(r)
    last = 0.0
    for t in reversed(range(T)):
        next_nonterminal = 1.0 - term[t]
        next_values = boot if t == T - 1 else v[t + 1]
        delta = r[t] + gamma * next_values * next_nonterminal - v[t]
        last = delta + gamma * lmbda * next_nonterminal * last
        adv[t] = last
    return adv, adv + v


def td_lambda(d, p, xp):
    """``G_t = r_t + γ ν_t [(1 − λ) V'_t + λ G_{t+1}]``; ``r_t + γ ν_t V'_t`` at the window's edge."""
    r, v, boot = d["rewards"], d["values"], d["bootstrap_value"]
    term = xp.as_float(d["terminated"], r)
    gamma, lmbda = p["gamma"], p["lmbda"]
    T = r.shape[0]
    out = xp.empty_like(r)
    g = None
    for t in reversed(range(T)):
        nonterminal = 1.0 - term[t]
        if t == T - 1:
            g = r[t] + gamma * nonterminal * boot
        else:
            g = r[t] + gamma * nonterminal * ((1.0 - lmbda) * v[t + 1] + lmbda * g)
        out[t] = g
    return (out,)


def discounted_returns(d, p, xp):
    """``G_t = r_t + γ ν_t G_{t+1}``, with ``G_T`` the bootstrap value."""
    r, boot = d["rewards"], d["bootstrap_value"]
    term = xp.as_float(d["terminated"], r)
    gamma = p["gamma"]
    T = r.shape[0]
    out = xp.empty_like(r)
    g = boot
    for t in reversed(range(T)):
        g = r[t] + gamma * (1.0 - term[t]) * g
        out[t] = g
    return (out,)


def vtrace(d, p, xp):
    """IMPALA's V-trace: clipped ratios first, then ``(v−V)_t = δ_t + γ c_t ν_t (v−V)_{t+1}``."""
    r, v, boot = d["rewards"], d["values"], d["bootstrap_value"]
    term = xp.as_float(d["terminated"], r)
    gamma = p["gamma"]
    rho = xp.exp(d["log_rhos"])
    rho_bar = xp.clip_max(rho, p["rho_clip"])
    c = p["lmbda"] * xp.clip_max(rho, p["c_clip"])
    rho_pg = xp.clip_max(rho, p["pg_rho_clip"])
    T = r.shape[0]
    vs, pg = xp.empty_like(r), xp.empty_like(r)
    acc = None
    for t in reversed(range(T)):
        nonterminal = 1.0 - term[t]
        if t == T - 1:
            next_value = next_target = boot
            acc = rho_bar[t] * (r[t] + gamma * nonterminal * next_value - v[t])
        else:
            next_value, next_target = v[t + 1], vs[t + 1]
            delta = rho_bar[t] * (r[t] + gamma * nonterminal * next_value - v[t])
            acc = delta + gamma * c[t] * nonterminal * acc
        vs[t] = v[t] + acc
        pg[t] = rho_pg[t] * (r[t] + gamma * nonterminal * next_target - v[t])
    return vs, pg


def retrace(d, p, xp):
    """``Q_t = r_t + γ ν_t E_{t+1} + γ λ ν_t c_{t+1} (Q_{t+1} − q_{t+1})``, ``E_T`` the bootstrap."""
    r, q, e, boot = d["rewards"], d["q_taken"], d["expected_q"], d["bootstrap_value"]
    term = xp.as_float(d["terminated"], r)
    gamma, lmbda = p["gamma"], p["lmbda"]
    c = xp.clip_max(xp.exp(d["log_rhos"]), p["c_clip"])
    T = r.shape[0]
    out = xp.empty_like(r)
    target = None
    for t in reversed(range(T)):
        nonterminal = 1.0 - term[t]
        if t == T - 1:
            target = r[t] + gamma * nonterminal * boot
        else:
            trace = gamma * lmbda * nonterminal * c[t + 1]
            target = r[t] + gamma * nonterminal * e[t + 1] + trace * (target - q[t + 1])
        out[t] = target
    return out, out - e


def eligibility_traces(d, p, xp):
    """``e_t = x_t + γλ (1 − dones_{t−1}) e_{t−1}``, ``e_{−1} = initial``."""
    x = d["x"]
    dones = xp.as_float(d["dones"], x)
    decay = p["gamma"] * p["lmbda"]
    out = xp.empty_like(x)
    e = x[0] + d["initial"]
    out[0] = e
    for t in range(1, x.shape[0]):
        e = x[t] + decay * (1.0 - dones[t - 1]) * e
        out[t] = e
    return (out,)


def episodic_cumsum(d, p, xp):
    """``S_t = x_t + (1 − dones_{t−1}) S_{t−1}``, ``S_{−1} = initial``."""
    x = d["x"]
    dones = xp.as_float(d["dones"], x)
    out = xp.empty_like(x)
    s = x[0] + d["initial"]
    out[0] = s
    for t in range(1, x.shape[0]):
        s = x[t] + (1.0 - dones[t - 1]) * s
        out[t] = s
    return (out,)


def linear_scan(d, p, xp):
    """``A_t = α_t + β_t A_{t+1}``, ``A_T = 0`` (the benchmark scans in reverse)."""
    alpha, beta = d["alpha"], d["beta"]
    out = xp.empty_like(alpha)
    T = alpha.shape[0]
    a = alpha[T - 1]
    out[T - 1] = a
    for t in reversed(range(T - 1)):
        a = alpha[t] + beta[t] * a
        out[t] = a
    return (out,)


# each registered op's loop: the function of its name above (an op without one has none)
LOOPS = {op.name: globals()[op.name] for op in REGISTRY if callable(globals().get(op.name))}
