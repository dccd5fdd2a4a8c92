"""Every public op through the paths a call takes on the CPU (issue #40), not the ops' maths:

* input kinds: numpy arrays and torch tensors, contiguous, sliced, transposed, with flags and
  per-environment values broadcast (stride 0), and into ``out=``;
* layouts: ``[T, N]``, ``[N, T]`` (``time_dim=1``) and ``[B, T, 1]`` (``time_dim=-2``);
* sizes on both sides of every threshold of the CPU path and of the replay cache, listed once
  in :data:`THRESHOLDS`;
* sequences of calls: the first (checked), replays, after a change of shape, dtype or input
  kind, numpy and torch in turn, from a second thread;
* modes: ``exact=True`` and fast; with and without autograd.

The first call on each input is compared with the float64 reference, and every later call on
the same input with the first, bit for bit. A threshold's cases run every op at small sizes,
with the threshold's module constant lowered (a knob: the branch each side takes is the real
one, and the test asserts it on the runners), and GAE at the shipped thresholds' own sizes.
Masked GAE on ``[N, T]`` rows runs ``rlscan._cpu_rows``' row loops instead of a runner's, at
every side: there the test asserts that the row loops ran.
"""
from __future__ import annotations

import contextlib
import re
import sys
import threading
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import pytest
import torch

import rlscan
import rlscan.reference
from rlscan import _cache, _cpu, _fast
from rlscan_testing import assert_close, bitwise_equal, path_for, place

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import op_cases  # noqa: E402

# a warning from a compiler, from numba or from torch's wrapping of an array is a bug here
pytestmark = pytest.mark.filterwarnings("error")

# ----------------------------------------------------------------------------- the ops

#: every public op: op_cases' calls, the masked GAE (with and without whitening) and the whitening
OPS = op_cases.OPS + ("gae mask", "gae mask whiten", "masked_whiten")
LAYOUTS = ("TN", "NT", "BT1")
FLAG_NAMES = ("terminated", "truncated", "dones", "mask")
BATCH_NAMES = ("bootstrap_value", "initial")


def _whitened_gae(*args, mask, whiten, **kwargs):
    adv, ret = rlscan.reference.gae(*args, mask=mask, **kwargs)
    return rlscan.reference.masked_whiten(adv, mask), ret


def _whitened(values, mask):
    return rlscan.reference.masked_whiten(values, mask)


def make_case(op: str, layout: str, N: int, T: int, dtype=torch.float32, seed: int = 0) -> op_cases.Case:
    """``op``'s call on fresh torch tensors of ``layout`` (``op_cases.make_case``, plus a mask)."""
    if op in op_cases.OPS:
        return op_cases.make_case(op, layout, N, T, dtype, seed=seed)
    base = op_cases.make_case("gae coefs", layout, N, T, dtype, seed=seed)
    mask = torch.rand(base.args[0].shape, generator=torch.Generator().manual_seed(seed + 1)) < 0.7
    if op == "masked_whiten":
        return op_cases.Case(op, rlscan.masked_whiten, _whitened, (base.args[0], mask), {})
    kwargs = dict(base.kwargs, mask=mask, gamma=0.9, lmbda=0.8)
    if op == "gae mask":
        return op_cases.Case(op, rlscan.gae, rlscan.reference.gae, base.args, kwargs)
    return op_cases.Case(op, rlscan.gae, _whitened_gae, base.args, dict(kwargs, whiten=True))


def _time_dim(case) -> int:
    return case.kwargs.get("time_dim", 0) % case.args[0].dim()


def _broadcast(name: str, x, time_dim: int):
    """A flag as its first environment's, or a per-environment value as the first one, for all."""
    if name in FLAG_NAMES:
        return x[tuple(slice(None) if d == time_dim else slice(0, 1) for d in range(x.dim()))].expand(x.shape)
    return x.reshape(-1)[:1].reshape((1,) * x.dim()).expand(x.shape)


def as_kind(case, kind: str) -> op_cases.Case:
    """The case with its tensors passed as ``kind``: ``"<numpy|torch> <contiguous|sliced|
    transposed|broadcast|out>"``. ``out`` keeps the inputs contiguous; the call gets fresh
    outputs (``out_like``)."""
    container, view = kind.split()
    td = _time_dim(case)

    def convert(name, x):
        if not isinstance(x, torch.Tensor):
            return x
        if view in ("sliced", "transposed"):
            x = place(x, view)
        elif view == "broadcast" and name in FLAG_NAMES + BATCH_NAMES:
            x = _broadcast(name, x, td)
            if container == "numpy":  # numpy's own broadcast: a read-only view
                return np.broadcast_to(x[tuple(slice(0, 1) if s == 0 else slice(None) for s in x.stride())].numpy(),
                                       x.shape)
        return x.numpy() if container == "numpy" else x

    args = tuple(convert(None, x) for x in case.args)
    kwargs = {k: convert(k, x) for k, x in case.kwargs.items()}
    return case._replace(args=args, kwargs=kwargs)


