"""Every public op called on inputs of one layout, shape, dtype and flag dtype.

The shared cases of the two GPU tools: ``tools/compile_for_gpu.py`` compiles the kernels these
calls launch, for GPUs it does not have; ``tools/gpu_check.py`` runs them on a GPU and checks
them against the float64 references. It is a module, not a command: nothing to run on its
own. A case is ``(op, layout, N, T)`` plus the dtypes:

* ``layout``: ``"TN"`` (``[T, N]``, SB3's rollout buffer), ``"NT"`` (``[N, T]``,
  ``time_dim=1``), ``"BT1"`` (TorchRL's ``[B, T, 1]``, ``time_dim=-2``), ``"strided"``
  (``[N, T]`` rows of a ``[N, T + 3]`` buffer: rows that are not 16-byte aligned) or
  ``"TN columns"`` (``[T, N]`` columns of a ``[T, N + 3]`` buffer: with one environment, a
  sequence that is not contiguous in time);
* ``dtype``: the floating inputs' dtype; ``flag``: ``"bool"``, ``"uint8"`` or ``"float"``
  (0/1 in ``dtype``).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from rlscan.ops import REGISTRY

LAYOUTS = ("TN", "NT", "BT1", "strided", "TN columns")
FLAGS = {"bool": torch.bool, "uint8": torch.uint8, "float": None}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}
ACTIONS = 3
#: how far from the clip point (log ratio 0) the random log importance ratios stay
CLIP_MARGIN = 0.05

# How the tools call an op beyond its registered arguments (rlscan.ops.REGISTRY): every op takes a
# bootstrap value and terminations, and its coefficients as floats, unless said here. Between
# them, the cases reach both forms of the value after each step and of the coefficients.
HOW = {
    "gae": dict(values="next"),
    "vtrace": dict(values="next"),
    "linear_scan": dict(fixed={"reverse": True}),  # the ops' scans run in reverse
}
# further calls of a registered op, under names of their own, placed after it
MORE = {
    "gae": {"gae coefs": dict(coefs="tensor")},  # per-step gamma and lambda tensors
    "linear_scan": {"linear_scan forward": dict(fixed={"reverse": False})},
}
# call name -> (registered op, how it is called)
FORMS = {name: form for op in REGISTRY
         for name, form in [(op.name, (op, HOW.get(op.name, {})))] + [(n, (op, h)) for n, h in MORE.get(op.name, {}).items()]}
OPS = tuple(FORMS)
# the ops whose backward is a fused kernel of its own
FUSED_BACKWARD = tuple(name for name, (op, _) in FORMS.items() if op.fused_backward)


class Case(NamedTuple):
    op: str
    fn: Callable  # the public function
    reference: Callable  # its float64 reference (rlscan.reference's)
    args: tuple
    kwargs: dict

    def __call__(self, **options):
        return self.fn(*self.args, **{**self.kwargs, **options})

    def differentiable(self) -> list:
        """The floating tensors among the arguments (what a backward differentiates)."""
        return [x for x in list(self.args) + list(self.kwargs.values())
                if isinstance(x, torch.Tensor) and x.is_floating_point()]


class _Maker:
    """Tensors of one layout: ``values`` (random, for checks) or uninitialised (for compiles)."""

    def __init__(self, layout, N, T, dtype, device, random, seed):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.layout, self.N, self.T, self.dtype, self.device, self.random = layout, N, T, dtype, device, random
        self.gen = torch.Generator().manual_seed(seed)
        self.time_dim = {"TN": 0, "NT": 1, "BT1": -2, "strided": 1, "TN columns": 0}[layout]

    def _full(self, extra=(), dtype=None):
        """An uninitialised tensor of the layout (plus trailing ``extra`` axes)."""
        N, T, dtype = self.N, self.T, dtype or self.dtype
        kw = dict(dtype=dtype, device=self.device)
        if self.layout == "TN":
            return torch.empty((T, N) + extra, **kw)
        if self.layout == "NT":
            return torch.empty((N, T) + extra, **kw)
        if self.layout == "BT1":
            return torch.empty((N, T, 1) + extra, **kw)
        if self.layout == "TN columns":
            return torch.empty((T, N + 3) + extra, **kw)[:, :N]
        return torch.empty((N, T + 3) + extra, **kw)[:, :T]

    def _fill(self, x, draw):
        if self.random:
            x.copy_(draw(x.shape).to(x.dtype))
        return x

    def series(self, low=None, high=None):
        if low is None:
            return self._fill(self._full(), lambda s: torch.randn(s, generator=self.gen))
        return self._fill(self._full(), lambda s: low + (high - low) * torch.rand(s, generator=self.gen))

    def log_ratio(self, bound=0.5, margin=CLIP_MARGIN):
        """A log importance ratio in ``[-bound, bound]`` at least ``margin`` from 0. The clipped
        ratio ``min(1, exp(x))`` has no derivative at 0, and within ~6e-8 of it float32 rounds
        ``exp(x)`` to 1 where float64 does not, so a float32 gradient and its float64 reference
        would take different sides of the clip there."""
        def draw(shape):
            u = (2 * torch.rand(shape, generator=self.gen) - 1) * (bound - margin)
            return u + margin * torch.where(u < 0, -1.0, 1.0)
        return self._fill(self._full(), draw)

    def batch(self):
        shape = (self.N, 1) if self.layout == "BT1" else (self.N,)
        x = torch.empty(shape, dtype=self.dtype, device=self.device)
        return self._fill(x, lambda s: torch.randn(s, generator=self.gen))

    def flag(self, kind, rate=0.05):
        dtype = FLAGS[kind] or self.dtype
        x = self._full(dtype=dtype)
        if self.random:
            x.copy_((torch.rand(x.shape, generator=self.gen) < rate).to(dtype))
        else:
            x.zero_()
        return x

    def coef(self):
        """A per-step coefficient in [0.8, 1] broadcast over environments (one value per step)."""
        shape = {"TN": (self.T, 1), "NT": (1, self.T), "BT1": (1, self.T, 1), "strided": (1, self.T),
                 "TN columns": (self.T, 1)}[self.layout]
        x = torch.empty(shape, dtype=self.dtype, device=self.device)
        if self.random:
            x.copy_(0.8 + 0.2 * torch.rand(shape, generator=self.gen))
        else:
            x.fill_(0.9)
        return x

    def table(self, probs=False):
        x = self._full((ACTIONS,))
        if self.random:
            draw = torch.randn(x.shape, generator=self.gen)
            x.copy_(torch.softmax(draw, -1) if probs else draw)
        return x

    def actions(self):
        x = self._full(dtype=torch.int64)
        if self.random:
            x.copy_(torch.randint(0, ACTIONS, x.shape, generator=self.gen))
        else:
            x.zero_()
        return x


def make_case(op: str, layout: str, N: int, T: int, dtype=torch.float32, flag: str = "bool", device="cpu",
              random: bool = True, seed: int = 0) -> Case:
    """The call of ``op`` (one of :data:`OPS`) on fresh inputs: random values when ``random``, else
    uninitialised floats (all that a compile needs, and no time spent filling them)."""
    if op not in FORMS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    entry, how = FORMS[op]
    a = entry.arguments
    m = _Maker(layout, N, T, dtype, device, random, seed)
    kw = {"time_dim": m.time_dim, **a.fixed, **how.get("fixed", {})}
    args, drawn = [], {}
    for name in a.positional:
        if name in a.tables:
            x = m.table(probs=name == "target_probs")
        elif name == a.actions:
            x = m.actions()
        elif name == a.multiplier:
            x = m.series(0.5, 1.0)
        elif name == "behaviour_log_probs":
            x = _behaviour_log_probs(m, drawn["target_probs"], drawn[a.actions])
        elif name == "log_rhos":
            x = m.log_ratio()
        else:
            x = m.series()
        args.append(x)
        drawn[name] = x
    if a.value_after is not None and how.get("values") == "next":
        kw.update({a.value_after: m.series(), "terminated": m.flag(flag), "truncated": m.flag(flag)})
    else:
        if a.value_after is not None:
            kw["bootstrap_value"] = m.batch()
        if a.flags:
            kw[a.flags[0]] = m.flag(flag)
    if how.get("coefs") == "tensor":
        kw.update({name: m.coef() for name in a.coefs})
    else:
        kw.update(zip(a.coefs, (0.9, 0.8)))
    if a.initial:
        kw["initial"] = m.batch()
    return Case(op, entry.fn, entry.ref, tuple(args), kw)


def _behaviour_log_probs(m: _Maker, pi, actions):
    """log μ = log π(a) − log ρ: behaviour probabilities whose ratio to π stays off the clip."""
    log_mu = m.log_ratio(0.75)
    if m.random:
        pi_a = pi.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        log_mu.copy_((pi_a.double().log() - log_mu.double()).to(log_mu.dtype))
    return log_mu


def backward(case: Case, weights=None):
    """The gradients of ``sum(w_i * out_i)`` with respect to every floating input (fresh
    leaves of the case's inputs), ``weights`` the ``w_i`` (ones when None): ``(leaves, grads)``."""
    leaves = {}

    def leaf(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            leaves[id(x)] = y = x.detach().clone().requires_grad_()
            return y
        return x

    args = tuple(leaf(x) for x in case.args)
    kwargs = {k: leaf(x) for k, x in case.kwargs.items()}
    outs = case.fn(*args, **kwargs)
    outs = tuple(outs) if isinstance(outs, tuple) else (outs,)
    inputs = list(leaves.values())
    weights = weights if weights is not None else [torch.ones_like(o) for o in outs]
    grads = torch.autograd.grad(outs, inputs, weights, allow_unused=True)
    return inputs, grads


def setting_name(cfg) -> str:
    """A launch setting (``rlscan._triton.launch.Config``), by what decides its compiled kernel
    (not its chunk count)."""
    from rlscan._triton.launch import CHAINED

    shape = f"t{cfg.block_t}" if cfg.kind in ("scan", "chained_scan") else f"{cfg.stripes}x{cfg.steps}"
    name = f"{cfg.kind} b{cfg.block_b} {shape} w{cfg.num_warps}"
    if cfg.kind in CHAINED:
        name += f" {cfg.link} lookback {cfg.lookback}"
    elif cfg.n_chunks > 1:
        name += " chunked"
    if cfg.step_scan != "registers" and cfg.kind in ("block", "chained"):
        name += f" {cfg.step_scan}"
    return name
