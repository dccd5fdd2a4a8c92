"""rl-triton v0.1.3, the seed's library, beside rlscan: each of its ops on inputs in its own
form, the same problem as rlscan's call, and the check that both compute it.

rl-triton (MIT, ``import rl_triton``) is a yardstick to measure against, never code to copy.
Its public ops take ``[N, T]`` float32 tensors with float 0/1 flags and run on CUDA only. Each
entry of :data:`OPS` holds

* ``build``: the inputs in rl-triton's form (its argument names), float32, terminations at 1%
  of steps as float flags, γ 0.99, λ 0.95, clips 1; with ``truncations``, time-limit
  truncations at 1% of the other steps and the values rl-triton takes for them;
* ``seed``: rl-triton's functions for the op (two where it has a fused form of its own:
  ``compute_vtrace_fused``, ``compute_retrace_fused``);
* ``mapped``: rlscan's call with the same semantics, built from those same arguments. Where
  the mapping needs arithmetic (V-trace's log-ratio, Retrace's expectation over the action
  table, the values after truncated steps), it runs inside the call, as a user holding
  rl-triton's inputs would run it; ``own`` is then rlscan's call on its own form of the same
  problem, prepared beforehand;
* ``compared``: which outputs mean the same in both (rlscan's GAE also returns the value
  targets; Retrace's advantages are defined differently, below).

The mapping, argument by argument (rl-triton's → rlscan's, ``time_dim=1``):

* ``compute_gae(rewards, values, terminateds, gamma, lambda_, last_value)`` →
  ``gae(rewards, values, bootstrap_value=last_value, terminated=terminateds, gamma, lmbda=lambda_)``,
  output 0 (advantages) of both. rl-triton without ``truncateds`` gates the trace and the
  bootstrap on ``terminateds`` alone, as rlscan does without ``truncated``. With
  ``truncateds`` and ``bootstrap_values`` (``[N, T]``, the true next value at truncated steps
  and at ``T-1``, 0 elsewhere): ``next_values = shift(values) · (1 − truncateds) +
  bootstrap_values`` (``shift(values)[t] = values[t+1]``, 0 at ``T-1``), ``truncated=truncateds``.
* ``compute_vtrace(log_pi_target, log_pi_behavior, values, rewards, terminateds, gamma, rho_bar,
  c_bar, last_value)`` → ``vtrace(rewards, values, log_pi_target − log_pi_behavior,
  bootstrap_value=last_value, terminated=terminateds, gamma, lmbda=1, rho_clip=rho_bar,
  c_clip=c_bar, pg_rho_clip=rho_bar)``: rl-triton's trace is ``min(c_bar, ρ)`` with no λ and its
  advantage is clipped by ``rho_bar``; outputs (targets, advantages) of both. Truncations as GAE's.
* ``compute_retrace(action_probs_target π [N,T,A], action_probs_behavior μ_t, q_values q_t,
  next_q_values_all [N,T,A], actions, rewards, terminateds, truncateds, gamma, lambda_, c_bar)`` →
  ``retrace(rewards, q_t, 0, log π[t, a_t] − log μ_t, next_expected_q=Σ_a π[t, a] ·
  next_q_values_all[t, a], terminated=terminateds, gamma, lmbda=lambda_, c_clip=c_bar)``
  (``truncated=truncateds`` where there are truncations; rl-triton requires the tensor even when
  it is all zeros). Output 0 (the Q targets) of both. rl-triton weighs ``Q(s_{t+1}, ·)`` by the
  target probabilities of step ``t`` (the same tensor gives ``π(a_t|s_t)``), so its targets are
  Retrace's where the target policy does not change from one step to the next; its advantage
  ``ρ_t (r_t + γ Qret_{t+1} (1 − term_t) − q_t)`` (``Qret_T = 0``) is not rlscan's
  ``Qret_t − E_π Q(s_t, ·)``, and needs ``E_π Q(s_t, ·)``, which its inputs do not hold (passed
  as 0; not compared). ``own``: ``retrace_from_q`` on the action-value table of the same
  steps, built so that the two agree (the target policy constant along each row).
* ``compute_discounted_returns(rewards, terminateds, gamma, bootstrap_values)`` →
  ``discounted_returns(rewards, bootstrap_value=bootstrap_values[:, -1], terminated=terminateds,
  gamma)``: without truncations rl-triton reads only the last column (and copies it). Without
  ``bootstrap_values`` (``discounted_returns_mc``) both stop the return at the window's edge.
  With truncations: ``next_values=bootstrap_values, truncated=truncateds``.
* ``compute_lambda_returns(rewards, next_values, terminateds, gamma, lambda_, bootstrap_values)`` →
  ``td_lambda(rewards, None, next_values=next_values, terminated=terminateds, gamma, lmbda)``.
  rl-triton seeds its scan with ``bootstrap_values[:, -1]`` at weight ``γλ`` beside
  ``γ(1−λ) next_values[:, -1]``, so the usual λ-return passes ``bootstrap_values=next_values``.
  With truncations (rl-triton's ``next_values`` zeroed there by the caller, ``bootstrap_values``
  holding the true next value at truncated steps and ``next_values[:, -1]`` at ``T-1``):
  ``next_values = next_values + truncateds · bootstrap_values``, ``truncated=truncateds``.
* ``compute_eligibility_traces(gradients, dones, gamma, lambda_)`` → ``eligibility_traces(gradients,
  dones=dones, gamma, lmbda=lambda_)``. rl-triton's ``seed_values`` is the trace before it
  decays into step 0, rlscan's ``initial`` the trace after: ``initial = γλ · seed_values``.
* ``compute_episodic_prefix_sum(inputs, dones, seed_values)`` (``boundary="ends_at"``) →
  ``episodic_cumsum(inputs, dones=dones, initial=seed_values)``.

A ``[T, N]`` problem stores every tensor time-major and passes ``[N, T]`` views of it: rl-triton
copies them to ``[N, T]`` inside its call (``.contiguous()``), rlscan reads them in place.
``compute_retrace_fused`` takes no copy and so reads such views wrongly; the check says so.

On the CPU, ``TRITON_INTERPRET=1 python tools/seed_ops.py`` runs rl-triton's own public
functions through Triton's interpreter on small CPU tensors (they assert ``is_cuda``, which a
tensor subclass answers), rlscan's mapped call on both of its paths, and prints each one's
relative error against the float64 truth of the mapped call (``rlscan.reference``); it exits 1
on a disagreement. ``tools/seed_compare.py seed`` does the same on a GPU before timing.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable, NamedTuple, Optional

import torch

GAMMA, LMBDA, RHO_BAR, C_BAR, ACTIONS = 0.99, 0.95, 1.0, 1.0, 4
TOL = 1e-4  # relative error (norm) against the float64 truth that counts as the same result
INSTALL = ("pip install --no-deps /work/shared/rl-triton-0.1.3 here; on a device machine, copy it into the "
           "git-ignored .device/rl-triton, carry that path and python -m pip install --no-deps "
           "--no-build-isolation ./.device/rl-triton there (or put .device/rl-triton/src on PYTHONPATH)")


class SeedMissing(RuntimeError):
    """rl-triton is not installed."""


def seed_library():
    """rl-triton's module, or :class:`SeedMissing` naming it and how to install it."""
    try:
        import rl_triton
    except ImportError as exc:
        raise SeedMissing(f"rl-triton (the seed's library, import rl_triton) is not installed: {exc}. "
                          f"Install it: {INSTALL}") from exc
    return rl_triton