def out_like(case, n: int):
    """``out=`` for a call of ``case``: ``n`` fresh outputs laid out as its first input."""
    anchor = case.args[0]
    outs = tuple(np.empty_like(anchor) if isinstance(anchor, np.ndarray) else torch.empty_like(anchor)
                 for _ in range(n))
    return outs[0] if n == 1 else outs


def _as_torch(x):
    return torch.from_numpy(np.array(x)) if isinstance(x, np.ndarray) else x


def reference(case) -> tuple:
    """The float64 reference's outputs for the case's values (whatever their kind)."""
    refs = case.reference(*map(_as_torch, case.args), **{k: _as_torch(v) for k, v in case.kwargs.items()})
    return tuple(refs) if isinstance(refs, tuple) else (refs,)


def run(case, out: bool = False, n_out: int = 0, **options) -> tuple:
    """The case's outputs as a tuple; with ``out``, into fresh ``out=`` outputs (which it returns)."""
    if out:
        given = out_like(case, n_out)
        got = case(out=given, **options)
        given = given if isinstance(given, tuple) else (given,)
        got = tuple(got) if isinstance(got, tuple) else (got,)
        assert all(g is o or np.shares_memory(g, o) for g, o in zip(got, given)), "out= is returned as the result"
        return got
    got = case(**options)
    return tuple(got) if isinstance(got, tuple) else (got,)


class Calls:
    """The calls of one test on each of its inputs: the first checked against the reference
    (and against numpy in, numpy out), every later one against the first, bit for bit."""

    def __init__(self):
        self.first, self.refs = {}, {}

    def check(self, key, case, got: tuple, what: str = "") -> None:
        numpy_io = isinstance(case.args[0], np.ndarray)
        assert all(isinstance(g, np.ndarray) == numpy_io for g in got), f"{what}: numpy in, numpy out"
        if key not in self.first:
            refs = self.refs[key] = reference(case)
            assert len(got) == len(refs)
            for k, (g, r) in enumerate(zip(got, refs)):
                assert tuple(g.shape) == tuple(r.shape), f"{what} output {k}"
                wide = g.dtype == (np.float64 if isinstance(g, np.ndarray) else torch.float64)
                assert_close(g, r, torch.float64 if wide else torch.float32, f"{case.op} {what} output {k}")
            self.first[key] = got
            return
        for k, (a, b) in enumerate(zip(self.first[key], got)):
            assert bitwise_equal(a, b), f"{case.op} {what} output {k}: not the first call's bits"


def _in_a_thread(fn):
    """``fn()`` called from a second thread (its exception raised here)."""
    result = []
    worker = threading.Thread(target=lambda: result.append(_capture(fn)))
    worker.start()
    worker.join()
    value, error = result[0]
    if error is not None:
        raise error
    return value


def _capture(fn):
    try:
        return fn(), None
    except BaseException as error:  # noqa: BLE001 - handed back to the calling thread
        return None, error


# ----------------------------------------------------------------------------- caches and knobs

_MODULES = {"_cpu": _cpu, "_cache": _cache}
#: the names of the compiled loop versions that calls picked (``_Loop.__call__``; a replay of a
#: noted loop call runs the version its first call picked without it)
_RAN: list = []


def _noting_versions(real):
    def call(loop, *args):
        width = next(a.shape[2] for a in args if type(a) is np.ndarray)
        result = real(loop, *args)
        _RAN.append(loop._versions[(width, _cpu._parallel_now)].py_func.__name__)
        return result

    return call


class _Counted(_cache.SignatureCache):
    """A cache that counts how often it was emptied for being full."""

    clears = 0

    def clear(self):
        self.clears += 1
        super().clear()


