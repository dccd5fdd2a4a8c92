"""The benchmark's problem for each op: its inputs, its rlscan call, its reference.

Every op is timed in the common rollout setting: a window of ``T`` steps for ``N``
environments, episodes that end by termination with probability 1% per step (bool
flags), and a bootstrap value after the window where the op takes one. Tensors are
``[T, N]`` as the ops see them (``time_dim=0``); ``layout="nt"`` stores them
environment-major (contiguous along time) without changing that logical shape.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..ops import REGISTRY
from .._spec import PublicOp

DONE_RATE = 0.01


class Case(NamedTuple):
    """One op as the benchmark runs it (its :class:`rlscan._spec.Bench`).

    ``series`` are float tensors ``[T, N]``, ``flags`` bool ``[T, N]``, ``batch`` float
    ``[N]``; ``call(module, inputs, **extra)`` runs the op from ``rlscan`` or
    ``rlscan.reference`` (same signature) and ``params`` are its constants.
    """

    name: str
    series: tuple
    flags: tuple
    batch: tuple
    params: dict
    op: PublicOp
    positional: tuple  # the inputs the op takes by position, in order
    keywords: tuple  # the others

    def call(self, module, d: dict, **kw):
        """The op of ``module`` (``rlscan`` or ``rlscan.reference``) on the inputs ``d``."""
        fn = self.op.fn if module.__name__ == "rlscan" else self.op.ref
        return fn(*[d[name] for name in self.positional], **{name: d[name] for name in self.keywords}, **self.params,
                  **kw)


def case_of(op: PublicOp) -> Case:
    """The benchmark's case of a registered op (``op.bench``)."""
    b = op.bench
    names = b.series + b.flags + b.batch
    positional = tuple(name for name in op.arguments.positional if name in names)
    keywords = tuple(name for name in names if name not in positional)
    return Case(op.name, b.series, b.flags, b.batch, b.params, op, positional, keywords)


CASES = {op.name: case_of(op) for op in REGISTRY if op.bench is not None}


def input_bytes(case: Case, T: int, N: int, dtype: torch.dtype) -> int:
    """Bytes of the op's inputs: float series and batch values in ``dtype``, flags 1 byte."""
    item = torch.empty((), dtype=dtype).element_size()
    return T * N * (len(case.series) * item + len(case.flags)) + N * len(case.batch) * item


def make_inputs(case: Case, T: int, N: int, dtype: torch.dtype, layout: str, device, seed: int = 0) -> dict:
    """Random inputs of logical shape ``[T, N]``; ``layout="nt"`` stores them ``[N, T]``-contiguous."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def stored(draw):
        x = draw((T, N)) if layout == "tn" else draw((N, T)).t()
        return x

    def normal(shape):
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32)

    def uniform(shape):
        return torch.rand(shape, generator=gen, device=device, dtype=torch.float32)

    inputs = {}
    for name in case.series:
        if name == "beta":
            x = stored(uniform)
        elif name == "log_rhos":
            x = stored(lambda s: 0.3 * normal(s))
        else:
            x = stored(normal)
        inputs[name] = x.to(dtype)
    for name in case.flags:
        inputs[name] = stored(lambda s: uniform(s) < DONE_RATE)
    for name in case.batch:
        inputs[name] = normal((N,)).to(dtype)
    return inputs


def outputs_of(result) -> tuple:
    """An op's result as a tuple of tensors (or arrays)."""
    return tuple(result) if isinstance(result, tuple) else (result,)


def moved_bytes(inputs: dict, n_outputs: int, T: int, N: int, dtype: torch.dtype) -> int:
    """The bytes an op must move: each input read once, each ``[T, N]`` output (in the
    inputs' dtype) written once."""
    item = torch.empty((), dtype=dtype).element_size()
    return sum(x.numel() * x.element_size() for x in inputs.values()) + n_outputs * T * N * item
