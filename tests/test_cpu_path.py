"""The CPU loop's machinery: its parallel version, huge-page outputs and cached runners change
no bit of any result (each environment's steps still run in order on one thread)."""
import math

import numpy as np
import pytest
import torch
from numba import get_thread_id, prange

import rlscan
from rlscan import _cache, _cpu
from rlscan_testing import bitwise_equal, make_problem


def _run_on_cpu(problem):
    with rlscan.use_backend("cpu"):
        return problem.run()


@pytest.fixture
def parallel_everywhere(monkeypatch):
    """Every call runs the loops' parallel version, as a large call on an idle machine does."""
    monkeypatch.setattr(_cpu, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(_cpu._Versions, "parallel", lambda self: True)
    monkeypatch.setattr(_cpu, "cpu_threads", lambda: 2)
    _cache.clear()
    yield
    _cache.clear()


@pytest.mark.parametrize("op", ["gae", "vtrace", "linear_scan"])
@pytest.mark.parametrize("shape,time_dim,layout", [((9, 256), 0, "contiguous"), ((9, 4, 3, 5), 0, "sliced"),
                                                   ((128, 9), 1, "transposed")])
def test_parallel_loops_are_the_serial_loops_bit_for_bit(op, shape, time_dim, layout, parallel_everywhere):
    problem = make_problem(op, shape, time_dim=time_dim, layout=layout, seed=3, terminated="random")
    parallel = _run_on_cpu(problem)
    runners = list(_cpu.cached_runners())
    assert runners and all(r.parallel_blocks is not None for r in runners)  # the parallel version ran
    _cpu.PARALLEL_MIN_ELEMENTS = 1 << 62  # undone by the fixture's monkeypatch
    _cache.clear()
    serial = _run_on_cpu(problem)
    assert all(r.parallel_blocks is None for r in _cpu.cached_runners())
    for a, b in zip(parallel, serial):
        assert bitwise_equal(a, b)


def test_a_runner_runs_the_version_that_was_faster_lately():
    """The first calls take turns, until each version has RECENT timed calls (its first is not
    timed: it may compile it); then the faster one runs, with the other again every
    RECHECK_EVERY calls. A version's time is the least of its last RECENT calls: one slow call
    changes nothing, RECENT in a row switch to the other version, and one fast recheck
    switches back."""
    versions = _cpu._Versions()
    seconds = {True: 1.0, False: 3.0}  # the parallel version is 3x faster
    ran = []
    for _ in range(2 * _cpu.RECHECK_EVERY):
        parallel = versions.parallel()
        ran.append(parallel)
        versions.note(parallel, seconds[parallel])
    turns = 2 * (_cpu.RECENT + 1)
    assert ran[:turns] == [True, False] * (_cpu.RECENT + 1)
    assert [k + 1 for k, p in enumerate(ran[turns:], start=turns) if not p] == [_cpu.RECHECK_EVERY, 2 * _cpu.RECHECK_EVERY]
    assert versions.seconds == [3.0, 1.0]
    versions.note(True, 9.0)  # one slow call (its outputs' pages faulted in, say)
    assert versions.parallel() is True
    for _ in range(_cpu.RECENT):  # the CPUs got busy: the parallel version slows down
        versions.note(True, 9.0)
    assert versions.parallel() is False
    while versions.parallel() is False:
        versions.note(False, seconds[False])
    assert versions.calls % _cpu.RECHECK_EVERY == 0  # the recheck of the parallel version
    versions.note(True, 1.0)  # the CPUs are idle again
    assert versions.parallel() is True


def test_large_calls_time_both_versions(monkeypatch):
    """A runner that may run in parallel times its calls and tries both versions; their
    results are the same bits."""
    monkeypatch.setattr(_cpu, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(_cpu, "cpu_threads", lambda: 2)
    _cache.clear()
    problem = make_problem("gae", (9, 256), seed=5, terminated="random")
    results = [_run_on_cpu(problem) for _ in range(2 * (_cpu.RECENT + 1))]
    (runner,) = _cpu.cached_runners()
    assert runner.versions.runs == [_cpu.RECENT + 1] * 2 and None not in runner.versions.seconds
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert bitwise_equal(a, b)
    _cache.clear()


def test_blocks_keep_whole_cache_lines():
    layout = rlscan._inputs.plan_layout(torch.Size((8, 4096)), 0, [torch.empty(8, 4096)], [])
    assert _cpu._blocks(layout, 2) == 2
    layout = rlscan._inputs.plan_layout(torch.Size((8, 100)), 0, [torch.empty(8, 100)], [])
    assert _cpu._blocks(layout, 2) == 1  # 50 environments per block are too few: serial


def test_huge_page_outputs_hold_the_same_bits(monkeypatch):
    """Outputs of at least HUGE_PAGE_BYTES are advised onto huge pages: only a hint."""
    problem = make_problem("gae", (1024, 1100), seed=4)
    assert 1024 * 1100 * 4 >= _cpu.HUGE_PAGE_BYTES
    _cache.clear()
    advised = _run_on_cpu(problem)
    assert any(r.huge for r in _cpu.cached_runners())
    monkeypatch.setattr(_cpu, "HUGE_PAGE_BYTES", 1 << 62)
    _cache.clear()
    plain = _run_on_cpu(problem)
    for a, b in zip(advised, plain):
        assert bitwise_equal(a, b)
    _cache.clear()


def test_compiled_calls_reuse_one_runner():
    """Inside torch.compile the custom op runs the CPU loop through the runner cached by signature."""
    _cache.clear()
    r, v = torch.randn(6, 3), torch.randn(6, 3)
    boot = torch.randn(3)
    f = torch.compile(lambda r, v, b: rlscan.gae(r, v, bootstrap_value=b).advantages, fullgraph=True, backend="eager")
    for _ in range(3):
        f(r, v, boot)
    assert len(_cpu.cached_runners()) == 1
    expected = rlscan.reference.gae(r.double(), v.double(), bootstrap_value=boot.double()).advantages
    np.testing.assert_allclose(f(r, v, boot).numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "eligibility_traces",
                                "episodic_cumsum", "linear_scan"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_a_replayed_loop_call_is_the_loop_on_the_new_arguments(op, layout):
    """A runner that noted its loop call (``_LoopCall``) computes the next call's own inputs,
    and a call with other scalars (γ) takes the op's function again."""
    _cache.clear()
    first = make_problem(op, (12, 5), layout=layout, seed=1, terminated="random")
    second = make_problem(op, (12, 5), layout=layout, seed=2, terminated="random")
    other_gamma = make_problem(op, (12, 5), layout=layout, seed=2, terminated="random", gamma=0.5)
    _run_on_cpu(first)
    replays = [r.replay for r in _cpu.cached_runners()]
    assert all(replays), replays
    warm = [_run_on_cpu(p) for p in (second, other_gamma)]
    _cache.clear()
    cold = [_run_on_cpu(p) for p in (second, other_gamma)]
    for w, c in zip(warm, cold):
        assert all(bitwise_equal(a, b) for a, b in zip(w, c))
    if op not in ("episodic_cumsum", "linear_scan"):  # the ops with a float γ: the replay did not keep the first γ
        assert not all(bitwise_equal(a, b) for a, b in zip(warm[0], warm[1]))


def _exp_in_a_loop(x):
    from numba import njit

    @njit
    def loop(x, out):
        for i in range(x.shape[0]):
            out[i] = _cpu.step_exp(x[i])

    out = np.empty_like(x)
    loop(x, out)
    return out


def test_step_exp_float32_is_within_one_ulp():
    """The loops' float32 ``exp`` (``_cpu._exp_float32``): within 1 ulp of the exact value over
    the whole normal range, and torch's values at the edges (NaN, ±inf, overflow, underflow)."""
    sweep = np.concatenate([np.linspace(-87.3, 88.72, 2_000_001, dtype=np.float32),
                            np.random.default_rng(0).standard_normal(100_000).astype(np.float32),
                            np.linspace(-1e-3, 1e-3, 10_001, dtype=np.float32)])
    got = _exp_in_a_loop(sweep).astype(np.float64)
    exact = np.exp(sweep.astype(np.float64))
    ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - exact) / ulp) <= 1.0
    edges = np.array([np.nan, np.inf, -np.inf, 88.7228, 88.73, 100.0, -87.4, -103.0, -103.98, -104.5, -1e30,
                      1e30, 0.0, -0.0], dtype=np.float32)
    want = torch.exp(torch.from_numpy(edges)).numpy()
    got = _exp_in_a_loop(edges)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=2e-45)  # subnormals to within their last bit