class Problem(NamedTuple):
    op: str
    N: int
    T: int
    layout: str  # "nt": [N, T] contiguous; "tn": [N, T] views of [T, N] storage
    truncations: bool
    seed_kwargs: dict  # rl-triton's arguments
    own: Optional[tuple]  # (rlscan function, args, kwargs): rlscan's own form, prepared (None: as mapped)


class SeedOp(NamedTuple):
    name: str  # rl-triton's function
    rlscan: str  # rlscan's op
    seed: Callable  # rl-triton's module -> {label: kwargs -> outputs}
    build: Callable  # (new, N, T, truncations) -> (seed kwargs, own or None)
    mapped: Callable  # seed kwargs -> (rlscan function name, args, kwargs)
    compared: tuple  # ((rl-triton output index, rlscan output index), ...)
    prep: bool  # whether mapped() runs arithmetic (then own is timed too)


# ----------------------------------------------------------------------------- inputs


class New:
    """Random tensors in ``[N, T, *rest]`` form, stored time-major for ``layout="tn"``."""

    def __init__(self, N, T, layout, device, seed, rate=0.01):
        self.N, self.T, self.layout, self.device, self.rate = N, T, layout, torch.device(device), rate
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def _draw(self, kind, rest=(), steps=None):
        steps = self.T if steps is None else steps
        stored = (steps, self.N, *rest) if self.layout == "tn" else (self.N, steps, *rest)
        if kind == "normal":
            x = torch.randn(stored, generator=self.gen, device=self.device)
        elif kind == "uniform":
            x = torch.rand(stored, generator=self.gen, device=self.device)
        else:
            x = torch.randint(0, ACTIONS, stored, generator=self.gen, device=self.device)
        return x.transpose(0, 1) if self.layout == "tn" else x

    def normal(self, rest=(), steps=None):
        return self._draw("normal", rest, steps)

    def uniform(self):
        return self._draw("uniform")

    def actions(self):
        return self._draw("actions")

    def batch(self):
        return torch.randn(self.N, generator=self.gen, device=self.device)

    def like(self, x):
        """A tensor of ``x``'s values stored like the other inputs."""
        out = self.normal(tuple(x.shape[2:]), x.shape[1])
        return out.copy_(x)

    def flags(self, truncations):
        """``(terminateds, truncateds or None)``: float 0/1, each at ``rate`` of the steps, never both."""
        u = self.uniform()
        term = (u < self.rate).float()
        trunc = ((u >= self.rate) & (u < 2 * self.rate)).float() if truncations else None
        return term, trunc


