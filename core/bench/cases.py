"""The benchmark's problem for each op: its inputs, its rlscan call, its reference.

Every op is timed in the common rollout setting: a window of ``T`` steps for ``N``
environments, episodes that end by termination with probability 1% per step (bool
flags), and a bootstrap value after the window where the op takes one. Tensors are
``[T, N]`` as the ops see them (``time_dim=0``); ``layout="nt"`` stores them
environment-major (contiguous along time) without changing that logical shape.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

DONE_RATE = 0.01


class Case(NamedTuple):
    """One op as the benchmark runs it.

    ``series`` are float tensors ``[T, N]``, ``flags`` bool ``[T, N]``, ``batch`` float
    ``[N]``; ``call(module, inputs, **extra)`` runs the op from ``rlscan`` or
    ``rlscan.reference`` (same signature) and ``params`` are its constants.
    """

    name: str
    series: tuple
    flags: tuple
    batch: tuple
    params: dict
    call: Callable


def _gae(m, d, **kw):
    return m.gae(d["rewards"], d["values"], bootstrap_value=d["bootstrap_value"], terminated=d["terminated"],
                 **GAE.params, **kw)


def _td_lambda(m, d, **kw):
    return m.td_lambda(d["rewards"], d["values"], bootstrap_value=d["bootstrap_value"],
                       terminated=d["terminated"], **TD_LAMBDA.params, **kw)


def _discounted(m, d, **kw):
    return m.discounted_returns(d["rewards"], bootstrap_value=d["bootstrap_value"], terminated=d["terminated"],
                                **DISCOUNTED.params, **kw)


def _vtrace(m, d, **kw):
    return m.vtrace(d["rewards"], d["values"], d["log_rhos"], bootstrap_value=d["bootstrap_value"],
                    terminated=d["terminated"], **VTRACE.params, **kw)


def _retrace(m, d, **kw):
    return m.retrace(d["rewards"], d["q_taken"], d["expected_q"], d["log_rhos"],
                     bootstrap_value=d["bootstrap_value"], terminated=d["terminated"], **RETRACE.params, **kw)


def _eligibility(m, d, **kw):
    return m.eligibility_traces(d["x"], dones=d["dones"], initial=d["initial"], **ELIGIBILITY.params, **kw)


def _episodic(m, d, **kw):
    return m.episodic_cumsum(d["x"], dones=d["dones"], initial=d["initial"], **kw)


def _linear(m, d, **kw):
    return m.linear_scan(d["alpha"], d["beta"], **LINEAR.params, **kw)


GAE = Case("gae", ("rewards", "values"), ("terminated",), ("bootstrap_value",), dict(gamma=0.99, lmbda=0.95), _gae)
TD_LAMBDA = Case("td_lambda", ("rewards", "values"), ("terminated",), ("bootstrap_value",),
                 dict(gamma=0.99, lmbda=0.95), _td_lambda)
DISCOUNTED = Case("discounted_returns", ("rewards",), ("terminated",), ("bootstrap_value",), dict(gamma=0.99),
                  _discounted)
VTRACE = Case("vtrace", ("rewards", "values", "log_rhos"), ("terminated",), ("bootstrap_value",),
              dict(gamma=0.99, lmbda=1.0, rho_clip=1.0, c_clip=1.0, pg_rho_clip=1.0), _vtrace)
RETRACE = Case("retrace", ("rewards", "q_taken", "expected_q", "log_rhos"), ("terminated",), ("bootstrap_value",),
               dict(gamma=0.99, lmbda=1.0, c_clip=1.0), _retrace)
ELIGIBILITY = Case("eligibility_traces", ("x",), ("dones",), ("initial",), dict(gamma=0.99, lmbda=0.95),
                   _eligibility)
EPISODIC = Case("episodic_cumsum", ("x",), ("dones",), ("initial",), {}, _episodic)
LINEAR = Case("linear_scan", ("alpha", "beta"), (), (), dict(reverse=True), _linear)

CASES = {c.name: c for c in (GAE, TD_LAMBDA, DISCOUNTED, VTRACE, RETRACE, ELIGIBILITY, EPISODIC, LINEAR)}


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
