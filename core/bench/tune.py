"""``rlscan tune``: re-measure the launch settings table on this GPU and write it out.

For each shape class of the table, at the class's representative shape, for each op whose
call there matches the class:

1. the candidates: the class's settings that apply to the call, then the other settings
   listed anywhere in the table of the same kernel family (steps across a tile's threads, or
   held in each thread) that apply to it (no chained kind under deterministic algorithms);
2. each candidate runs forced (``forced_config``) and its result is checked against the
   float64 truth (:mod:`rlscan.bench.check`); a wrong or failing one is dropped;
3. each is timed by CUDA-graph device time (:func:`rlscan.bench.timing.device_time`).

The ops of a class are grouped by what the table's settings are conditioned on: the
direction of the scan and the kernel's weight (at most 5 series, or more). For each group,
the settings measured for every op of the group are ordered by the geometric mean, over
those ops, of ``time(setting) / time(shipped first choice)``, and written with a condition
that pins the group (``reverse`` and ``series``), so an op never inherits an order measured
on another op's kernel. Each records the reason "measured on <GPU> by rlscan tune" and
``ratio = time(shipped first) / time(setting)`` (above 1: faster than the shipped choice).
The shipped settings follow, in their shipped order, for every call the measured groups do
not cover (and for classes not reached within ``--budget-s``). The table is validated
before it is written. The table's policy choices are re-measured by
:mod:`rlscan.bench.tune_policy`.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from typing import Callable, Optional

from .._triton import settings

FIELDS = ("kind", "block_b", "num_warps", "block_t", "stripes", "steps", "stages", "unroll", "step_scan",
          "lookback", "link")
_DEFAULTS = settings.Config("scan", 1, 1)._asdict()


def _key(entry: dict) -> tuple:
    """What makes two table entries the same setting: their Config fields and chunk rule."""
    fields = tuple((f, entry.get(f, _DEFAULTS[f])) for f in FIELDS)
    return fields + (("chunks", entry["chunks"]), ("programs_per_sm", entry.get("programs_per_sm")),
                     ("max_chunks", entry.get("max_chunks")))


def _forced_fields(cfg: settings.Config) -> dict:
    """``forced_config`` arguments that reproduce the resolved setting ``cfg`` exactly."""
    return {f: getattr(cfg, f) for f in FIELDS + ("n_chunks",)}


def device_clock(fn: Callable, device) -> float:
    """Seconds per call on the device: CUDA-graph replay timed with CUDA events."""
    from .timing import device_time, synchronizer, timed_once

    _, one = timed_once(fn, synchronizer(device))
    return device_time(fn, one_call_s=one, target_s=0.02, repeat=5).seconds


def wall_clock(fn: Callable, device) -> float:
    """One synchronized call's wall clock (what the interpreter can offer; meaningless there)."""
    from .timing import synchronizer, timed_once

    return timed_once(fn, synchronizer(device))[1]


def _candidates(table: settings.Table, c: settings.ShapeClass, q: settings.Query) -> list:
    """``[(raw entry, resolved Config, shipped?)]`` for the call ``q`` of class ``c``."""
    index = table.classes.index(c)
    own = [(raw, s) for raw, s in zip(table.raw["classes"][index]["settings"], c.settings) if settings.applies(s, q)]
    families = {settings.FAMILIES[s.config.kind] for _, s in own}
    out, seen = [], set()
    for raw, s in own:
        cfg = settings.resolve(s, q)
        if cfg not in seen:
            seen.add(cfg)
            out.append((raw, cfg, True))
    for raw_class, other in zip(table.raw["classes"], table.classes):
        for raw, s in zip(raw_class["settings"], other.settings):
            if settings.FAMILIES[s.config.kind] not in families or not settings.applies(s, q):
                continue
            cfg = settings.resolve(s, q)
            if cfg not in seen:
                seen.add(cfg)
                out.append((raw, cfg, False))
    return out