def _shift(x):
    """``x[:, t+1]`` at ``t``, 0 at ``T-1``."""
    return torch.nn.functional.pad(x[:, 1:], (0, 1))


def _next_values(values, trunc, boot2d):
    """The value after each step from rl-triton's truncation inputs: ``values[t+1]``, or
    ``bootstrap_values[t]`` at truncated steps and at ``T-1``."""
    return _shift(values) * (1 - trunc) + boot2d


def _bootstrap_2d(new, trunc, last):
    """rl-triton's ``bootstrap_values``: the true next value at truncated steps, ``last`` at
    ``T-1``, 0 elsewhere."""
    boot = new.normal() * trunc
    boot[:, -1] = torch.where(trunc[:, -1] > 0, boot[:, -1], last)
    return boot


# ----------------------------------------------------------------------------- the ops


def _build_gae(new, N, T, truncations):
    r, v = new.normal(), new.normal()
    term, trunc = new.flags(truncations)
    kw = dict(rewards=r, values=v, terminateds=term, gamma=GAMMA, lambda_=LMBDA)
    if truncations:
        kw.update(truncateds=trunc, bootstrap_values=_bootstrap_2d(new, trunc, new.batch()))
    else:
        kw.update(last_value=new.batch())
    return kw, None


def _map_gae(kw):
    out = dict(terminated=kw["terminateds"], gamma=kw["gamma"], lmbda=kw["lambda_"], time_dim=1)
    if "truncateds" in kw:
        out.update(next_values=_next_values(kw["values"], kw["truncateds"], kw["bootstrap_values"]),
                   truncated=kw["truncateds"])
    else:
        out.update(bootstrap_value=kw["last_value"])
    return "gae", (kw["rewards"], kw["values"]), out


def _build_vtrace(new, N, T, truncations):
    kw, _ = _build_gae(new, N, T, truncations)
    del kw["lambda_"]
    lt = new.normal()
    kw.update(log_pi_target=lt, log_pi_behavior=lt - 0.3 * new.normal(), rho_bar=RHO_BAR, c_bar=C_BAR)
    return kw, None


def _map_vtrace(kw):
    _, (r, v), out = _map_gae(dict(kw, lambda_=1.0))
    out.update(lmbda=1.0, rho_clip=kw["rho_bar"], c_clip=kw["c_bar"], pg_rho_clip=kw["rho_bar"])
    return "vtrace", (r, v, kw["log_pi_target"] - kw["log_pi_behavior"]), out


def _vtrace_seed(m):
    from rl_triton.ops.vtrace_fused import compute_vtrace_fused

    return {"compute_vtrace": lambda kw: m.compute_vtrace(**kw), "compute_vtrace_fused": lambda kw: compute_vtrace_fused(**kw)}


