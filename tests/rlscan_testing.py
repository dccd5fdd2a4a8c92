"""Shared helpers for rlscan's unit tests: a random problem for every op, and the
comparison of an op's outputs with the float64 reference (``rlscan.reference``).

A *problem* is the positional and keyword arguments of one op call. The same arguments
go to the op and to its reference, so every test reads

    problem = make_problem("gae", (7, 3), terminated="middle")
    assert_matches_reference(problem)
"""
from __future__ import annotations

import collections
import functools
import pathlib
import re
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import numpy as np
import torch

from rlscan._backend import interpreting
from rlscan._spec import PublicOp
from rlscan.ops import REGISTRY

# ----------------------------------------------------------------------------- the paths


class Path(NamedTuple):
    """One of rlscan's paths: the backend's name and the device its tensors live on."""

    backend: str
    device: torch.device


def path_for(backend: str) -> Path:
    """The Triton path runs CUDA tensors, or CPU tensors through the interpreter."""
    if backend == "triton" and not interpreting():
        return Path(backend, torch.device("cuda"))
    return Path(backend, torch.device("cpu"))


# ----------------------------------------------------------------------------- the ops


@dataclass(frozen=True)
class OpInfo:
    """What an op takes (its registry entry's :class:`rlscan._spec.Arguments`), so that one
    builder can make a problem for each of them."""

    function: str  # the registered op's name
    series: tuple  # positional floating inputs, in call order
    next_name: Optional[str] = None  # the per-step "value after" argument, if any
    bootstrap: str = "none"  # "required", "optional" or "none"
    flags: tuple = ()  # ("terminated", "truncated") or ("dones",)
    coefs: tuple = ()  # per-step coefficients in [0, 1]
    clips: tuple = ()
    initial: bool = False
    fixed: dict = field(default_factory=dict)  # keyword arguments fixed by the op's name
    multiplier: Optional[str] = None  # the linear scan's β: a float or a tensor
    op: Optional[PublicOp] = field(default=None, compare=False, repr=False)

    @property
    def reverse_value_op(self) -> bool:
        return self.next_name is not None


def info_of(op: PublicOp, fixed: Optional[dict] = None) -> OpInfo:
    a = op.arguments
    return OpInfo(op.name, a.series, a.value_after, a.bootstrap, a.flags, a.coefs, a.clips, a.initial,
                  dict(a.fixed if fixed is None else fixed), a.multiplier, op)


def registered(tables: bool = False) -> dict:
    """Every registered op by name, and each of its variants (``linear_scan_reverse``). Without
    ``tables``, Retrace from the action tables is left out: :func:`make_problem`'s problems are
    series of one shape (tests/test_retrace_table.py has its own)."""
    found = {}
    for op in REGISTRY:
        if op.arguments.tables and not tables:
            continue
        found[op.name] = info_of(op)
        for variant, options in op.arguments.variants.items():
            found[variant] = info_of(op, {**op.arguments.fixed, **options})
    return found


OPS = registered()
OP_NAMES = tuple(OPS)
VALUE_OPS = tuple(name for name, info in OPS.items() if info.reverse_value_op)
FORWARD_OPS = tuple(name for name, info in OPS.items() if not info.reverse_value_op and name == info.function)


def op_info(name: str) -> OpInfo:
    """The op ``name`` of :data:`OPS`, or one registered since (a test's own op)."""
    return OPS[name] if name in OPS else info_of(REGISTRY[name])


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# Launch settings that reach every Triton kernel path with small shapes (``forced_config``).
KERNEL_CONFIGS = {
    "scan-tiles": dict(kind="scan", block_t=4, block_b=2),
    "scan-one-row": dict(kind="scan", block_t=1, block_b=2),
    "scan-one-tile": dict(kind="scan", block_t=16, block_b=2),  # every step in one tile: no loop
    "scan-chunks": dict(kind="scan", block_t=2, block_b=2, n_chunks=3),
    "stripe": dict(kind="stripe", stripes=2, steps=3, block_b=4),
    "stripe-one-step": dict(kind="stripe", stripes=1, steps=1, block_b=2),
    "stripe-chunks": dict(kind="stripe", stripes=1, steps=2, block_b=2, n_chunks=3),
    "stripe-window-chunks": dict(kind="stripe", stripes=2, steps=2, block_b=2, n_chunks=2),
    "block": dict(kind="block", stripes=2, steps=4, block_b=2),
    "block-chunks": dict(kind="block", stripes=2, steps=2, block_b=4, n_chunks=3),
    "block-shuffles": dict(kind="block", stripes=2, steps=4, block_b=2, step_scan="shuffles"),
    "chained": dict(kind="chained", stripes=2, steps=2, block_b=2),
    "chained-look-back": dict(kind="chained", stripes=1, steps=2, block_b=4, test_lookback=True),
    "chained-window": dict(kind="chained", stripes=1, steps=2, block_b=4, test_lookback=True, lookback=4),
    "chained-stripe": dict(kind="chained_stripe", stripes=2, steps=3, block_b=2),
    "chained-stripe-look-back": dict(kind="chained_stripe", stripes=1, steps=2, block_b=4, test_lookback=True,
                                     lookback=4),
    "chained-words": dict(kind="chained", stripes=2, steps=2, block_b=2, link="words"),
    "chained-words-look-back": dict(kind="chained", stripes=1, steps=2, block_b=4, test_lookback=True, lookback=4,
                                    link="words"),
    "chained-stripe-words": dict(kind="chained_stripe", stripes=1, steps=2, block_b=4, test_lookback=True, lookback=2,
                                 link="words"),
    "chained-scan": dict(kind="chained_scan", block_t=2, block_b=2, test_lookback=True, lookback=2),
    "chained-scan-words": dict(kind="chained_scan", block_t=2, block_b=2, test_lookback=True, lookback=8,
                               link="words"),
}

