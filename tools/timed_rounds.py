"""Wall-clock times for the timing scripts: functions called in rounds that take turns, so
that the machine's other work (a shared machine's) moves each alike; compare ratios from one
run. :func:`rounds` gives each call's seconds, :func:`median_s` one function's median."""
from __future__ import annotations

import statistics
import time


def rounds(fns: dict, calls, warm=1, sync=None) -> dict:
    """``{name: [seconds of each timed call]}`` of ``fns`` (``{name: function}``): ``warm``
    untimed first calls of each (rlscan's first calls of a signature compile, and time the
    loops' serial and parallel versions), then rounds in which each function is called in
    turn, until it has ``calls`` timed calls.

    Args:
        calls, warm: an int for every function, or ``{name: int}``.
        sync: called after each call, inside its time (``torch.cuda.synchronize``).
    """
    calls = calls if isinstance(calls, dict) else dict.fromkeys(fns, calls)
    warm = warm if isinstance(warm, dict) else dict.fromkeys(fns, warm)
    for name, fn in fns.items():
        for _ in range(warm[name]):
            fn()
    if sync is not None:
        sync()
    times = {name: [] for name in fns}
    for i in range(max(calls.values(), default=0)):
        for name, fn in fns.items():
            if i < calls[name]:
                start = time.perf_counter()
                fn()
                if sync is not None:
                    sync()
                times[name].append(time.perf_counter() - start)
    return times


def median_s(fn, calls: int) -> float:
    """The median seconds of ``calls`` calls of ``fn``, one after the other."""
    return statistics.median(rounds({"fn": fn}, calls, warm=0)["fn"])