def _build_retrace(new, N, T, truncations, constant_policy=True):
    """The steps' action values ``Q(s_t, ·)`` for ``t = 0 … T`` (one table of ``T + 1`` steps),
    the target policy ``π`` (constant along each row unless ``constant_policy=False``), the
    actions and the behaviour probabilities of the actions taken; rl-triton gets ``q_t``,
    ``Q(s_{t+1}, ·)`` and ``π``, rlscan's own form the table of steps ``0 … T-1`` and the
    expectation after the last."""
    q_all = new.normal((ACTIONS,), T + 1)
    logits = new.normal((ACTIONS,))
    if constant_policy:
        logits = new.like(logits[:, :1].expand_as(logits))
    pi = torch.softmax(logits, -1)
    a = new.actions()
    pi_a = pi.gather(-1, a[..., None])[..., 0]
    mu = new.like((pi_a * torch.exp(0.3 * new.normal())).clamp(max=1.0))
    q_tab = new.like(q_all[:, :T])
    next_q = new.like(q_all[:, 1:])
    term, trunc = new.flags(truncations)
    kw = dict(action_probs_target=pi, action_probs_behavior=mu, q_values=new.like(q_tab.gather(-1, a[..., None])[..., 0]),
              next_q_values_all=next_q, actions=a, rewards=new.normal(), terminateds=term,
              truncateds=trunc if truncations else torch.zeros_like(term), gamma=GAMMA, lambda_=LMBDA, c_bar=C_BAR,
              rho_bar=RHO_BAR)
    own = None
    if constant_policy and not truncations:
        boot = (pi[:, -1] * q_all[:, T]).sum(-1)
        own = ("retrace_from_q", (kw["rewards"], q_tab, a, pi, torch.log(mu)),
               dict(bootstrap_value=boot, terminated=term, gamma=GAMMA, lmbda=LMBDA, c_clip=C_BAR, time_dim=1))
    return kw, own


def _map_retrace(kw, truncations=None):
    pi = kw["action_probs_target"]
    pi_a = pi.gather(-1, kw["actions"][..., None])[..., 0]
    log_rhos = torch.log(pi_a) - torch.log(kw["action_probs_behavior"])
    next_expected = (pi * kw["next_q_values_all"]).sum(-1)
    r = kw["rewards"]
    out = dict(next_expected_q=next_expected, terminated=kw["terminateds"], gamma=kw["gamma"], lmbda=kw["lambda_"],
               c_clip=kw["c_bar"], time_dim=1)
    if kw.get("_truncations"):
        out["truncated"] = kw["truncateds"]
    return "retrace", (r, kw["q_values"], kw["_zero"].expand(r.shape), log_rhos), out


def _retrace_seed(m):
    from rl_triton.ops.retrace_fused import compute_retrace_fused

    def fused(kw):
        kw = {("terminated" if k == "terminateds" else k): v for k, v in kw.items()}
        return compute_retrace_fused(**kw)

    return {"compute_retrace": lambda kw: m.compute_retrace(**kw), "compute_retrace_fused": fused}


def _build_discounted(new, N, T, truncations, bootstrap=True):
    r = new.normal()
    term, trunc = new.flags(truncations)
    kw = dict(rewards=r, terminateds=term, gamma=GAMMA)
    if truncations:
        kw.update(truncateds=trunc, bootstrap_values=_bootstrap_2d(new, trunc, new.batch()))
    elif bootstrap:
        boot = torch.zeros_like(r)
        boot[:, -1] = new.batch()
        kw.update(bootstrap_values=boot)
    return kw, None


def _map_discounted(kw):
    out = dict(terminated=kw["terminateds"], gamma=kw["gamma"], time_dim=1)
    if "truncateds" in kw:
        out.update(next_values=kw["bootstrap_values"], truncated=kw["truncateds"])
    elif "bootstrap_values" in kw:
        out.update(bootstrap_value=kw["bootstrap_values"][:, -1])
    return "discounted_returns", (kw["rewards"],), out


def _build_lambda(new, N, T, truncations):
    r, nv = new.normal(), new.normal()
    term, trunc = new.flags(truncations)
    kw = dict(rewards=r, next_values=nv, terminateds=term, gamma=GAMMA, lambda_=LMBDA)
    if truncations:
        kw["next_values"] = nv * (1 - trunc)  # rl-triton: the caller zeroes next_values at truncated steps
        kw.update(truncateds=trunc, bootstrap_values=_bootstrap_2d(new, trunc, nv[:, -1]))
    else:
        kw.update(bootstrap_values=nv)
    return kw, None