def _run_checked(case, inputs, cfg, want, tolerance) -> tuple:
    """``(function that runs the call forced to cfg, None)`` or ``(None, why it is dropped)``."""
    import rlscan

    from .cases import outputs_of
    from .check import relative_error
    from .._triton.launch import CompileFallbackWarning, forced_config

    forced = _forced_fields(cfg)

    def call():
        with forced_config(**forced):
            return case.call(rlscan, inputs)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CompileFallbackWarning)
        try:
            with rlscan.use_backend("triton"):
                got = outputs_of(call())
        except Exception as exc:  # noqa: BLE001 - a setting that cannot run here is dropped, not fatal
            return None, f"failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
    if any(issubclass(w.category, CompileFallbackWarning) for w in caught):
        return None, "did not compile on this stack (the plan fell back)"
    err = relative_error(got, want)
    if not err <= tolerance:
        return None, f"wrong result (relative error {err:.2e} > {tolerance:.0e})"

    def timed():
        with rlscan.use_backend("triton"):
            call()

    return timed, None


def _class_inputs(c: settings.ShapeClass, op: str, device) -> tuple:
    """``(case, inputs)``: the bench case ``op`` at class ``c``'s shape, in float32 where the
    class computes in words, else float64."""
    import torch

    from .cases import CASES, make_inputs

    dtype = torch.float32 if c.when.get("words", True) else torch.float64
    case = CASES[op]
    return case, make_inputs(case, c.shape["T"], c.shape["N"], dtype, c.shape["layout"], device)


def _compile_class(raw: dict, index: int, op: str, n_sm: int) -> int:
    """In a worker process: run ``op`` at class ``index``'s shape once under each of its
    candidate settings, so that their kernels land in Triton's on-disk cache; how many ran."""
    import torch

    import rlscan

    from .explain import call_query
    from .._triton.launch import forced_config

    table = settings.validate(raw)
    c = table.classes[index]
    case, inputs = _class_inputs(c, op, torch.device("cuda"))
    deterministic = c.when.get("deterministic", False)
    torch.use_deterministic_algorithms(deterministic)
    q = settings.Query(**dict(call_query(case, inputs), n_sm=n_sm, deterministic=deterministic))
    if settings.match(q, table) is not c:
        return 0
    ran = 0
    for _, cfg, _ in _candidates(table, c, q):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with forced_config(**_forced_fields(cfg)), rlscan.use_backend("triton"):
                    case.call(rlscan, inputs)
                ran += 1
            except Exception:  # noqa: BLE001 - the timing pass reports a setting that fails
                pass
    torch.cuda.synchronize()
    return ran