def test_step_exp_float64_is_libms():
    x = np.random.default_rng(1).standard_normal(1000) * 50
    np.testing.assert_array_equal(_exp_in_a_loop(x), [math.exp(v) for v in x])


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_a_remembered_view_follows_its_tensor(layout):
    """Inputs passed again (a rollout buffer refilled in place) reuse the array made for them:
    it sees the new values, and the same tensor with other memory (``.data`` swapped for
    memory of the same layout) gets a view of that memory."""
    _cache.clear()
    problem = make_problem("gae", (11, 6), layout=layout, seed=4, terminated="random")
    rewards = problem.args[0]

    def check(got):
        want = problem.reference()
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-5)

    for scale in (1.0, -2.0, 3.0):  # two calls see it twice in a row, then the view is kept
        rewards.mul_(scale)
        check(_run_on_cpu(problem))
    kept = [v for r in _cpu.cached_runners() for views in r.views.values() for v in views[0]
            if isinstance(v, _cpu._Remembered) and v.kept[2] is not None]
    assert kept, "no input's view was remembered"
    before = _run_on_cpu(problem)
    other = torch.empty_strided(rewards.shape, rewards.stride()).copy_(rewards * 0.5)
    rewards.data = other
    after = _run_on_cpu(problem)
    check(after)
    assert not bitwise_equal(before[0], after[0])