def _map_lambda(kw):
    out = dict(terminated=kw["terminateds"], gamma=kw["gamma"], lmbda=kw["lambda_"], time_dim=1)
    if "truncateds" in kw:
        out.update(next_values=kw["next_values"] + kw["truncateds"] * kw["bootstrap_values"],
                   truncated=kw["truncateds"])
    else:
        out.update(next_values=kw["next_values"])
    return "td_lambda", (kw["rewards"], None), out


def _build_traces(new, N, T, truncations, with_seed=False):
    term, trunc = new.flags(truncations)
    dones = term if trunc is None else (term + trunc).clamp(max=1)
    kw = dict(gradients=new.normal(), dones=dones, gamma=GAMMA, lambda_=LMBDA)
    if with_seed:
        kw["seed_values"] = new.batch()
    return kw, None


def _map_traces(kw):
    out = dict(dones=kw["dones"], gamma=kw["gamma"], lmbda=kw["lambda_"], time_dim=1)
    if kw.get("seed_values") is not None:
        out["initial"] = kw["gamma"] * kw["lambda_"] * kw["seed_values"]
    return "eligibility_traces", (kw["gradients"],), out


def _build_prefix(new, N, T, truncations):
    term, trunc = new.flags(truncations)
    dones = term if trunc is None else (term + trunc).clamp(max=1)
    return dict(inputs=new.normal(), dones=dones, seed_values=new.batch()), None


def _map_prefix(kw):
    return "episodic_cumsum", (kw["inputs"],), dict(dones=kw["dones"], initial=kw["seed_values"], time_dim=1)


def _one(name):
    return lambda m: {name: lambda kw: getattr(m, name)(**kw)}


OPS = {
    "gae": SeedOp("compute_gae", "gae", _one("compute_gae"), _build_gae, _map_gae, ((0, 0),), False),
    "vtrace": SeedOp("compute_vtrace", "vtrace", _vtrace_seed, _build_vtrace, _map_vtrace, ((0, 0), (1, 1)), True),
    "retrace": SeedOp("compute_retrace", "retrace", _retrace_seed, _build_retrace, _map_retrace, ((0, 0),), True),
    "discounted_returns": SeedOp("compute_discounted_returns", "discounted_returns",
                                 _one("compute_discounted_returns"), _build_discounted, _map_discounted, ((0, 0),),
                                 False),
    "discounted_returns_mc": SeedOp("compute_discounted_returns", "discounted_returns",
                                    _one("compute_discounted_returns"),
                                    lambda new, N, T, tr: _build_discounted(new, N, T, tr, bootstrap=False),
                                    _map_discounted, ((0, 0),), False),
    "lambda_returns": SeedOp("compute_lambda_returns", "td_lambda", _one("compute_lambda_returns"), _build_lambda,
                             _map_lambda, ((0, 0),), False),
    "eligibility_traces": SeedOp("compute_eligibility_traces", "eligibility_traces",
                                 _one("compute_eligibility_traces"), _build_traces, _map_traces, ((0, 0),), False),
    "episodic_prefix_sum": SeedOp("compute_episodic_prefix_sum", "episodic_cumsum",
                                  _one("compute_episodic_prefix_sum"), _build_prefix, _map_prefix, ((0, 0),), False),
}
#: ops whose problem has a truncation form (rl-triton's truncateds)
TRUNCATING = ("gae", "vtrace", "retrace", "discounted_returns", "lambda_returns")


def problem(op, N, T, layout="nt", device="cuda", truncations=False, seed=0, rate=0.01, **build) -> Problem:
    """One problem of ``op`` (a key of :data:`OPS`) in rl-triton's form, flags at ``rate`` of
    the steps; ``build``: ``constant_policy`` (Retrace), ``with_seed`` (eligibility traces)."""
    if layout not in ("nt", "tn"):
        raise ValueError(f"layout must be 'nt' or 'tn', got {layout!r}")
    if truncations and op not in TRUNCATING:
        raise ValueError(f"{op} has no truncations in rl-triton (it takes one dones flag)")
    new = New(N, T, layout, device, seed, rate)
    kw, own = OPS[op].build(new, N, T, truncations, **build)
    if op == "retrace":  # marks for the mapping, left out of rl-triton's arguments
        kw.update(_truncations=truncations, _zero=torch.zeros((), device=new.device))
    return Problem(op, N, T, layout, truncations, kw, own)