def precompile(table: settings.Table, *, ops, classes, n_sm: int, jobs: int, progress: Callable = print) -> None:
    """Compile every candidate of ``classes`` for ``ops`` in ``jobs`` processes at once, before
    the timing pass: the kernels' compile (most of a tune's time) then runs in parallel, and
    the timing pass loads them from Triton's cache."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    start = time.monotonic()
    tasks = [(index, op) for index in classes for op in ops]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        counts = list(pool.map(_compile_class, *zip(*[(table.raw, i, op, n_sm) for i, op in tasks])))
    progress(f"compiled {sum(counts)} kernels' settings for {len(tasks)} (class, op) pairs in {jobs} processes "
             f"in {time.monotonic() - start:.0f} s")


def tune(table: settings.Table, *, ops, device, gpu: str, n_sm: int, budget_s: float = 600.0,
         clock: Optional[Callable] = None, progress: Callable = print, classes=None, jobs: int = 1) -> dict:
    """The re-measured table (parsed JSON, validated). ``ops``: bench op names; ``classes``:
    indices of the classes to tune (default all); ``clock(fn, device)``: seconds per call;
    ``jobs`` > 1: compile the candidates in that many processes first (:func:`precompile`)."""
    import torch

    from .check import TOLERANCE, truth
    from .explain import call_query

    clock = clock or (device_clock if device.type == "cuda" else wall_clock)
    raw = copy.deepcopy(table.raw)
    deadline = time.monotonic() + budget_s
    wanted = range(len(table.classes)) if classes is None else classes
    if jobs > 1 and device.type == "cuda":
        precompile(table, ops=ops, classes=list(wanted), n_sm=n_sm, jobs=jobs, progress=progress)
    tuned = 0
    for index in wanted:
        c = table.classes[index]
        N, T, layout = c.shape["N"], c.shape["T"], c.shape["layout"]
        deterministic = c.when.get("deterministic", False)
        dtype = torch.float32 if c.when.get("words", True) else torch.float64
        progress(f"class {index} (of {len(table.classes)}): {c.name}: {N} x {T} ({layout}, "
                 f"{str(dtype).replace('torch.', '')}{', deterministic' if deterministic else ''})")
        groups: dict = {}  # (reverse, series range) -> {op: {setting key: time / shipped first's time}}
        failed: set = set()  # keys of settings that failed or were wrong for some op
        entries: dict = {}  # setting key -> raw entry
        for op in ops:
            if time.monotonic() > deadline:
                progress("  budget spent: the remaining settings keep their shipped order")
                break
            case, inputs = _class_inputs(c, op, device)
            previous = torch.are_deterministic_algorithms_enabled()
            torch.use_deterministic_algorithms(deterministic)
            try:
                q = settings.Query(**dict(call_query(case, inputs), n_sm=n_sm, deterministic=deterministic))
                matched = settings.match(q, table)
                if matched is not c:
                    progress(f"  {op}: its call matches class {table.classes.index(matched)} ({matched.name}); skipped")
                    continue
                want, _ = truth(case, inputs, T, N)
                times = {}
                first = None
                for raw_entry, cfg, shipped in _candidates(table, c, q):
                    if time.monotonic() > deadline:
                        progress("  budget spent")
                        break
                    fn, why = _run_checked(case, inputs, cfg, want, TOLERANCE[dtype])
                    label = ("" if shipped else "alternative: ") + _describe(cfg)
                    if fn is None:
                        failed.add(_key(raw_entry))
                        progress(f"  {op}: {label}: dropped, {why}")
                        continue
                    seconds = clock(fn, device)
                    if first is None and shipped:
                        first = seconds
                    times[_key(raw_entry)] = seconds
                    entries[_key(raw_entry)] = raw_entry
                    progress(f"  {op}: {label}: {seconds * 1e6:.1f} us")
            finally:
                torch.use_deterministic_algorithms(previous)
            if first is None:
                continue
            group = groups.setdefault((q.reverse, LIGHT if q.series <= LIGHT[1] else HEAVY), {})
            group[op] = {key: seconds / first for key, seconds in times.items()}
        if not groups:
            continue
        raw["classes"][index]["settings"] = _reordered(raw["classes"][index]["settings"], groups, entries, failed,
                                                       gpu, N, T, layout)
        tuned += 1
    raw.update(gpu=gpu, n_sm=n_sm, source=f"rlscan tune on {gpu} ({n_sm} SMs), {tuned} of "
                                          f"{len(table.classes)} classes re-measured, {time.strftime('%Y-%m-%d')}")
    settings.validate(raw, "the tuned table")
    return raw


#: the kernels' weights the shipped table tells apart: at most 5 series, and more
LIGHT, HEAVY = (1, 5), (6, None)


def _reordered(shipped: list, groups: dict, entries: dict, failed: set, gpu: str, N: int, T: int,
               layout: str) -> list:
    """The class's settings: for each group of ops, the settings measured for all of them,
    by geometric-mean time ratio, pinned to the group; then the shipped settings in their
    shipped order (those that failed for some op dropped, unless that would leave no setting
    without conditions)."""
    shape = f"{N} x {T} ({'[T, N]' if layout == 'tn' else '[N, T]'})"
    out = []
    for (reverse, series), by_op in groups.items():
        common = set.intersection(*(set(r) for r in by_op.values()))
        score = {k: math.exp(sum(math.log(r[k]) for r in by_op.values()) / len(by_op)) for k in common}
        for key in sorted(score, key=score.get):
            entry = dict(entries[key])
            ratio = 1.0 / score[key]
            entry.update(when={**entry.get("when", {}), "reverse": reverse, "series": list(series)},
                         reason=f"measured on {gpu} by rlscan tune",
                         measured=f"{ratio:.2f}x the speed of the shipped first choice at {shape}, geometric "
                                  f"mean over {', '.join(by_op)}",
                         ratio=round(ratio, 4))
            out.append(entry)
    rest = [e for e in shipped if _key(e) not in failed]
    if not any(not e.get("when") for e in rest):
        rest.append(next(e for e in shipped if not e.get("when")))
    return out + rest


def _describe(cfg) -> str:
    from .explain import describe_setting

    return describe_setting(cfg)


def write(raw: dict, path) -> str:
    """Write the table ``raw`` to ``path`` (its folders made); the path written."""
    from pathlib import Path

    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(settings.dumps(raw))
    settings.clear_cache()
    return str(path)
