"""What an op is: its inputs, its outputs, its kernels and its reference forms.

An :class:`OpSpec` describes an op to every layer that runs one: the call machinery
(``_call``) checks arguments and picks a path, the CPU path (``_cpu``) runs ``cpu``, the
Triton path (``_triton.launch``) runs ``kernel``, autograd (``_autograd``) runs
``backward`` and the custom ops (``_library``) register it for ``torch.compile``. Those
layers import this module, not each other's.

A :class:`PublicOp` describes a function of the package (``rlscan.gae``, ...) to everything
that enumerates the ops: the package's namespace, ``rlscan.reference``, the benchmark, the
tests and the tools all read ``rlscan.ops.REGISTRY``, a tuple of them.

An op's modules are named, not imported: a :class:`Ref` (``"module:attribute"``) and a
:class:`Kernel` import theirs at their first use, so importing rlscan loads neither Triton
nor the compiled CPU loops. That first use must not be inside ``torch.compile``'s traced
region, where ``importlib`` cannot run (dynamo refuses it, and ``fullgraph=True`` fails
on a process's first compiled call): what runs there (``Masked.whiten``) is the function
itself, and what a Ref names runs only behind a custom op or outside ``torch.compile``.

The helpers at the end describe how an op's tensors meet a kernel, independent of any one
call: the strides each kind of input is read with, and the part of a tensor a launch plan's
cache is keyed on.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch


class Ref:
    """The object named ``target``, ``"package.module:attribute"``, imported at its first use.

    Called, it calls that object with ``kwargs`` bound: ``Ref("m:run", reverse=True)(*args)``
    is ``m.run(*args, reverse=True)``. :meth:`resolve` returns the object itself (the bound
    function where ``kwargs`` are given)."""

    __slots__ = ("target", "kwargs", "_value")

    def __init__(self, target: str, **kwargs):
        module, sep, attribute = target.partition(":")
        if not (sep and module and attribute):
            raise ValueError(f"a reference is 'package.module:attribute', got {target!r}")
        self.target, self.kwargs, self._value = target, kwargs, None

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    def resolve(self) -> Any:
        value = self._value
        if value is None:
            module, _, attribute = self.target.partition(":")
            value = operator.attrgetter(attribute)(importlib.import_module(module))
            if self.kwargs:
                value = functools.partial(value, **self.kwargs)
            self._value = value
        return value

    def __call__(self, *args):
        fn = self._value
        if fn is None:
            fn = self.resolve()
        return fn(*args)

    def __repr__(self) -> str:
        bound = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        return f"Ref({self.target!r}{bound})"


def resolved(x):
    """``x`` itself, or what it names where it is a :class:`Ref`."""
    return x.resolve() if isinstance(x, Ref) else x


@dataclass(frozen=True, kw_only=True, eq=False)
class Kernel:
    """An op's coefficients for the scan engine: the ``@triton.jit`` functions ``coeffs`` and
    ``emit`` of ``module`` (imported, with Triton, at the op's first launch plan), and whether
    the scan runs from the last step to the first (``reverse``). ``prologue`` is a launch's first
    kernel, where the op has one (Retrace's action table).

    Called, it returns what a launch plan takes: ``(coeffs, emit, reverse)``, and the
    prologue's function after them where there is one."""

    module: str
    coeffs: str = "coeffs"
    emit: str = "emit"
    reverse: bool
    prologue: Optional[Ref] = None

    def __call__(self) -> tuple:
        found = self.__dict__.get("_resolved")
        if found is None:
            module = importlib.import_module(self.module)
            found = (getattr(module, self.coeffs), getattr(module, self.emit), self.reverse)
            if self.prologue is not None:
                found += (self.prologue.resolve(),)
            object.__setattr__(self, "_resolved", found)
        return found


@dataclass(frozen=True, kw_only=True, eq=False)
class OpSpec:
    """What :meth:`rlscan._call.Call.run` needs to know about an op.

    ``inputs`` names the tensors in the order the kernel and the CPU loop take them,
    with their kind: ``"series"`` (the full shape), ``"batch"`` (one value per
    environment), ``"flag"`` or ``"coef"`` (the full shape, possibly broadcast),
    ``"index"`` (integer, the full shape) or ``"table"`` (the full shape plus a last
    axis of actions).
    """

    name: str
    inputs: tuple  # ((name, kind), ...)
    n_out: int
    kernel: Callable  # () -> (coeffs, emit, reverse[, prologue]): a Kernel, which imports Triton at its call
    cpu: Callable  # (layout, arrays, scalars, outs, dtype) -> None: a Ref to the op's compiled loop
    differentiable: Callable  # (call, *tensors, *scalars) -> tuple of outputs
    time_contiguous_of: int = 0  # which input decides the tile orientation
    init_of: Optional[int] = None  # which input, if any, is the carry into the first step
    compiled: Optional[Callable] = None  # (call, tensors, scalars, exact) -> outputs, inside torch.compile
    # (call, tensors, scalars, outs, grads, needs) -> gradients of the tensors: a fused backward
    # on the Triton path, used instead of differentiating ``differentiable``
    backward: Optional[Callable] = None
    # read on every launch plan and every split call: computed once
    kinds: tuple = field(init=False, repr=False)
    batch_mask: tuple = field(init=False, repr=False)  # per input: one value per environment (no time axis)

    def __post_init__(self):
        object.__setattr__(self, "kinds", tuple(kind for _, kind in self.inputs))
        object.__setattr__(self, "batch_mask", tuple(kind == "batch" for kind in self.kinds))


@dataclass(frozen=True, kw_only=True, eq=False)
class Masked:
    """A masked op taken from its mask (docs/semantics.md, "Skipped steps"): ``op`` on the
    next kept values ``W``, with plan variants that need no ``W``. The dispatcher
    (:func:`rlscan._dispatch.run_masked`) picks one of:

    * ``cpu``, on the CPU path, and ``triton``, on the Triton path outside ``exact``: one pass
      over the inputs, ``(call, tensors, scalars, whiten) -> outputs`` or ``None`` where it does
      not apply (the layout, the dtypes, a coefficient tensor); ``cpu`` checks the mask's 0/1
      values as it reads them (``check(call, mask)`` does elsewhere);
    * otherwise the two scans: ``first`` (the next kept values, on the inputs of its names)
      into ``op``'s input ``feeds``, then ``op``, whose first output ``whiten(x, mask)``
      standardises where asked. The two scans are the plan inside ``torch.compile``, so
      ``whiten`` and ``check`` are functions, never a :class:`Ref`, which would import there.

    The tensors come in ``op.inputs`` order, ``None`` at ``feeds``."""

    op: OpSpec
    first: OpSpec
    feeds: str
    mask: str
    cpu: Optional[Callable] = None
    triton: Optional[Callable] = None
    check: Callable
    whiten: Callable
    # read on every call: computed once
    feeds_of: int = field(init=False, repr=False)
    mask_of: int = field(init=False, repr=False)
    first_of: tuple = field(init=False, repr=False)  # where each of ``first``'s inputs is among ``op``'s

    def __post_init__(self):
        for name in ("check", "whiten"):
            if isinstance(getattr(self, name), Ref):
                raise TypeError(f"Masked.{name} runs inside torch.compile's traced region, where a Ref cannot import "
                                "its module: pass the function itself")
        names = [name for name, _ in self.op.inputs]
        object.__setattr__(self, "feeds_of", names.index(self.feeds))
        object.__setattr__(self, "mask_of", names.index(self.mask))
        object.__setattr__(self, "first_of", tuple(names.index(name) for name, _ in self.first.inputs))


@dataclass(frozen=True, kw_only=True, eq=False)
class Arguments:
    """What a public op takes, by role: the tests, the tools and the benchmark build every op's
    inputs from this, each with one builder, rather than from a list of ops of their own.

    ``positional`` are the arguments passed by position, in call order. Of them, ``tables``
    have a last axis of actions (``target_probs`` holds probabilities over it), ``actions``
    names the integer action index and ``multiplier`` the linear scan's ``β`` (a float or a
    tensor); the others are floating series of the anchor's shape (``log_rhos`` and
    ``behaviour_log_probs`` are drawn as log ratios). The keywords: ``value_after``, the value
    after each step (``next_values``), with ``bootstrap`` saying whether one of it and
    ``bootstrap_value`` is ``"required"``, ``"optional"`` or neither is taken (``"none"``);
    the episode-end ``flags``; the coefficients ``coefs`` (floats in [0, 1], or tensors that
    broadcast); the ``clips``; ``initial``, whether a carry per environment is taken.
    ``fixed`` are options that the op's name fixes, and each of ``variants`` a further name
    with its own (``linear_scan_reverse``: ``reverse=True``).
    """

    positional: tuple
    tables: tuple = ()
    actions: Optional[str] = None
    multiplier: Optional[str] = None
    value_after: Optional[str] = None
    bootstrap: str = "none"
    flags: tuple = ()
    coefs: tuple = ()
    clips: tuple = ()
    initial: bool = False
    fixed: dict = field(default_factory=dict)
    variants: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.bootstrap not in ("required", "optional", "none"):
            raise ValueError(f"bootstrap is 'required', 'optional' or 'none', got {self.bootstrap!r}")
        if (self.value_after is None) != (self.bootstrap == "none"):
            raise ValueError("an op with a value after each step says whether a bootstrap is required, and only then")

    @property
    def series(self) -> tuple:
        """The positional floating series, in call order."""
        others = set(self.tables) | {self.actions, self.multiplier}
        return tuple(name for name in self.positional if name not in others)


@dataclass(frozen=True, kw_only=True, eq=False)
class Bench:
    """The op as the benchmark times it (``rlscan.bench.cases``): ``series`` are float tensors
    ``[T, N]``, ``flags`` bool ``[T, N]`` and ``batch`` float ``[N]`` (the benchmark's setting:
    terminations only, and a bootstrap value after the window where the op takes one);
    ``params`` are its constants."""

    series: tuple
    flags: tuple = ()
    batch: tuple = ()
    params: dict = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, eq=False)
class PublicOp:
    """One function of the package (``rlscan.<name>``), for everything that enumerates the ops.

    ``function`` is the op (or a :class:`Ref` to it) and ``reference`` its float64 reference
    (``rlscan.reference.<name>``); ``specs`` are the :class:`OpSpec` it runs; ``exports``, the
    other public names of its module (its output type); ``arguments``, how to build its
    inputs; ``bench``, how the benchmark runs it (``None``: it is not benchmarked)."""

    name: str
    function: Any
    reference: Any
    specs: tuple
    arguments: Arguments
    bench: Optional[Bench] = None
    exports: tuple = ()

    @property
    def fn(self) -> Callable:
        return resolved(self.function)

    @property
    def ref(self) -> Callable:
        return resolved(self.reference)

    @property
    def fused_backward(self) -> bool:
        """Whether its backward is a fused scan of its own (not torch operations around
        ``rlscan::linear_scan``)."""
        return any(spec.backward is not None for spec in self.specs)

    def namespace(self) -> dict:
        """What the package exports for it: the function under its name, and ``exports``."""
        return {self.name: self.fn, **{x.__name__: x for x in self.exports}}


class Registry:
    """The ops, in order: a tuple of :class:`PublicOp` named by :class:`Ref` and resolved at the
    first use (each entry's op module imports the call machinery, which imports torch).

    Iterating gives the ops; ``registry[name]`` one of them. :meth:`adding` registers one more
    for the length of a ``with`` block (a test's op)."""

    def __init__(self, *targets: str):
        self._refs = [Ref(t) for t in targets]
        self._added: list = []

    def ops(self) -> tuple:
        return tuple(ref.resolve() for ref in self._refs) + tuple(self._added)

    def __iter__(self):
        return iter(self.ops())

    def __len__(self) -> int:
        return len(self._refs) + len(self._added)

    def names(self) -> tuple:
        return tuple(op.name for op in self)

    def __getitem__(self, name: str) -> PublicOp:
        for op in self:
            if op.name == name:
                return op
        raise KeyError(f"no op {name!r}; the registered ops are {', '.join(self.names())}")

    def __contains__(self, name) -> bool:
        return name in self.names()

    @contextlib.contextmanager
    def adding(self, op: PublicOp):
        if op.name in self:
            raise ValueError(f"an op named {op.name!r} is registered already")
        self._added.append(op)
        try:
            yield op
        finally:
            self._added.remove(op)


def triton_only(*args):
    """The ``differentiable`` of a fused backward, which has no torch form of its own: the call
    machinery gives its launch plans no CPU fallback."""
    raise RuntimeError("a fused backward has no torch form; where its kernel cannot run, the op's torch form is differentiated")


def grid_view(x: torch.Tensor, kind: str) -> torch.Tensor:
    """The part of ``x`` laid out on the ``[T, *B]`` grid: an action table's first column."""
    return x.select(-1, 0) if kind == "table" else x


def kernel_strides(layout, x: Optional[torch.Tensor], kind: str) -> tuple:
    """``(s_t, s_hi, s_lo)``; an action table adds ``(s_action, n_actions)``."""
    if kind == "batch":
        return tuple(layout.batch_strides(x))
    if kind == "table":
        return tuple(layout.strides(x.select(-1, 0))) + (x.stride(-1), x.shape[-1])
    return tuple(layout.strides(x))


def tensor_signature(x: Optional[torch.Tensor]):
    """What a cached launch plan depends on: everything Triton specialises a pointer and its
    strides on (shape, strides, dtype, 16-byte alignment)."""
    if x is None:
        return None
    return x.shape, x.stride(), x.dtype, x.data_ptr() % 16 == 0