def test_a_remembered_view_keeps_no_memory_alive():
    import gc
    import weakref

    _cache.clear()
    memory = np.random.default_rng(0).normal(size=(9, 4)).astype(np.float32)
    r = torch.from_numpy(memory)  # its storage holds the array: the array's life is the memory's
    v, last = torch.randn(9, 4), torch.randn(4)
    with rlscan.use_backend("cpu"):
        for _ in range(3):
            rlscan.gae(r, v, bootstrap_value=last)
        dead = weakref.ref(memory)
        del r, memory
        gc.collect()
        assert dead() is None
        r2 = torch.randn(9, 4)  # may land where r was: it is read, not r's remembered view
        got = rlscan.gae(r2, v, bootstrap_value=last)
    want = rlscan.reference.gae(r2.double(), v.double(), bootstrap_value=last.double())
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5, atol=1e-5)


def test_an_argument_broadcast_along_environments_is_read_in_c_order():
    """The gradient of ``out.sum()`` has stride 0: the loop reads a C-ordered copy (numba's loops
    vectorise over environments only on such arrays), made anew for each call."""
    view, aliases = _cpu._view_function(torch.ones(()).expand(6, 40), ((6, 1, 40), (0, 0, 0)), "series",
                                        torch.float32)
    a = view(torch.full((), 2.0).expand(6, 40))
    assert not aliases and a.flags.c_contiguous and a.shape == (6, 1, 40) and (a == 2).all()
    view, aliases = _cpu._view_function(torch.ones(6, 1).expand(6, 40), ((6, 1, 40), (1, 0, 0)), "flag",
                                        torch.float32)
    assert not aliases and view(torch.arange(6.0)[:, None].expand(6, 40))[:, 0, 7].tolist() == list(range(6))


@pytest.mark.parametrize("op", ["gae", "vtrace", "retrace"])
def test_a_broadcast_gradient_gives_the_dense_gradients_bits(op):
    from rlscan.bench import cases

    case = cases.CASES[op]
    d = cases.make_inputs(case, 40, 24, torch.float32, "tn", torch.device("cpu"))
    leaves = [d[k].requires_grad_() for k in case.series if d[k].is_floating_point()]
    with rlscan.use_backend("cpu"):
        outs = cases.outputs_of(case.call(rlscan, d))
        broadcast = torch.autograd.grad(sum(o.sum() for o in outs), leaves, retain_graph=True)
        dense = torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs])
    assert all(bitwise_equal(a, b) for a, b in zip(broadcast, dense))