def dealt(ops, cases) -> list:
    """``(case, op)`` pairs: the ops dealt over the cases in turn, at least two a case, so that
    every op and every case run without the full product (an op's code is the same functions
    in every case, and a case's handling the same for every op)."""
    per = max(2, -(-len(ops) // len(cases)))
    return [(case, ops[(i * per + k) % len(ops)]) for i, case in enumerate(cases) for k in range(per)]


def dealt_over_kinds(ops, configs=None) -> list:
    """``(config, op)`` pairs of :data:`KERNEL_CONFIGS` in which every op meets every kernel
    kind and every config runs at least two ops: :func:`dealt` within each kind."""
    kinds: dict = {}
    for name in (configs or KERNEL_CONFIGS):
        kinds.setdefault(KERNEL_CONFIGS[name]["kind"], []).append(name)
    return [pair for names in kinds.values() for pair in dealt(ops, names)]


# ----------------------------------------------------------------------------- whole-call inputs

ACTIONS = 4


def call_inputs(T: int, N: int, device, dtype=torch.float64, seed: int = 0) -> dict:
    """One tensor of every kind a registered op's :class:`~rlscan._spec.Arguments` names, ``[T, N]``
    with time first: what :func:`call_of` picks an op's inputs from."""
    g = torch.Generator().manual_seed(seed)

    def s(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    flags = (torch.rand(T, N, generator=g) < 0.25).to(device)
    return dict(series=[s(T, N) for _ in range(4)], log_ratio=s(T, N) * 0.3, after=s(T, N), boot=s(N),
                terminated=flags, truncated=flags.roll(3, 0) & ~flags, multiplier=torch.rand(T, N, generator=g,
                dtype=dtype).to(device), table=s(T, N, ACTIONS), probs=torch.softmax(s(T, N, ACTIONS), -1),
                actions=torch.randint(0, ACTIONS, (T, N), generator=g).to(device))


LOG_RATIOS = ("log_rhos", "behaviour_log_probs")


def call_of(info: OpInfo, values: str = "bootstrap"):
    """``call(d, first)``: the op of ``info`` on the tensors of :func:`call_inputs` ``d``, its first
    positional input replaced by ``first`` (what a test differentiates). The value after each step
    comes from ``bootstrap_value`` or, with ``values="next"``, from the per-step values with
    truncations."""
    a = info.op.arguments

    def call(d, first):
        series = iter(d["series"])
        args = []
        for k, name in enumerate(a.positional):
            if k == 0:
                args.append(first)
            elif name in a.tables:
                args.append(d["probs"] if name == "target_probs" else d["table"])
            elif name == a.actions:
                args.append(d["actions"])
            elif name == a.multiplier:
                args.append(d["multiplier"])
            else:
                args.append(d["log_ratio"] if name in LOG_RATIOS else next(series))
        kw = dict(info.fixed)
        if a.value_after is not None and values == "next":
            kw.update({a.value_after: d["after"], "terminated": d["terminated"], "truncated": d["truncated"]})
        elif a.value_after is not None:
            kw.update(bootstrap_value=d["boot"], terminated=d["terminated"])
        elif a.flags:
            kw[a.flags[0]] = d["terminated"]
        kw.update(zip(a.coefs, (0.9, 0.8)))
        if a.initial:
            kw["initial"] = d["boot"]
        return info.op.fn(*args, **kw)

    return call


# ----------------------------------------------------------------------------- problems


@dataclass
class Problem:
    op: str
    args: tuple
    kwargs: dict

    @property
    def info(self) -> OpInfo:
        return op_info(self.op)

    def run(self, **options) -> tuple:
        """The op's outputs (a tuple, whatever the op returns)."""
        out = self.info.op.fn(*self.args, **self.kwargs, **self.info.fixed, **options)
        return tuple(out) if isinstance(out, tuple) else (out,)

    def reference(self) -> tuple:
        out = self.info.op.ref(*self.args, **self.kwargs, **self.info.fixed)
        return tuple(out) if isinstance(out, tuple) else (out,)

    def replace(self, **changes) -> "Problem":
        """The same problem with some arguments replaced (by name, positional ones included)."""
        names = self.info.series
        args = tuple(changes.pop(n, a) for n, a in zip(names, self.args))
        return Problem(self.op, args, {**self.kwargs, **changes})

    def arguments(self) -> dict:
        """Every argument by name."""
        return {**dict(zip(self.info.series, self.args)), **self.kwargs}


def flag_mask(pattern: Optional[str], shape_tf: tuple, gen: torch.Generator) -> Optional[torch.Tensor]:
    """A time-first boolean mask: where a flag is set, by pattern."""
    if pattern is None:
        return None
    T = shape_tf[0]
    mask = torch.zeros(shape_tf, dtype=torch.bool)
    if pattern == "random":
        mask = torch.rand(shape_tf, generator=gen) < 0.25
    elif pattern == "all":
        mask[:] = True
    elif pattern == "alternate":
        mask[::2] = True
    elif pattern == "first":
        mask[0] = True
    elif pattern == "middle":
        mask[T // 2] = True
    elif pattern == "last":
        mask[T - 1] = True
    elif pattern != "none":
        raise ValueError(f"unknown flag pattern {pattern!r}")
    return mask


def place(x: torch.Tensor, layout: str) -> torch.Tensor:
    """``x`` with the same values and shape in another memory layout."""
    if layout == "contiguous" or x.dim() == 0:
        return x.contiguous()
    if layout == "transposed":  # strides in the reverse order: a transposed view
        dims = tuple(reversed(range(x.dim())))
        return x.permute(dims).contiguous().permute(dims)
    if layout == "sliced":  # every other element of a larger buffer, at an offset
        fill = float("nan") if x.is_floating_point() else 1  # never read: poisoned if it were
        big = torch.full(tuple(2 * n + 1 for n in x.shape), fill, dtype=x.dtype, device=x.device)
        view = big[tuple(slice(1, 2 * n + 1, 2) for n in x.shape)]
        view.copy_(x)
        return view
    raise ValueError(f"unknown layout {layout!r}")


class _Maker:
    """Draws the tensors of one problem from one seeded generator."""

    def __init__(self, shape, time_dim, seed, layout, device):
        self.shape = tuple(shape)
        self.time_dim = time_dim % len(shape)
        self.T = self.shape[self.time_dim]
        self.batch = self.shape[: self.time_dim] + self.shape[self.time_dim + 1:]
        self.gen = torch.Generator().manual_seed(seed)
        self.layout = layout
        self.device = device

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return place(x.to(self.device), self.layout)

    def normal(self, dtype, scale=1.0, shape=None):
        x = scale * torch.randn(self.shape if shape is None else shape, generator=self.gen, dtype=torch.float64)
        return self.finish(x.to(dtype))

    def uniform(self, dtype, lo, hi, shape=None):
        x = lo + (hi - lo) * torch.rand(self.shape if shape is None else shape, generator=self.gen,
                                         dtype=torch.float64)
        return self.finish(x.to(dtype))

    def flags(self, pattern, dtype, expand: bool):
        """A flag tensor of the full shape; with ``expand``, one column broadcast over the batch."""
        batch = tuple(1 for _ in self.batch) if expand else self.batch
        mask = flag_mask(pattern, (self.T,) + batch, self.gen)
        if mask is None:
            return None
        mask = mask.movedim(0, self.time_dim).to(dtype)
        if expand:
            return mask.to(self.device).expand(self.shape)
        return self.finish(mask)

    def coef(self, spec, dtype):
        """``gamma``/``lmbda``: a float as given, or a tensor by kind."""
        if not isinstance(spec, str):
            return spec
        if spec == "tensor":  # one value per step and environment, with exact 0s and 1s
            x = torch.rand(self.shape, generator=self.gen, dtype=torch.float64)
            x = torch.where(x < 0.1, 0.0, torch.where(x > 0.9, 1.0, x))
            return self.finish(x.to(dtype))
        if spec == "per_step":  # one value per step, broadcast over the batch
            shape = tuple(self.T if d == self.time_dim else 1 for d in range(len(self.shape)))
            return torch.rand(shape, generator=self.gen, dtype=torch.float64).to(dtype).to(self.device)
        if spec == "scalar_tensor":
            return torch.tensor(0.93, dtype=dtype, device=self.device)
        raise ValueError(f"unknown coefficient kind {spec!r}")


def make_problem(
    op: str,
    shape=(7, 3),
    *,
    time_dim: int = 0,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    values: Optional[str] = None,
    terminated: Optional[str] = "random",
    truncated: Optional[str] = None,
    flag_dtype: torch.dtype = torch.bool,
    expand_flags: bool = False,
    gamma=0.9,
    lmbda=0.8,
    beta="tensor",
    clips=1.0,
    initial: bool = True,
    layout: str = "contiguous",
    device="cpu",
) -> Problem:
    """A random problem for ``op`` on a tensor of ``shape`` with time along ``time_dim``.

    ``values`` says where the value after each step comes from: ``"bootstrap"``
    (``bootstrap_value``, the default), ``"next"`` (``next_values``/``next_expected_q``)
    or ``"none"`` (discounted returns only). ``terminated``/``truncated`` are flag
    patterns (see :func:`flag_mask`); for the forward ops ``terminated`` gives
    ``dones``; ``truncated`` needs ``values="next"``. ``gamma``/``lmbda`` are floats
    or ``"tensor"``, ``"per_step"``, ``"scalar_tensor"``; ``beta`` (linear scan) is a
    float or ``"tensor"`` (uniform in [-1, 1]).
    """
    info = op_info(op)
    make = _Maker(shape, time_dim, seed, layout, device)
    args = tuple(_series(make, name, dtype) for name in info.series)
    kwargs = {"time_dim": time_dim}
    if info.reverse_value_op:
        kwargs.update(_value_after(make, info, values or "bootstrap", dtype))
    if info.flags:
        kwargs.update(_flags(make, info, terminated, truncated, flag_dtype, expand_flags))
    for name in info.coefs:
        kwargs[name] = make.coef(gamma if name == "gamma" else lmbda, dtype)
    for name in info.clips:
        kwargs[name] = clips[info.clips.index(name)] if isinstance(clips, tuple) else clips
    if info.multiplier is not None:
        kwargs[info.multiplier] = make.uniform(dtype, -1.0, 1.0) if beta == "tensor" else beta
    if info.initial and initial:
        kwargs["initial"] = make.normal(dtype, shape=make.batch)
    return Problem(op, args, kwargs)


def _series(make: _Maker, name: str, dtype):
    if name == "log_rhos":
        return make.normal(dtype, scale=0.5)
    return make.normal(dtype)


def _value_after(make: _Maker, info: OpInfo, values: str, dtype) -> dict:
    if values == "bootstrap":
        return {"bootstrap_value": make.normal(dtype, shape=make.batch)}
    if values == "next":
        return {info.next_name: make.normal(dtype)}
    if values == "none" and info.bootstrap == "optional":
        return {}
    raise ValueError(f"{info.function} cannot take values={values!r}")


def _flags(make: _Maker, info: OpInfo, terminated, truncated, flag_dtype, expand) -> dict:
    if info.flags == ("dones",):
        return {"dones": make.flags(terminated, flag_dtype, expand)}
    return {
        "terminated": make.flags(terminated, flag_dtype, expand),
        "truncated": make.flags(truncated, flag_dtype, expand),
    }


def to_numpy(problem: Problem) -> Problem:
    """The problem with every tensor argument as a numpy array."""
    conv = lambda x: x.numpy() if isinstance(x, torch.Tensor) else x  # noqa: E731
    return Problem(problem.op, tuple(conv(a) for a in problem.args),
                   {k: conv(v) for k, v in problem.kwargs.items()})


# ----------------------------------------------------------------------------- comparing

TOLERANCE = {  # (relative to each element, relative to the output's largest magnitude)
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (1e-2, 1e-2),
    torch.float32: (1e-5, 2e-5),
    torch.float64: (1e-12, 1e-12),
}


def as_f64(x) -> torch.Tensor:
    x = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
    return x.detach().cpu().to(torch.float64)


def assert_close(actual, expected, dtype: torch.dtype, what: str = "") -> None:
    """``actual`` (any dtype, tensor or array) agrees with the float64 ``expected`` to
    ``dtype``'s rounding: ``|a - e| <= rtol |e| + atol max(1, max|e|)``; NaNs must match,
    and so must infinities (also where ``expected`` overflows ``dtype``)."""
    actual, expected = as_f64(actual), as_f64(expected)
    if dtype in (torch.float16, torch.bfloat16):  # beyond the dtype's range the result is ±inf
        big = expected.abs() > torch.finfo(dtype).max
        expected = torch.where(big, expected.sign() * torch.inf, expected)
    rtol, atol = TOLERANCE[dtype]
    finite = expected[expected.isfinite()]
    scale = max(1.0, float(finite.abs().max())) if finite.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol * scale, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def result_dtype(problem: Problem) -> torch.dtype:
    """The dtype the op's result is rounded to: its floating inputs, promoted."""
    dtypes = [torch.from_numpy(a).dtype if isinstance(a, np.ndarray) else a.dtype for a in problem.args]
    for name in ("values", "next_values", "next_expected_q", "bootstrap_value", "initial"):
        x = problem.kwargs.get(name)
        if x is not None:
            dtypes.append(torch.from_numpy(x).dtype if isinstance(x, np.ndarray) else x.dtype)
    return functools.reduce(torch.promote_types, dtypes)


def assert_matches_reference(problem: Problem, dtype: Optional[torch.dtype] = None, **options) -> tuple:
    """Run ``problem`` and compare every output with the reference; returns the outputs."""
    outs = problem.run(**options)
    refs = problem.reference()
    assert len(outs) == len(refs)
    dtype = dtype or result_dtype(problem)
    for i, (out, ref) in enumerate(zip(outs, refs)):
        assert tuple(out.shape) == tuple(ref.shape), f"{problem.op} output {i}: shape {tuple(out.shape)}"
        assert_close(out, ref, dtype, f"{problem.op} output {i}")
    return outs


def bitwise_equal(a, b) -> bool:
    """Same bits, NaNs included."""
    a = torch.from_numpy(a) if isinstance(a, np.ndarray) else a
    b = torch.from_numpy(b) if isinstance(b, np.ndarray) else b
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)))


# ----------------------------------------------------------------------------- docs/errors.md

ERRORS_MD = pathlib.Path(__file__).resolve().parent.parent / "docs" / "errors.md"
KNOWN_GAPS = "Known gaps"


class ErrorRow(NamedTuple):
    """A row of docs/errors.md: a bad input, the argument it is given to, the error and a pattern
    of its message (``…`` stands for any text); the section's arguments (``None``: every one)."""

    id: str
    argument: str
    exception: str
    pattern: str
    known_gap: bool
    section_arguments: Optional[frozenset]

    def matches(self, message: str) -> bool:
        return re.search(".*?".join(map(re.escape, self.pattern.split("…"))), message, re.S) is not None

    def covers(self, argument: str) -> bool:
        """Whether the row is about ``argument`` (by name, or its section's)."""
        base = lambda name: name.split("[")[0]  # noqa: E731 - out[1] is out
        names = {base(self.argument)} | set(map(base, self.section_arguments or ()))
        return self.section_arguments is None or base(argument) in names


def read_errors(path=ERRORS_MD) -> list:
    """The rows of docs/errors.md's tables. A section's heading names its arguments in backticks;
    a heading that names none ("Every tensor or array argument") is about every argument."""
    rows, section, arguments = [], None, None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            named = frozenset(re.findall(r"`([^`]+)`", section))
            arguments = named or None
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 5, f"errors.md: a row needs 5 cells: {line}"
        case_id, _, argument, exception, pattern = (c.strip("`") for c in cells)
        rows.append(ErrorRow(case_id, argument, exception, pattern, section == KNOWN_GAPS, arguments))
    return rows


def documented(argument: str, exception: str, message: str) -> bool:
    """Whether docs/errors.md lists the error that ``argument`` got: a row about it, of that
    exception, whose pattern the message matches."""
    return any(row.exception == exception and row.covers(argument) and row.matches(message) and not row.known_gap
               for row in _error_rows())


@functools.lru_cache(maxsize=None)
def _error_rows() -> tuple:
    return tuple(read_errors())


# ----------------------------------------------------------------------------- fuzzing statistics

EXAMPLES: collections.Counter = collections.Counter()


def count_example(test: str) -> None:
    """Record one example run by a hypothesis test (summarised at the end of the session)."""
    EXAMPLES[test] += 1


def masked_whiten_reference(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """:func:`rlscan.masked_whiten` in float64, from its docstring: the mean and the
    Bessel-corrected variance over ``mask = 1``, applied everywhere."""
    x, keep = x.double(), (mask != 0).double()
    n = keep.sum()
    mean = (x * keep).sum() / n
    var = ((x - mean) ** 2 * keep).sum() / (n - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)
