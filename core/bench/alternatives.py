"""What each op is timed against: rlscan itself and the alternatives a user would pick.

An :class:`Impl` says where it runs and how it scales; ``build(case, dtype)`` returns a
:class:`Runner` whose ``prepare`` turns the benchmark's ``[T, N]`` inputs into what
the implementation keeps (outside the timed call) and whose ``run`` is the timed call.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch

from . import doubling, loops
from .cases import Case, outputs_of


class Runner(NamedTuple):
    prepare: Callable  # inputs -> state
    run: Callable  # state -> tuple of outputs


class Impl(NamedTuple):
    key: str
    label: str  # the table's column header
    about: str  # one line for the header and the JSON
    build: Callable  # (case, dtype) -> Runner
    cuda_only: bool = False
    ops: Optional[tuple] = None  # None: every op
    framework: Optional[str] = None  # "torchrl" or "sb3": needs that framework installed
    sequential: bool = False  # one step at a time: probe a prefix before a long call
    probe_T: int = 64
    on_host: bool = False  # runs on the CPU even in a GPU run (no device time)
    graph: bool = True  # a CUDA graph may capture it
    launches_per_step: bool = False  # a Python loop of kernel launches: its graph grows with T
    compiles: bool = False  # torch.compile: its first call on a new shape may compile (a budget applies)
    jit: bool = False  # its first call may compile (Triton, numba, torch.compile): never time a first call


def _identity(d):
    return d


def _rlscan(case: Case, dtype) -> Runner:
    import rlscan

    return Runner(_identity, lambda d: outputs_of(case.call(rlscan, d)))


def _exact(case: Case, dtype) -> Runner:
    import rlscan

    return Runner(_identity, lambda d: outputs_of(case.call(rlscan, d, exact=True)))


_COMPILED: dict = {}


def _compiled(case: Case, dtype) -> Runner:
    key = (case.name, dtype)
    if key not in _COMPILED:
        _allow_recompiles()
        _COMPILED[key] = torch.compile(doubling.casting(doubling.SCANS[case.name], dtype), dynamic=True)
    fn = _COMPILED[key]
    return Runner(_identity, lambda d: fn(d, case.params))


def _allow_recompiles() -> None:
    """Let dynamo compile each new length of time instead of falling back to eager code."""
    import torch._dynamo

    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 512))


_HALF = (torch.float16, torch.bfloat16)


def _loop_torch(case: Case, dtype) -> Runner:
    """The loop in the inputs' dtype; half-precision inputs are computed in float32 (as rlscan
    computes them) and the results cast back."""
    loop = loops.LOOPS[case.name]
    if dtype not in _HALF:
        return Runner(_identity, lambda d: loop(d, case.params, loops.TorchOps))

    def run(d):
        wide = {k: (x.float() if x.dtype == dtype else x) for k, x in d.items()}
        return tuple(o.to(dtype) for o in loop(wide, case.params, loops.TorchOps))

    return Runner(_identity, run)


def _to_numpy(d: dict) -> dict:
    """Host copies; half-precision inputs become float32 (numpy has no bfloat16)."""
    return {k: (x.detach().cpu().float() if x.dtype in _HALF else x.detach().cpu()).numpy() for k, x in d.items()}


def _loop_numpy(case: Case, dtype) -> Runner:
    loop = loops.LOOPS[case.name]
    return Runner(_to_numpy, lambda d: loop(d, case.params, loops.NumpyOps))


def _torchrl(vectorised: bool):
    def build(case: Case, dtype) -> Runner:
        from .baselines import TorchRLCredit

        est = TorchRLCredit(case.name, vectorised, case.params["gamma"], case.params["lmbda"])
        return Runner(lambda d: est.prepare(d["rewards"], d["values"], d["bootstrap_value"], d["terminated"]), est)

    return build


def _sb3(case: Case, dtype) -> Runner:
    from .baselines import SB3RolloutGAE

    est = SB3RolloutGAE(case.params["gamma"], case.params["lmbda"])
    return Runner(lambda d: est.prepare(d["rewards"], d["values"], d["bootstrap_value"], d["terminated"]), est)


def _whole_row(case: Case, dtype) -> Runner:
    """The seed's design (:mod:`.whole_row`) on ``[N, T]`` rows: inputs stored ``[T, N]`` are
    made time-contiguous in ``prepare``, outside the timed call."""
    from . import whole_row

    def prepare(d):
        rows = {k: (x.t().contiguous() if x.dim() == 2 else x) for k, x in d.items()}
        if rows["rewards"].dtype != torch.float32:
            raise ValueError("the whole-row stand-in computes float32 inputs only")
        return rows

    def run(d):
        outs = whole_row.run(case.name, d["rewards"], d["terminated"], d["bootstrap_value"], d.get("values"),
                             **case.params)
        return tuple(o.t() for o in outs)

    return Runner(prepare, run)


RLSCAN = Impl("rlscan", "rlscan", "rlscan (fused Triton scan on the GPU; compiled numba loop on the CPU)", _rlscan,
              jit=True)

ALTERNATIVES = (
    Impl("exact", "exact kernel", "rlscan exact=True: a sequential-in-time kernel, one thread per env "
         "(the PufferLib pattern)", _exact, cuda_only=True, sequential=True, probe_T=4096, jit=True),
    Impl("compile", "compile scan", "torch.compile of a log-depth doubling (Hillis-Steele) scan on the "
         "(alpha, beta) pairs", _compiled, cuda_only=True, compiles=True, jit=True),
    Impl("whole_row", "whole row", "the seed library's design as a plain Triton kernel: one program per "
         "[N, T] row, the row in registers, one associative scan, warps scaled with T (float32, T <= 65536)",
         _whole_row, cuda_only=True, ops=("gae", "discounted_returns"), jit=True),
    Impl("loop_torch", "loop (torch)", "Python loop over time with torch ops on the device (CleanRL/SB3 pattern; "
         "half-precision inputs computed in float32)",
         _loop_torch, sequential=True, launches_per_step=True),
    Impl("loop_numpy", "loop (numpy)", "Python loop over time with numpy on the CPU (SB3 pattern; half-precision "
         "inputs as float32 arrays)", _loop_numpy,
         sequential=True, on_host=True),
    Impl("torchrl_loop", "torchrl loop", "TorchRL functional estimator, loop over time "
         "(generalized_advantage_estimate / td_lambda_return_estimate)", _torchrl(False),
         ops=("gae", "td_lambda"), framework="torchrl", sequential=True, launches_per_step=True),
    Impl("torchrl_vec", "torchrl vec", "TorchRL functional estimator, vectorised "
         "(vec_generalized_advantage_estimate / vec_td_lambda_return_estimate)", _torchrl(True),
         ops=("gae", "td_lambda"), framework="torchrl", graph=False),
    Impl("sb3", "sb3 buffer", "Stable-Baselines3 RolloutBuffer.compute_returns_and_advantage (numpy loop, "
         "float32)", _sb3, ops=("gae",), framework="sb3", sequential=True, on_host=True),
)

BY_KEY = {i.key: i for i in (RLSCAN,) + ALTERNATIVES}


def applies(impl: Impl, op: str) -> bool:
    return impl.ops is None or op in impl.ops


def unavailable(impl: Impl, cuda: bool, dtype: torch.dtype) -> Optional[str]:
    """Why ``impl`` cannot run in this benchmark, or None."""
    if impl.cuda_only and not cuda:
        return "needs a CUDA GPU"
    if impl.framework is not None:
        from .baselines import available

        if not available(impl.framework):
            return f"{impl.framework} is not installed"
    if impl.key == "sb3" and dtype != torch.float32:
        return "SB3 buffers are float32"
    return None


def probe_inputs(case: Case, inputs: dict, T: int) -> dict:
    """The first ``T`` steps of every series and flag (batch inputs unchanged)."""
    timed = set(case.series) | set(case.flags)
    return {k: (x[:T] if k in timed else x) for k, x in inputs.items()}