def _thread_ids(out):
    for i in prange(out.shape[0]):
        out[i] = get_thread_id()


@pytest.mark.skipif(_cpu.cpu_threads() < 2, reason="numba runs on one thread here")
def test_the_parallel_version_runs_in_parallel_after_the_serial_one_was_cached():
    """Both versions of a loop are cached on disk; the parallel one under a name of its own, else
    it loads the serial version's code (numba's cache does not key on ``parallel=True``)."""
    out = np.full(4096, -1, dtype=np.int64)
    _cpu.njit(_thread_ids).serial(out)  # compiles, or loads, the serial version
    assert set(out.tolist()) == {0}
    _cpu.njit(_thread_ids).parallel(out)  # new dispatchers: from the disk cache where they can
    assert len(set(out.tolist())) > 1


@pytest.mark.parametrize("op", ["gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "eligibility_traces",
                                "episodic_cumsum", "linear_scan"])
@pytest.mark.parametrize("B", [40, 42])
def test_rows_walked_side_by_side_give_the_same_bits(op, B, monkeypatch):
    """Steps next to each other in memory (``time_dim=1``) with rows far enough apart are walked
    along the rows, a few side by side (``_steps_in_rows``, ``_row_blocks``: 4 rows a block for
    40 rows, 2 for 42): each environment's steps still run in order."""
    problem = make_problem(op, (B, 33), time_dim=1, seed=6, terminated="random")
    _cache.clear()
    across = _run_on_cpu(problem)
    assert all(r.serial_blocks == 1 for r in _cpu.cached_runners())
    monkeypatch.setattr(_cpu, "_steps_in_rows", lambda layout, tensors, kinds: not layout.two_level)
    _cache.clear()
    rows = _run_on_cpu(problem)
    assert any(r.serial_blocks == {40: 10, 42: 21}[B] for r in _cpu.cached_runners())
    assert all(bitwise_equal(a, b) for a, b in zip(across, rows))
    _cache.clear()


def test_which_grids_are_walked_row_by_row():
    def rows(shape, time_dim):
        x = torch.empty(shape)
        layout = rlscan._inputs.plan_layout(x.shape, time_dim, [x], [])
        return _cpu._steps_in_rows(layout, [x], ["series"])

    assert rows((4096, 2048), 1) and rows((32, 8192), 1) and rows((1000, 1000), 1) and rows((64, 2048, 1), 1)
    assert not rows((2048, 4096), 0)  # [T, N]: a step is one run of memory
    assert not rows((4096, 128), 1) and not rows((512, 512), 1) and not rows((256, 1000), 1)  # in cache
    assert [_cpu._row_blocks(B) for B in (64, 66, 65)] == [16, 33, 65]
    assert not rows((16, 8192), 1)  # too few environments to matter


def _loops():
    """Every compiled loop of the ops' CPU modules."""
    import importlib
    import pkgutil

    import rlscan.ops

    for info in pkgutil.iter_modules(rlscan.ops.__path__):
        try:
            module = importlib.import_module(f"rlscan.ops.{info.name}.cpu")
        except ImportError:
            continue
        yield from (x for x in vars(module).values() if isinstance(x, _cpu._Loop))


@pytest.mark.parametrize("op", ["gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "eligibility_traces",
                                "episodic_cumsum", "linear_scan"])
@pytest.mark.parametrize("width", [1, 8])
def test_loops_for_a_fixed_width_give_the_generic_loops_bits(op, width, monkeypatch):
    """Rows of 1-8 environments run loop versions compiled for their width (``FIXED_WIDTHS``):
    the same bits as the version for any width."""
    problem = make_problem(op, (30, width), seed=7, terminated="random")
    _cache.clear()
    fixed = _run_on_cpu(problem)
    assert any((width, False) in loop._versions and loop._versions[(width, False)] is not loop.serial
               for loop in _loops())
    monkeypatch.setattr(_cpu, "FIXED_WIDTHS", ())
    for loop in _loops():
        monkeypatch.setattr(loop, "_versions", {(None, False): loop.serial})
    _cache.clear()
    generic = _run_on_cpu(problem)
    assert all(bitwise_equal(a, b) for a, b in zip(fixed, generic))
    _cache.clear()


