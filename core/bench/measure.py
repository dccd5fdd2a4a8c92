"""One cell of the table: check an implementation against the truth, then time it.

The order is fixed: (1) a sequential implementation first runs on a prefix of the
window, and a call estimated to take longer than the cap is skipped with its
estimate; (2) one call is run and its result checked, so a wrong result is never
timed, and a first call over the cap is the measurement as it is; (3) one more call,
warm (the first may have compiled), unless the prefix run already warmed it up;
(4) a warm call that took ``long_call_s`` is itself the measurement (one call,
synchronized); otherwise rounds of back-to-back calls give the full-call time, and on
a GPU a CUDA graph gives the device time.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from . import timing
from .alternatives import Impl, probe_inputs
from .cases import Case
from .check import relative_error


class Settings(NamedTuple):
    device: torch.device
    dtype: torch.dtype
    repeat: int
    cap_s: float  # the longest single call an alternative may take
    long_call_s: float  # a checked call this long is itself the measurement
    target_s: float  # one timing round lasts about this long
    measure_budget_s: float  # the rounds of one implementation in one cell take about this long
    tolerance: float
    graph_max_T: int  # device time of Python loops of launches only up to this T
    compile_budget_s: float  # per op


class CompileLedger:
    """Seconds spent compiling, per op."""

    def __init__(self):
        self.spent: dict = {}

    def add(self, op: str, seconds: float) -> None:
        self.spent[op] = self.spent.get(op, 0.0) + seconds

    def of(self, op: str) -> float:
        return self.spent.get(op, 0.0)


def result(status: str, note: str = "", **numbers) -> dict:
    return dict(status=status, note=note, **numbers)


def measure(impl: Impl, case: Case, inputs: dict, truth: tuple, T: int, s: Settings, ledger: CompileLedger) -> dict:
    """Check and time ``impl`` on ``inputs``; never raises."""
    try:
        return _measure(impl, case, inputs, truth, T, s, ledger)
    except torch.cuda.OutOfMemoryError:
        _tidy(s.device)
        return result("failed", "out of memory")
    except Exception as ex:  # noqa: BLE001 - a failing alternative is reported, not fatal
        _tidy(s.device)
        return result("failed", f"{type(ex).__name__}: {str(ex).splitlines()[0][:200] if str(ex) else ''}")


def _measure(impl, case, inputs, truth, T, s: Settings, ledger: CompileLedger) -> dict:
    sync = timing.synchronizer(torch.device("cpu") if impl.on_host else s.device)
    runner = impl.build(case, s.dtype)
    probed = impl.sequential and T > impl.probe_T
    if probed:
        estimate = _estimate(runner, case, inputs, T, impl.probe_T, sync)
        if estimate > s.cap_s:
            return result("skipped", f"would take ~{_secs(estimate)} per call (cap {_secs(s.cap_s)})",
                          estimate_s=estimate)
    if impl.compiles and ledger.of(case.name) > s.compile_budget_s:
        return result("skipped", f"compile budget spent ({ledger.of(case.name):.0f} s for {case.name})")
    state = runner.prepare(inputs)
    call = lambda: runner.run(state)  # noqa: E731
    outs, first = timing.timed_once(call, sync)
    err = relative_error(outs, truth)
    del outs
    if not err <= s.tolerance:
        return result("wrong", f"relative error {err:.2e} > {s.tolerance:.0e}", rel_err=err)
    extra = {"first_call_s": first}
    if first > s.cap_s and not impl.jit:
        return result("ok", "one call, over the cap: not repeated", rel_err=err, full_us=first * 1e6, calls=1,
                      rounds=1, full_method="one synchronized call (the first)", device_us=None, **extra)
    if not probed:
        # The first call may have compiled (torch.compile, numba, Triton): size the timing on a warm one.
        _, first = timing.timed_once(call, sync)
        if impl.compiles:
            ledger.add(case.name, max(0.0, extra["first_call_s"] - first))
    return result("ok", rel_err=err, **_times(impl, call, first, T, sync, s), **extra)


def _times(impl: Impl, call, first: float, T: int, sync, s: Settings) -> dict:
    if first >= s.long_call_s:
        return dict(full_us=first * 1e6, calls=1, rounds=1, full_method="one synchronized call", device_us=None)
    rounds = min(s.repeat, max(1, int(s.measure_budget_s / max(first, s.target_s))))
    full = timing.full_call(call, sync, one_call_s=first, target_s=s.target_s, repeat=rounds)
    out = dict(full_us=full.seconds * 1e6, calls=full.calls, rounds=full.rounds, full_method=full.method,
               device_us=None)
    if s.device.type == "cuda" and not impl.on_host and (not impl.launches_per_step or T <= s.graph_max_T):
        dev = timing.device_time(call, one_call_s=full.seconds, target_s=s.target_s, repeat=rounds,
                                 graph=impl.graph)
        out.update(device_us=dev.seconds * 1e6, device_calls=dev.calls, device_method=dev.method)
    return out


def _estimate(runner, case: Case, inputs: dict, T: int, probe_T: int, sync) -> float:
    """Seconds per call at ``T`` steps, extrapolated from the faster of two calls on a prefix."""
    state = runner.prepare(probe_inputs(case, inputs, probe_T))
    best = math.inf
    for _ in range(2):
        _, seconds = timing.timed_once(lambda: runner.run(state), sync)
        best = min(best, seconds)
    return best * T / probe_T


def _secs(x: float) -> str:
    return f"{x:.0f} s" if x >= 10 else f"{x:.1f} s"


def _tidy(device: torch.device) -> None:
    if device.type == "cuda":
        timing._recover()
