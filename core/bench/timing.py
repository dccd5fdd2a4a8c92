"""Clocks: what a call costs the user, and what it costs the device.

* full call: the wall clock of ``n`` back-to-back calls with one synchronize after
  the last, divided by ``n`` (median of ``repeat`` rounds). This is what a training
  loop pays, host overhead included.
* device time: ``n`` calls captured in a CUDA graph, the replay timed with CUDA
  events, divided by ``n`` (median of rounds): the GPU's own time, without launch
  gaps. Where capture fails (a call that synchronizes, say) CUDA events around ``n``
  eager calls stand in, and the method says so.

Nothing here touches CUDA unless the device is a CUDA device.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, NamedTuple, Optional

import torch


class Timing(NamedTuple):
    seconds: float  # per call
    calls: int  # calls per round
    rounds: int
    method: str


def synchronizer(device: torch.device) -> Callable[[], None]:
    """A function that waits for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def timed_once(fn: Callable, sync: Callable) -> tuple:
    """``(result, seconds)`` of one call, synchronized."""
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return result, time.perf_counter() - start


def full_call(fn: Callable, sync: Callable, *, one_call_s: float, target_s: float, repeat: int,
              max_calls: int = 10_000) -> Timing:
    """Per-call wall clock of back-to-back calls; ``one_call_s`` (a prior timed call) sizes the rounds."""
    n = int(min(max_calls, max(1, round(target_s / max(one_call_s, 1e-7)))))
    per_call = []
    for _ in range(max(1, repeat)):
        sync()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        per_call.append((time.perf_counter() - start) / n)
    return Timing(statistics.median(per_call), n, len(per_call), "wall clock, back-to-back calls, one sync")


def device_time(fn: Callable, *, one_call_s: float, target_s: float, repeat: int, graph: bool = True,
                max_calls: int = 200) -> Optional[Timing]:
    """Per-call CUDA time: a CUDA graph of ``n`` calls replayed, else events around eager calls."""
    n = int(min(max_calls, max(1, round(target_s / max(one_call_s, 1e-7)))))
    if graph:
        try:
            return _graph_time(fn, n, repeat)
        except Exception:  # noqa: BLE001 - capture is not possible for every call; fall back to events
            _recover()
    return _event_time(fn, n, repeat)


def _graph_time(fn: Callable, n: int, repeat: int) -> Timing:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # a warm-up call on a side stream, as capture requires
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(max(1, repeat)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e-3 / n)
    del graph
    return Timing(statistics.median(per_call), n, len(per_call), "cuda-graph replay, cuda events")


def _event_time(fn: Callable, n: int, repeat: int) -> Timing:
    per_call = []
    for _ in range(max(1, repeat)):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e-3 / n)
    return Timing(statistics.median(per_call), n, len(per_call), "cuda events around eager calls")


def _recover() -> None:
    """Leave the CUDA state usable after a failed capture."""
    try:
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001
        pass
    torch.cuda.empty_cache()