@pytest.fixture
def fresh(monkeypatch):
    """Empty, counting replay and runner caches; numba's threads counted as 2, so that the grid's
    blocks are the same on every machine (a one-CPU machine still runs the parallel version);
    the parallel loop timed as the faster, so that which version runs on which call is the
    same on every run; ``knobs({"_cpu.NAME": value})`` moves thresholds for the rest of the test."""
    monkeypatch.setattr(_cpu, "cpu_threads", lambda: 2)
    note = _cpu._Versions.note
    monkeypatch.setattr(_cpu._Versions, "note", lambda self, parallel, seconds: note(self, parallel, 2.0 - parallel))
    monkeypatch.setattr(_cpu._Loop, "__call__", _noting_versions(_cpu._Loop.__call__))
    monkeypatch.setattr(_cache, "CACHE", _Counted())

    def knobs(values: dict) -> None:
        for name, value in values.items():
            module, attr = name.split(".")
            monkeypatch.setattr(_MODULES[module], attr, value)
        _cache.clear()
        _cache.CACHE.clears = 0
        _RAN.clear()

    yield knobs
    _cache.clear()


def _runners() -> list:
    return list(_cpu.cached_runners())


@contextlib.contextmanager
def _row_loop_calls():
    """Whether each masked GAE call inside ran ``rlscan._cpu_rows``' row loops (a list of bools)."""
    from rlscan.ops.gae import rows

    taken, real = [], rows.advantages

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        taken.append(result is not None)
        return result

    rows.advantages = spy
    try:
        yield taken
    finally:
        rows.advantages = real


def _replayed() -> bool:
    return any(isinstance(e, _fast._Entry) for e in _cache.CACHE.values())


# ----------------------------------------------------------------------------- the thresholds


def _serial_only(runners) -> bool:
    return all(r.versions is None for r in runners)


def _both_versions(runners) -> bool:
    return all(r.versions is not None and all(r.versions.runs) for r in runners)


def _across(runners) -> bool:
    return all(r.serial_blocks == 1 for r in runners)


def _rows(runners) -> bool:
    return all(r.serial_blocks == _cpu._row_blocks(r.layout.B) > 1 for r in runners)