def seed_kwargs(p: Problem) -> dict:
    """rl-triton's arguments (the problem's private marks left out)."""
    return {k: v for k, v in p.seed_kwargs.items() if not k.startswith("_")}


def seed_calls(p: Problem, module=None) -> dict:
    """``{rl-triton function: zero-argument call}`` for the problem."""
    m = module or seed_library()
    kw = seed_kwargs(p)
    return {label: (lambda f=f: _tuple(f(kw))) for label, f in OPS[p.op].seed(m).items()}


def rlscan_call(p: Problem, own=False):
    """rlscan's zero-argument call: the mapping from rl-triton's arguments run inside it, or
    (``own=True``) rlscan's own form prepared beforehand."""
    import rlscan

    if own:
        name, args, kwargs = own_form(p)
        return lambda: _tuple(getattr(rlscan, name)(*args, **kwargs))
    mapped = OPS[p.op].mapped

    def call():
        name, args, kwargs = mapped(p.seed_kwargs)
        return _tuple(getattr(rlscan, name)(*args, **kwargs))

    return call


def own_form(p: Problem) -> tuple:
    """``(rlscan function, args, kwargs)``: rlscan's own form of the problem, its arguments
    computed once."""
    return p.own if p.own is not None else OPS[p.op].mapped(p.seed_kwargs)


def has_own(p: Problem) -> bool:
    """Whether rlscan's own form differs from the mapped call (then both are timed)."""
    return p.own is not None or OPS[p.op].prep


def truth(p: Problem, reference_max=2_000_000) -> tuple:
    """The float64 truth of the mapped call: ``rlscan.reference`` on its arguments (CPU), or
    past ``reference_max`` elements, whose loops take seconds, rlscan's exact path in float64
    on the arguments' device (one step at a time, tested against the references)."""
    import rlscan
    from rlscan import reference

    name, args, kwargs = OPS[p.op].mapped(p.seed_kwargs)
    if p.N * p.T <= reference_max:
        wide = lambda x: x.detach().cpu().double() if isinstance(x, torch.Tensor) and x.is_floating_point() else (  # noqa
            x.detach().cpu() if isinstance(x, torch.Tensor) else x)
        return _tuple(getattr(reference, name)(*map(wide, args), **{k: wide(v) for k, v in kwargs.items()}))
    wide = lambda x: x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
    return _tuple(getattr(rlscan, name)(*map(wide, args), exact=True, **{k: wide(v) for k, v in kwargs.items()}))


def compared(p: Problem, side: str, out) -> tuple:
    """The outputs of ``side`` (``"rl-triton"``, or ``"rlscan"``, whose form the truth has)
    that mean the same in both libraries."""
    pairs = OPS[p.op].compared
    return tuple(out[i] for i, _ in pairs) if side == "rl-triton" else tuple(out[j] for _, j in pairs)


def rel_err(got, want) -> float:
    """The worst relative error (vector norm) of ``got`` against ``want``; inf where not finite."""
    worst = 0.0
    for g, w in zip(got, want):
        g = g.detach().to("cpu", torch.float64)
        w = w.detach().to("cpu", torch.float64)
        if g.shape != w.shape:
            return math.inf
        num = torch.linalg.vector_norm(g - w).item()
        den = torch.linalg.vector_norm(w).item()
        e = num / den if den > 0 else num
        worst = max(worst, e if math.isfinite(e) else math.inf)
    return worst


def _tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


# ----------------------------------------------------------------------------- on the CPU


class _OnCuda(torch.Tensor):
    """A CPU tensor that answers ``is_cuda``: rl-triton's public functions assert it, and
    Triton's interpreter runs their kernels on CPU memory."""

    @property
    def is_cuda(self):
        return True


def _as_cuda(kw):
    return {k: v.as_subclass(_OnCuda) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}


def check_on_cpu(op, N, T, layout="nt", truncations=False, rate=0.2, **build) -> dict:
    """rl-triton's functions (through Triton's interpreter) and rlscan's mapped call (on its
    ``triton`` and ``cpu`` paths; its own form too, where it differs) on one CPU problem with
    flags at ``rate`` of the steps: each one's relative error against the float64 truth of
    the mapped call, and rl-triton's against rlscan's (``between``)."""
    import warnings

    import rlscan

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("check_on_cpu runs rl-triton's kernels through Triton's interpreter: set "
                           "TRITON_INTERPRET=1 before triton is imported")
    p = problem(op, N, T, layout, device="cpu", truncations=truncations, rate=rate, **build)
    want = truth(p)
    with warnings.catch_warnings():  # the interpreter's numpy warns of log(0) and 0/0 in masked lanes
        warnings.simplefilter("ignore", RuntimeWarning)
        return _check(p, want, rlscan)