@pytest.mark.parametrize("op", ["gae", "td_lambda", "discounted_returns"])
def test_masked_loops_in_parallel_are_the_serial_loops_bit_for_bit(op, parallel_everywhere):
    """The step-skip loops (and the next kept values') run their environments in a prange too."""
    g = torch.Generator().manual_seed(5)
    r, v = torch.randn(9, 256, generator=g), torch.randn(9, 256, generator=g)
    mask = torch.rand(9, 256, generator=g) < 0.7
    fn = {"gae": lambda: rlscan.gae(r, v, mask=mask, gamma=0.9, lmbda=0.8),
          "td_lambda": lambda: rlscan.td_lambda(r, v, mask=mask, gamma=0.9, lmbda=0.8),
          "discounted_returns": lambda: (rlscan.discounted_returns(r, mask=mask, gamma=0.9),)}[op]
    with rlscan.use_backend("cpu"):
        parallel = fn()
        assert all(r.parallel_blocks is not None for r in _cpu.cached_runners())
        _cache.clear()
        _cpu.PARALLEL_MIN_ELEMENTS = 1 << 40
        serial = fn()
    for a, b in zip(parallel, serial):
        assert bitwise_equal(a, b)


def test_every_loop_has_a_prange():
    """A loop compiled with parallel=True but no prange makes numba warn the user
    (NumbaPerformanceWarning); every loop's environments run in a prange."""
    import importlib
    import pkgutil

    import rlscan.ops

    loops = []
    for info in pkgutil.walk_packages(rlscan.ops.__path__, "rlscan.ops."):
        if info.name.rsplit(".", 1)[-1] == "cpu":
            module = importlib.import_module(info.name)
            loops += [x for x in vars(module).values() if isinstance(x, _cpu._Loop)]
    from rlscan import _cpu_rows

    loops += [x for x in vars(_cpu_rows).values() if isinstance(x, _cpu._Loop)]
    assert len(loops) >= 18
    assert [x.__name__ for x in loops if "prange" not in x.py_func.__code__.co_names] == []


def test_cache_saves_of_two_processes_take_turns(tmp_path):
    """Two compiles saving new versions into one on-disk cache at once (two processes: here two
    threads, each with its own open lock file, which ``flock`` treats alike): the second save
    waits for the first, so each version's index entry names a data file of its own. Without
    the lock both read the same index and took the same file (a crash on the next load)."""
    import threading
    from types import SimpleNamespace

    from numba.core.caching import IndexDataCacheFile

    def cache_file():  # a dispatcher's cache file, through rlscan's wrapper
        dispatcher = SimpleNamespace(_cache=SimpleNamespace(
            _cache_file=IndexDataCacheFile(str(tmp_path), "loop", source_stamp=(0.0, 0))))
        return _cpu.serialize_saves(dispatcher)._cache._cache_file

    first, second = cache_file(), cache_file()
    read, resume = threading.Event(), threading.Event()
    load_index = first._load_index

    def slow_load_index():  # the first save reads the index, then waits: the window the race needs
        index = load_index()
        read.set()
        resume.wait(10)
        return index

    first._load_index = slow_load_index
    one = threading.Thread(target=first.save, args=("key one", "code one"))
    one.start()
    assert read.wait(10)
    two = threading.Thread(target=second.save, args=("key two", "code two"))
    two.start()
    two.join(0.5)
    assert two.is_alive(), "the second save ran while the first held the index"
    resume.set()
    one.join(10)
    two.join(10)
    index = IndexDataCacheFile(str(tmp_path), "loop", source_stamp=(0.0, 0))
    assert index.load("key one") == "code one" and index.load("key two") == "code two"


def test_the_loops_save_their_cache_in_turns():
    """Every dispatcher with an on-disk cache that the CPU path makes saves through the lock."""
    @_cpu.njit
    def loop(x, out):
        for i in prange(x.shape[0]):
            out[i] = x[i]

    compiled = loop.version(None, parallel=False)
    assert compiled._cache._cache_file.save.serialized
    assert _cpu._step_helper(lambda x: x)._cache._cache_file.save.serialized