def _rows_of(together: int):
    def took(runners) -> bool:
        return all(r.serial_blocks == r.layout.B // together for r in runners)

    return took


def _rows_both_versions(runners) -> bool:
    return _rows(runners) and all(r.parallel_blocks == r.serial_blocks for r in runners) and _both_versions(runners)


def _huge(runners) -> bool:
    return all(r.huge for r in runners)


def _not_huge(runners) -> bool:
    return not any(r.huge for r in runners)


def _fixed_width(runners) -> bool:
    widths = {r.layout.B_lo for r in runners}
    return len(widths) == 1 and bool(_RAN) and all(name.endswith(f"_w{min(widths)}") for name in _RAN)


def _any_width(runners) -> bool:
    return bool(_RAN) and not any(re.search(r"_w\d+$", name) for name in _RAN)


def _runs(runners, serial: int, parallel: int) -> bool:
    return all(r.versions is not None and r.versions.runs == [serial, parallel] for r in runners)


# the version choice (_Versions), with the parallel loop timed as the faster (the fixture ``fresh``)
def _turns(runners) -> bool:
    return _runs(runners, _cpu.RECENT + 1, _cpu.RECENT + 1)


def _past_the_turns(runners) -> bool:
    return _runs(runners, _cpu.RECENT + 1, _cpu.RECENT + 2)


def _before_the_recheck(runners) -> bool:
    return _runs(runners, _cpu.RECENT + 1, _recheck_call() - 1 - (_cpu.RECENT + 1))


def _rechecked(runners) -> bool:
    return _runs(runners, _cpu.RECENT + 2, _recheck_call() - (_cpu.RECENT + 2))


def _turn_calls() -> int:
    return 2 * (_cpu.RECENT + 1)


def _recheck_call() -> int:
    """The first call after the turns that runs the slower version again."""
    return (_turn_calls() // _cpu.RECHECK_EVERY + 1) * _cpu.RECHECK_EVERY


def _replays_kept(runners) -> bool:
    return _cache.CACHE.clears == 0


def _cache_emptied(runners) -> bool:
    return _cache.CACHE.clears > 0


class Side(NamedTuple):
    """One side of a threshold: the inputs' layout and ``(N, T)`` shapes (several, called in
    turn, for the caches' limits) under the threshold's knobs, the same at the shipped values
    (``real``, for GAE), how many calls each shape gets, and the branch it takes (a
    predicate on the CPU runners)."""

    name: str
    layout: str
    shapes: tuple
    real: tuple
    took: Callable
    calls: Callable = lambda: 4  # noqa: E731 - the count may follow knobs: a function
    knobs: dict = {}  # more knobs, for this side alone


def _shapes(n: int, T: int = 4) -> tuple:
    return tuple((N, T) for N in range(1, n + 1))


# knobs of the CPU path's parallel version at small sizes: blocks of 12 environments
_PARALLEL = {"_cpu.PARALLEL_MIN_ELEMENTS": 256, "_cpu._MIN_BLOCK": 12}
# knobs that walk small [N, T] grids row by row
_ROWS = {"_cpu.ROWS_MIN_ENVIRONMENTS": 8, "_cpu.ROW_MIN_BYTES": 64, "_cpu.PAGE_BYTES": 128, "_cpu.ROWS_MIN_BYTES": 2048}

#: Every threshold of the CPU path and of the replay cache, by module constant: its knobs (the
#: constants lowered so that small calls reach both sides) and its sides. One constant can stand
#: for a rule of several (PARALLEL_MIN_ELEMENTS for the parallel version with rows too).
THRESHOLDS = {
    "_cpu.PARALLEL_MIN_ELEMENTS": (_PARALLEL, (
        Side("below", "TN", ((24, 10),), ((1024, 1023),), _serial_only),
        Side("at", "TN", ((24, 11),), ((1024, 1024),), _both_versions),
        Side("at, in rows", "NT", ((12, 32),), ((1024, 1024),), _rows_both_versions, knobs=_ROWS),
    )),
    "_cpu._MIN_BLOCK": (dict(_PARALLEL, **{"_cpu.PARALLEL_MIN_ELEMENTS": 1}), (
        Side("below", "TN", ((22, 10),), ((126, 8323),), _serial_only),
        Side("at", "TN", ((24, 10),), ((128, 8192),), _both_versions),
    )),
    "_cpu.HUGE_PAGE_BYTES": ({"_cpu.HUGE_PAGE_BYTES": 1024}, (
        Side("below", "TN", ((24, 10),), ((1024, 1023),), _not_huge),
        Side("at", "TN", ((24, 11),), ((1024, 1024),), _huge),
    )),
    "_cpu.ROWS_MIN_ENVIRONMENTS": (_ROWS, (
        Side("below", "NT", ((7, 32),), ((31, 1024),), _across),
        Side("at", "NT", ((8, 32),), ((32, 1024),), _rows),
    )),
    "_cpu.ROW_MIN_BYTES": (_ROWS, (
        Side("below", "NT", ((32, 15),), ((1024, 511),), _across),
        Side("at", "NT", ((32, 16),), ((1024, 512),), _rows),
    )),
    "_cpu.PAGE_BYTES": (_ROWS, (
        Side("off a page", "NT", ((8, 33),), ((32, 1025),), _across),
        Side("on a page", "NT", ((8, 32),), ((32, 1024),), _rows),
    )),
    "_cpu.ROWS_TOGETHER": (_ROWS, (
        Side("4 rows a block", "NT", ((8, 32),), ((32, 1024),), _rows_of(4)),
        Side("2 rows a block", "NT", ((10, 32),), ((34, 1024),), _rows_of(2)),
        Side("1 row a block", "NT", ((9, 32),), ((33, 1024),), _rows_of(1)),
    )),
    "_cpu.ROWS_MIN_BYTES": (_ROWS, (
        Side("below", "NT", ((25, 20),), ((873, 600),), _across),
        Side("at", "NT", ((26, 20),), ((874, 600),), _rows),
    )),
    "_cpu.FIXED_WIDTHS": ({}, (
        Side("fixed", "TN", ((8, 10),), ((8, 10),), _fixed_width),
        Side("any", "TN", ((9, 10),), ((9, 10),), _any_width),
    )),
    "_cpu.RECENT": (dict(_PARALLEL, **{"_cpu.RECENT": 1, "_cpu.RECHECK_EVERY": 8}), (
        Side("turns", "TN", ((24, 11),), ((1024, 1024),), _turns, _turn_calls),
        Side("past the turns", "TN", ((24, 11),), ((1024, 1024),), _past_the_turns, lambda: _turn_calls() + 1),
    )),
    "_cpu.RECHECK_EVERY": (dict(_PARALLEL, **{"_cpu.RECENT": 1, "_cpu.RECHECK_EVERY": 8}), (
        Side("before", "TN", ((24, 11),), ((1024, 1024),), _before_the_recheck, lambda: _recheck_call() - 1),
        Side("rechecked", "TN", ((24, 11),), ((1024, 1024),), _rechecked, _recheck_call),
    )),
    # a replayed call keeps two entries (its replay and its runner), a masked op's loops more
    "_cache.MAX_ENTRIES": ({"_cache.MAX_ENTRIES": 4}, (
        Side("below", "TN", ((24, 10),), ((24, 10),), _replays_kept),
        Side("full", "TN", ((24, 10), (24, 11), (24, 12)), _shapes(2049), _cache_emptied, lambda: 1),
    )),
}

#: Module constants of those modules that choose no path: why not.
NOT_THRESHOLDS = {
    "_cpu._HUGE": "the huge page's size, where advice on an output starts: a hint, not a path",
    "_cpu._MADV_HUGEPAGE": "madvise's flag",
}

#: Ops with a CPU loop: the whitening alone is torch operations on the CPU, with no runner.
LOOP_OPS = tuple(op for op in OPS if op != "masked_whiten")


def _threshold_cases() -> list:
    return [pytest.param(name, side, id=f"{name.split('.')[1]}-{side.name}")
            for name, (_, sides) in THRESHOLDS.items() for side in sides]


def _drive(op: str, side: Side, shapes: tuple, calls: Calls, threshold: str) -> None:
    """``side``'s calls of ``op``: each shape's numpy inputs ``side.calls()`` times, in turn (after
    which the runners must show the side's branch); then on the first shape, torch tensors (the
    same runner, through a replay of its own), numpy again, and numpy from a second thread."""
    cases = [as_kind(make_case(op, side.layout, N, T, seed=k), "numpy contiguous") for k, (N, T) in enumerate(shapes)]
    with _row_loop_calls() as on_rows:
        for round_ in range(side.calls()):
            for k, case in enumerate(cases):
                calls.check(k, case, run(case), f"numpy, call {round_ + 1}")
    if op.startswith("gae mask") and side.layout == "NT":
        # masked GAE on [N, T] rows runs rlscan._cpu_rows' row loops, not a runner of _cpu's loops
        assert on_rows and all(on_rows), f"{op}: [N, T] rows did not take the row loops"
    else:
        runners = _runners()
        assert runners or side.took is _cache_emptied
        assert side.took(runners), f"{op}: the {side.name} side of {threshold} did not take its branch"
    first = cases[0]
    torch_case = as_kind(make_case(op, side.layout, *shapes[0], seed=0), "torch contiguous")
    for round_ in range(2):
        calls.check(0, torch_case, run(torch_case), f"torch after numpy, call {round_ + 1}")
    calls.check(0, first, run(first), "numpy after torch")
    calls.check(0, first, _in_a_thread(lambda: run(first)), "numpy from a second thread")


@pytest.mark.parametrize("op", LOOP_OPS)
@pytest.mark.parametrize("threshold,side", _threshold_cases())
def test_each_side_of_each_threshold(threshold, side, op, fresh):
    knobs, _ = THRESHOLDS[threshold]
    fresh(dict(knobs, **side.knobs))
    _drive(op, side, side.shapes, Calls(), threshold)


@pytest.mark.parametrize("threshold,side", _threshold_cases())
def test_each_side_of_each_shipped_threshold(threshold, side, fresh):
    """GAE on both sides of each threshold as shipped: the knobs move the real boundaries."""
    fresh({})
    _drive("gae", side, side.real, Calls(), threshold)


def _constants(module):
    for name, value in vars(module).items():
        if not name.lstrip("_").isupper() or isinstance(value, bool):
            continue
        if isinstance(value, int) or (isinstance(value, tuple) and value and all(type(v) is int for v in value)):
            yield name


def test_every_threshold_has_a_case():
    """A new size threshold of the CPU path or of the replay cache shows up here until
    THRESHOLDS lists it with a case for each side."""
    found = {f"{key}.{name}" for key, module in _MODULES.items() for name in _constants(module)}
    unlisted = found - set(THRESHOLDS) - set(NOT_THRESHOLDS)
    assert not unlisted, f"thresholds with no case in THRESHOLDS: {sorted(unlisted)}"
    assert set(THRESHOLDS) <= found, "THRESHOLDS names a constant the modules no longer have"


# ----------------------------------------------------------------------------- the issue's call

ISSUE_OPS = ("gae", "td_lambda", "discounted_returns", "vtrace", "eligibility_traces", "episodic_cumsum")


@pytest.mark.parametrize("op", ISSUE_OPS)
def test_numpy_at_2048_by_4096_on_every_call(op, fresh):
    """The issue's call: ``[T, N]`` numpy at 2048 × 4096 raised on its second call (the parallel
    loop's views, made on it from numpy arrays). Each call, both loop versions, the same bits."""
    T, N = 2048, 4096
    rng = np.random.default_rng(1)
    r, v = rng.standard_normal((T, N)).astype(np.float32), rng.standard_normal((T, N)).astype(np.float32)
    d, boot = rng.random((T, N)) < 0.01, rng.standard_normal(N).astype(np.float32)
    case = {
        "gae": lambda: rlscan.gae(r, v, bootstrap_value=boot, terminated=d),
        "td_lambda": lambda: rlscan.td_lambda(r, v, bootstrap_value=boot, terminated=d),
        "discounted_returns": lambda: rlscan.discounted_returns(r, bootstrap_value=boot, terminated=d),
        "vtrace": lambda: rlscan.vtrace(r, v, 0.1 * v, bootstrap_value=boot, terminated=d),
        "eligibility_traces": lambda: rlscan.eligibility_traces(r, dones=d, gamma=0.9, lmbda=0.8, initial=boot),
        "episodic_cumsum": lambda: rlscan.episodic_cumsum(r, dones=d, initial=boot),
    }[op]
    results = [case() for _ in range(4)]
    (runner,) = _runners()
    assert runner.versions.runs == [2, 2]  # the serial and the parallel loop, twice each
    first = results[0] if isinstance(results[0], tuple) else (results[0],)
    assert all(isinstance(x, np.ndarray) for x in first)
    for again in results[1:]:
        again = again if isinstance(again, tuple) else (again,)
        assert all(bitwise_equal(a, b) for a, b in zip(first, again))
    if op == "gae":
        want = rlscan.reference.gae(r, v, bootstrap_value=boot, terminated=d)
        for got, ref in zip(first, want):
            assert_close(got, ref, torch.float32, "gae")


# ----------------------------------------------------------------------------- input kinds

KINDS = tuple(f"{c} {v}" for c in ("numpy", "torch") for v in ("contiguous", "sliced", "transposed", "broadcast", "out"))


def _kind_cases() -> list:
    cases = []
    for op in OPS:
        cases += [pytest.param(op, "TN", kind, id=f"{op}-TN-{kind}") for kind in KINDS
                  if not (op == "masked_whiten" and kind.endswith("out"))]  # it takes no out=
        cases += [pytest.param(op, layout, kind, id=f"{op}-{layout}-{kind}") for layout in LAYOUTS[1:]
                  for kind in ("numpy contiguous", "torch contiguous")]
    return cases


# the calls replayed from the cache (the others check a tensor's values, run two scans or a torch form)
_REPLAYED_OPS = tuple(op for op in OPS if op not in ("gae coefs", "retrace_from_q", "gae mask", "gae mask whiten",
                                                     "masked_whiten"))


@pytest.mark.parametrize("op,layout,kind", _kind_cases())
def test_each_input_kind_and_layout(op, layout, kind, fresh):
    """Four calls on one input of each kind, on the serial loop (its noted call replayed) and,
    but for transposed views and other layouts, then with the parallel loop's knobs (both
    versions in turn): the same bits throughout. (Where the parallel loop's views are strided,
    sliced views stand for the others: each such layout compiles a parallel loop of its own.)"""
    case = as_kind(make_case(op, layout, 24, 11, seed=3), kind)
    out, n_out = kind.endswith("out"), len(reference(case))
    calls = Calls()
    for knobs in ({}, _PARALLEL) if layout == "TN" and not kind.endswith("transposed") else ({},):
        fresh(knobs)
        for k in range(4):
            calls.check(0, case, run(case, out, n_out), f"{kind}, {layout}, knobs {knobs}, call {k + 1}")
        if op in _REPLAYED_OPS and not out:
            assert _replayed(), "the repeat calls were not replayed"
        if knobs and op in LOOP_OPS:
            assert _both_versions(_runners())


# ----------------------------------------------------------------------------- sequences and modes


@pytest.mark.parametrize("op", OPS)
def test_a_sequence_of_calls(op, fresh):
    """A change of shape, of dtype and of input kind between replays; numpy and torch in turn;
    a call from a second thread; exact and fast mode (the CPU path is exact in both): each
    input's calls give its first call's bits, with the parallel loop's knobs (both versions;
    the float64 input is below them, on the serial loop)."""
    fresh(_PARALLEL)
    base = make_case(op, "TN", 24, 11, seed=5)
    x, x_torch = as_kind(base, "numpy contiguous"), as_kind(base, "torch contiguous")
    wide = as_kind(make_case(op, "TN", 24, 10, torch.float64, seed=5), "numpy contiguous")
    other = as_kind(make_case(op, "TN", 36, 12, seed=6), "numpy contiguous")
    exact = {} if op == "masked_whiten" else {"exact": True}
    calls = Calls()
    steps = [("x", x, {}), ("x", x, {}), ("x", x, {}), ("x", x_torch, {}), ("x", x_torch, {}),
             ("x", x, {"thread": True}), ("wide", wide, {}), ("wide", wide, {}), ("x", x, {}),
             ("other", other, {}), ("other", other, {}), ("x", x, exact), ("x", x_torch, exact), ("x", x, exact),
             ("x", x_torch, {}), ("x", x, {}), ("other", other, {"thread": True})]
    for k, (key, case, options) in enumerate(steps):
        options = dict(options)
        if options.pop("thread", False):
            got = _in_a_thread(lambda: run(case, **options))
        else:
            got = run(case, **options)
        calls.check(key, case, got, f"step {k + 1} ({key}, {options or 'fast'})")


def _floating(case) -> list:
    return [x for x in list(case.args) + list(case.kwargs.values())
            if isinstance(x, torch.Tensor) and x.is_floating_point()]


@pytest.mark.parametrize("flags", ["torch", "numpy"])
@pytest.mark.parametrize("op", OPS)
def test_gradients_on_every_call(op, flags, fresh):
    """Autograd's calls: forward and backward three times, replayed where they can be; outputs
    and gradients the first call's bits; the outputs the reference's, the gradients those of
    the op in float64. ``numpy`` passes the flags and the per-environment values as numpy
    arrays beside the differentiated tensors. GAE's run with the parallel loop's knobs too: a
    call that records for backward hands its runners tensors alone, whatever the op, and
    each op's parallel backward loop would cost its compile for nothing more."""
    case = make_case(op, "TN", 24, 11, seed=7)
    if flags == "numpy":
        case = case._replace(kwargs={k: x.numpy() if k in FLAG_NAMES + BATCH_NAMES else x
                                     for k, x in case.kwargs.items()})
    refs = reference(case)
    weights = [torch.linspace(0.5, 1.5, r.numel(), dtype=torch.float32).reshape(r.shape) for r in refs]
    wide = case._replace(args=tuple(_wide(x) for x in case.args), kwargs={n: _wide(x) for n, x in case.kwargs.items()})
    _, want = op_cases.backward(wide, [w.double() for w in weights])
    fresh(_PARALLEL if op == "gae" else {})
    first = None
    for k in range(3):
        leaves = {id(x): x.detach().clone().requires_grad_() for x in _floating(case)}
        swap = lambda x: leaves.get(id(x), x)  # noqa: E731
        outs = run(case._replace(args=tuple(map(swap, case.args)), kwargs={n: swap(x) for n, x in case.kwargs.items()}))
        grads = torch.autograd.grad(outs, list(leaves.values()), weights, allow_unused=True)
        got = tuple(o.detach() for o in outs) + tuple(g for g in grads if g is not None)
        if first is None:
            first = got
            for o, r in zip(outs, refs):
                assert_close(o, r, torch.float32, f"{op} output")
        else:
            assert all(bitwise_equal(a, b) for a, b in zip(first, got)), f"{op}: call {k + 1}'s bits"
    for g, w in zip((g for g in grads if g is not None), (w for w in want if w is not None)):
        assert_close(g, w, torch.float32, f"{op} gradient")


def _wide(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.double()
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return x.astype(np.float64)
    return x


# ----------------------------------------------------------------------------- other arguments


def test_numpy_scalars_and_python_floats(fresh):
    """γ as a numpy scalar or a 0-d array, on every call; a Python float or numpy scalar for
    ``bootstrap_value`` is refused on every call, naming it (it needs one value per environment)."""
    case = as_kind(make_case("gae", "TN", 24, 11, seed=8), "numpy contiguous")
    calls = Calls()
    for gamma in (np.float32(0.9), np.array(0.9, dtype=np.float32), np.float64(0.9)):
        for k in range(3):
            # a 0-d array is a γ tensor, rounded to float32 with λ apart: bits of its own
            key = (type(gamma), float(gamma))
            calls.check(key, case._replace(kwargs=dict(case.kwargs, gamma=float(gamma))), run(case, gamma=gamma),
                        f"gamma={gamma!r}, call {k + 1}")
    for bootstrap in (0.5, np.float32(0.5)):
        for _ in range(3):
            with pytest.raises(TypeError, match="bootstrap_value must be a torch.Tensor or a numpy array"):
                case.fn(*case.args, **dict(case.kwargs, bootstrap_value=bootstrap))


def test_numpy_beside_tensors_on_the_triton_path(fresh):
    """numpy arrays passed beside tensors to the Triton path: beside CUDA tensors they are
    refused, naming the argument (rlscan never moves data between devices); under the
    interpreter (CPU tensors) they run, checked on every call, since a launch plan reads
    tensors (a numpy replay fed it the arrays)."""
    chosen = path_for("triton")
    case = make_case("gae", "TN", 3, 4, seed=9)
    case = case._replace(args=tuple(x.to(chosen.device) for x in case.args),
                         kwargs={k: x.numpy() if k == "terminated" else
                                 (x.to(chosen.device) if isinstance(x, torch.Tensor) else x)
                                 for k, x in case.kwargs.items()})
    with rlscan.use_backend("triton"):
        if chosen.device.type == "cuda":
            with pytest.raises(ValueError, match="terminated is on cpu but rewards is on cuda"):
                case()
            return
        calls = Calls()
        for k in range(3):
            calls.check(0, case, run(case), f"call {k + 1}")
    assert not _replayed()


def test_numpy_beside_another_device_is_refused(fresh):
    """A numpy array is CPU memory: beside tensors on another device (``meta``, standing in for
    a GPU) it is refused on every call, naming the argument; rlscan never moves data."""
    on_meta, host = torch.empty(5, 3, device="meta"), np.zeros((5, 3), dtype=np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match="terminated is on cpu but rewards is on meta"):
            rlscan.gae(on_meta, on_meta, bootstrap_value=on_meta[0], terminated=host != 0)
        with pytest.raises(ValueError, match="bootstrap_value is on cpu but rewards is on meta"):
            rlscan.gae(on_meta, on_meta, bootstrap_value=host[0])
        with pytest.raises(ValueError, match="values is on meta but rewards is on cpu"):
            rlscan.gae(host, on_meta, bootstrap_value=host[0])


# ----------------------------------------------------------------------------- the adapters


def test_sb3_rollouts_of_a_million_entries(fresh):
    """SB3's buffers are numpy: rollouts of 2048 steps × 512 environments (the parallel loop's
    size) one after another, each SB3's own loop bit for bit."""
    pytest.importorskip("stable_baselines3")
    from types import SimpleNamespace

    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer

    from rlscan.adapters.sb3 import TritonRolloutBuffer

    T, N = 2048, 512
    buffer = TritonRolloutBuffer(T, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), "cpu", gae_lambda=0.95, gamma=0.99,
                                 n_envs=N)
    rng = np.random.default_rng(0)
    for rollout in range(3):
        buffer.rewards[:] = rng.standard_normal((T, N))
        buffer.values[:] = rng.standard_normal((T, N))
        buffer.episode_starts[:] = rng.random((T, N)) < 0.01
        last_values, dones = torch.from_numpy(rng.standard_normal(N).astype(np.float32)), rng.random(N) < 0.01
        shadow = SimpleNamespace(buffer_size=T, gamma=buffer.gamma, gae_lambda=buffer.gae_lambda,
                                 rewards=buffer.rewards.copy(), values=buffer.values.copy(),
                                 episode_starts=buffer.episode_starts.copy(), advantages=np.zeros_like(buffer.advantages))
        RolloutBuffer.compute_returns_and_advantage(shadow, last_values, dones)
        buffer.compute_returns_and_advantage(last_values, dones)
        assert bitwise_equal(buffer.advantages, shadow.advantages), f"rollout {rollout + 1}"
        assert bitwise_equal(buffer.returns, shadow.returns), f"rollout {rollout + 1}"
    (runner,) = _runners()
    assert runner.versions is not None and all(runner.versions.runs)


def test_cleanrl_and_verl_entry_points(fresh):
    """The torch adapters' entry points, three calls each with the parallel loop's knobs."""
    from rlscan.adapters import cleanrl, verl

    fresh(_PARALLEL)
    gen = torch.Generator().manual_seed(10)
    T, N = 11, 24
    rewards, values = torch.randn(T, N, generator=gen), torch.randn(T, N, generator=gen)
    dones, next_value = torch.rand(T, N, generator=gen) < 0.1, torch.randn(N, generator=gen)
    next_done = torch.rand(N, generator=gen) < 0.1
    want = rlscan.reference.gae(rewards, values, bootstrap_value=next_value,
                                terminated=torch.cat([dones[1:], next_done[None]]), gamma=0.99, lmbda=0.95)
    mask = torch.rand(N, T, generator=gen) < 0.7
    verl_want = _whitened_gae(rewards.T, values.T, mask=mask, whiten=True, gamma=0.99, lmbda=0.95, time_dim=1)
    first = None
    for _ in range(3):
        got = tuple(cleanrl.gae(rewards, values, dones, next_value, next_done, 0.99, 0.95))
        got += tuple(verl.compute_gae_advantage_return(rewards.T, values.T, mask, 0.99, 0.95))
        if first is None:
            first = got
            for g, w in zip(got, tuple(want) + tuple(verl_want)):
                assert_close(g, w, torch.float32, "adapter")
        assert all(bitwise_equal(a, b) for a, b in zip(first, got))