def _check(p, want, rlscan) -> dict:
    errors, seed_out = {}, None
    want = compared(p, "rlscan", want)
    for label, f in OPS[p.op].seed(seed_library()).items():
        try:
            out = tuple(x.as_subclass(torch.Tensor) for x in _tuple(f(_as_cuda(seed_kwargs(p)))))
        except Exception as exc:  # noqa: BLE001 - a call rl-triton refuses is a result of the check
            errors[label] = f"{type(exc).__name__}: {str(exc)[:120]}"
            continue
        errors[label] = rel_err(compared(p, "rl-triton", out), want)
        seed_out = compared(p, "rl-triton", out) if seed_out is None else seed_out
    for backend in ("triton", "cpu"):
        with rlscan.use_backend(backend):
            out = compared(p, "rlscan", rlscan_call(p)())
            if has_own(p):
                errors[f"rlscan own ({backend})"] = rel_err(compared(p, "rlscan", rlscan_call(p, own=True)()), want)
        errors[f"rlscan ({backend})"] = rel_err(out, want)
        if seed_out is not None and backend == "triton":
            errors["between"] = rel_err(seed_out, out)
    return dict(op=p.op, shape=f"{p.N}x{p.T}", layout=p.layout, truncations=p.truncations, errors=errors)


def expected_wrong(row) -> set:
    """The errors a right mapping still shows: ``compute_retrace_fused`` copies nothing, so
    it reads ``[T, N]`` views as if they were ``[N, T]``."""
    out = set()
    if row["op"] == "retrace" and row["layout"] == "tn":
        out.add("compute_retrace_fused")
    return out


def disagreements(row) -> list:
    """The labels of ``row`` (:func:`check_on_cpu`) whose error is not below :data:`TOL`, less
    :func:`expected_wrong`'s."""
    return [k for k, v in row["errors"].items()
            if not (isinstance(v, float) and v < TOL) and k not in expected_wrong(row)]


def cpu_cases(ops=tuple(OPS), shapes=((3, 9), (2, 17))) -> list:
    """``(op, N, T, layout, truncations, build)`` of the CPU check: every op in both layouts at
    the first shape, with and without truncations where rl-triton has them; at the others
    ``[N, T]`` only; Retrace with a target policy that changes along the row (the mapped call
    only), the eligibility traces with rl-triton's ``seed_values``."""
    out = []
    for i, (N, T) in enumerate(shapes):
        for op in ops:
            for layout in ("nt", "tn") if i == 0 else ("nt",):
                for truncations in (False, True) if op in TRUNCATING else (False,):
                    out.append((op, N, T, layout, truncations, {}))
            if op == "retrace":
                out += [(op, N, T, "nt", tr, dict(constant_policy=False)) for tr in (False, True)]
            if op == "eligibility_traces":
                out.append((op, N, T, "nt", False, dict(with_seed=True)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated among " + ", ".join(OPS))
    ap.add_argument("--shapes", default="3x9,2x17", help="comma-separated NxT (small: the interpreter is slow)")
    args = ap.parse_args(argv)
    try:
        seed_library()
    except SeedMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    shapes = tuple(tuple(int(x) for x in s.split("x")) for s in args.shapes.split(","))
    bad = 0
    for op, N, T, layout, truncations, build in cpu_cases(tuple(args.ops.split(",")), shapes):
        row = check_on_cpu(op, N, T, layout, truncations, **build)
        wrong = disagreements(row)
        bad += bool(wrong)
        extra = " ".join(f"{k}={v}" for k, v in build.items())
        print(f"{'ok  ' if not wrong else 'FAIL'} {op:22s} {row['shape']:>5s} {layout} "
              f"{'trunc' if truncations else '     '} {extra} " +
              ", ".join(f"{k} {v:.1e}" if isinstance(v, float) else f"{k}: {v}" for k, v in row["errors"].items()),
              flush=True)
    print(f"{bad} problems with a disagreement (compute_retrace_fused on [T, N] views is expected to be wrong: "
          "rl-triton's fused form copies nothing)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
