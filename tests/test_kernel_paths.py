"""Every Triton kernel path, forced with small shapes (``forced_config``): the scan kernel
over several tiles (partial last tile), the chunked two-launch path, the stripe kernel
(partial last window), the chunked stripe kernel, the block kernel (chunked or not), the
chained one-pass kernels (with their look-back made to compose published pairs, one
predecessor at a time, a few folded together, or a window of them scanned), and the
sequential ``exact`` kernel.
Every path runs ``[T, N]``; the chunked ones also ``[N, T]`` and the two-level
``[B1, T, B2]`` layout (the interpreter is slow: the product of all would cost minutes)."""
import math

import pytest

import rlscan
from rlscan import _cache
from rlscan._backend import interpreting
from rlscan._triton.launch import CHAINED, choose_config, forced_config
from rlscan_testing import (KERNEL_CONFIGS, OP_NAMES, VALUE_OPS, assert_matches_reference, dealt, dealt_over_kinds,
                            make_problem, path_for)

T = 11  # odd: partial tiles, windows and chunks everywhere below

CONFIGS = KERNEL_CONFIGS

LAYOUTS = {
    "time-first": dict(shape=(T, 3), time_dim=0),
    "time-last": dict(shape=(3, T), time_dim=1),
    "two-groups": dict(shape=(2, T, 3), time_dim=1),
}


@pytest.fixture
def triton_path():
    chosen = path_for("triton")
    with rlscan.use_backend("triton"):
        yield chosen


def _problem(op, layout, device, seed):
    values = "next" if op in VALUE_OPS else None
    truncated = "random" if op in VALUE_OPS else None
    return make_problem(op, device=device, values=values, truncated=truncated, seed=seed, **LAYOUTS[layout])


@pytest.mark.parametrize("config", CONFIGS)
def test_forced_configs_take_effect(config):
    """The forced settings reach the launch (so the tests below do test each path)."""
    with forced_config(**CONFIGS[config]):
        cfg = choose_config(T, 3, time_contiguous=False, exact=False, device=path_for("triton").device)
    assert cfg.kind == CONFIGS[config]["kind"]
    assert (cfg.n_chunks > 1) == ("n_chunks" in CONFIGS[config] or cfg.kind in CHAINED)
    assert (cfg.chunk_len * (cfg.n_chunks - 1)) < T <= cfg.chunk_len * cfg.n_chunks


# every op meets every kernel kind, every config runs at least two ops (rlscan_testing.dealt_over_kinds)
@pytest.mark.parametrize("config, op", dealt_over_kinds(OP_NAMES))
def test_kernel_path(triton_path, op, config):
    problem = _problem(op, "time-first", triton_path.device, seed=len(config))
    with forced_config(**CONFIGS[config]):
        assert_matches_reference(problem)


_CHUNKED = ["scan-chunks", "stripe-window-chunks", "block-chunks", "chained-look-back", "chained-window",
            "chained-stripe-look-back", "chained-words-look-back", "chained-stripe-words", "chained-scan-words"]


# each chunked config in both layouts, the ops dealt over them (every op meets both layouts)
@pytest.mark.parametrize("config, layout, op", [(c, layout, op) for (c, layout), op in
                                                dealt(OP_NAMES, [(c, lay) for lay in ("time-last", "two-groups")
                                                                 for c in _CHUNKED])])
def test_kernel_path_layouts(triton_path, op, config, layout):
    problem = _problem(op, layout, triton_path.device, seed=len(config) + len(layout))
    with forced_config(**CONFIGS[config]):
        assert_matches_reference(problem)


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_exact_kernel(triton_path, op, layout):
    assert_matches_reference(_problem(op, layout, triton_path.device, seed=3), exact=True)


@pytest.mark.parametrize("op", ["gae", "vtrace", "eligibility_traces", "linear_scan_reverse"])
@pytest.mark.parametrize("config", ["scan-chunks", "stripe-chunks"])
def test_chunks_with_tensor_coefficients(triton_path, op, config):
    """Per-step γ, λ (and β) read at the right step across chunk edges."""
    problem = make_problem(op, (T, 3), gamma="tensor", lmbda="tensor", device=triton_path.device, seed=21)
    with forced_config(**CONFIGS[config]):
        assert_matches_reference(problem)


def test_forced_kind_starts_from_its_defaults():
    """A forced kind does not inherit the heuristic's other choices (its link, look-back, step
    scan); forced fields without a kind replace the heuristic's own."""
    from rlscan._triton.launch import Config, _forced_setting

    first = Config("chained", 64, 1, steps=32, lookback=2, link="words", step_scan="shuffles", n_chunks=64,
                   chunk_len=32)
    cfg = _forced_setting(first, 2048, dict(kind="chained", block_b=128, steps=16, lookback=4))
    assert (cfg.kind, cfg.block_b, cfg.num_warps, cfg.steps, cfg.lookback, cfg.link, cfg.step_scan) == (
        "chained", 128, 1, 16, 4, "flags", "registers")
    assert (cfg.chunk_len, cfg.n_chunks) == (16, 128)
    tweaked = _forced_setting(first, 2048, dict(lookback=1))
    assert (tweaked.block_b, tweaked.steps, tweaked.lookback, tweaked.link, tweaked.step_scan) == (
        64, 32, 1, "words", "shuffles")
    scan = _forced_setting(Config("scan", 16, 4, block_t=256, n_chunks=8), 4096, dict(kind="scan", block_t=128))
    assert (scan.block_b, scan.num_warps, scan.block_t, scan.n_chunks) == (16, 4, 128, 8)


def test_gpu_heuristic_by_shape():
    """The measured rules of the shipped table (core/_triton/tables/h200.json), on an H200's 132 SMs."""
    from rlscan._triton.launch import _gpu_config, _gpu_configs

    sequential = lambda cfg: cfg.kind == "stripe" and cfg.stripes == 1 and cfg.steps == 1  # noqa: E731
    assert sequential(_gpu_config(8, 65536, False, 132))
    for T in (16, 128, 2048):
        assert sequential(_gpu_config(T, 65536, False, 132))  # enough environments alone
        assert not sequential(_gpu_config(T, 16384, False, 132))
    for N, T in ((4096, 2048), (16384, 512), (8192, 1024)):
        for reverse in (True, False):
            # one pass: 64 environments per program with pairs as words (32 steps per thread for
            # kernels of at most 5 series, 16 for bigger ones), then 128 x 16 steps (at most 5
            # series), then 8, then the settings of old (chained or block)
            light, first, second, last = _gpu_configs(T, N, False, 132, reverse=reverse, series=5)
            narrow, *heavy = _gpu_configs(T, N, False, 132, reverse=reverse, series=6)
            assert (light.kind, light.block_b, light.num_warps, light.steps, light.lookback, light.link) == (
                "chained", 64, 1, 32, 1, "words")
            assert (light.chunk_len, light.n_chunks) == (32, T // 32)
            assert (narrow.kind, narrow.block_b, narrow.num_warps, narrow.steps, narrow.lookback, narrow.link) == (
                "chained", 64, 1, 16, 1, "words")
            assert tuple(heavy) == (second, last)
            assert (first.kind, first.block_b, first.num_warps, first.steps, first.lookback, first.link) == (
                "chained", 128, 1, 16, 4, "flags")
            assert (first.chunk_len, first.n_chunks) == (16, T // 16)
            assert (second.kind, second.steps, second.lookback, second.n_chunks) == ("chained", 8, 4, T // 8)
            if reverse:
                assert (last.kind, last.steps, last.lookback) == ("chained", 8, 1)
        for reverse, deterministic in ((False, False), (True, True)):
            # forward scans' last resort, and any scan under torch.use_deterministic_algorithms: two launches
            cfg = _gpu_configs(T, N, False, 132, reverse=reverse, deterministic=deterministic)[-1]
            assert (cfg.kind, cfg.block_b, cfg.num_warps, cfg.steps) == ("block", 128, 1, 4)
            assert 1024 <= math.ceil(N / 128) * cfg.n_chunks <= 2112
        assert len(_gpu_configs(T, N, False, 132, deterministic=True)) == 1
    block, tiles = _gpu_configs(16, 16384, False, 132, series=5)  # short T: all steps in one thread, else tiles
    assert (block.kind, block.steps, block.n_chunks, tiles.kind) == ("block", 16, 1, "scan")
    assert _gpu_configs(16, 16384, False, 132, series=7) == (tiles,)
    assert (tiles.block_b, tiles.num_warps, tiles.block_t) == (16, 1, 16)
    for N, T in ((64, 8), (4096, 8), (512, 16), (4096, 16)):  # short T, fewer environments: 8-wide tiles
        for series in (5, 8):
            (cfg,) = _gpu_configs(T, N, False, 132, series=series)
            assert (cfg.kind, cfg.block_b, cfg.num_warps, cfg.block_t, cfg.n_chunks) == ("scan", 8, 1, T, 1)
    assert _gpu_config(8, 16384, False, 132).kind == "stripe"  # the sequential layout from 16384 environments
    assert _gpu_config(4, 4096, False, 132).kind == "stripe"  # and below 8 steps
    for N, T in ((16, 262144), (64, 65536)):  # few environments, very long T: 256-step windows in two passes
        (cfg,) = _gpu_configs(T, N, False, 132)
        assert (cfg.kind, cfg.block_b, cfg.num_warps, cfg.stripes, cfg.steps, cfg.lookback, cfg.link) == (
            "chained_stripe", 16, 4, 16, 16, 2, "words")
        assert cfg.n_chunks == T // 256
        assert _gpu_config(T, N, False, 132, deterministic=True).kind == "scan"
    assert _gpu_config(128, 4096, False, 132).kind == "stripe"
    for T in (1, 8):  # one environment, a few steps backward in time: the sequential layout
        assert all(sequential(_gpu_config(T, 1, contiguous, 132)) for contiguous in (False, True))
        assert _gpu_config(T, 1, False, 132, reverse=False).kind == "scan"
    assert _gpu_config(16, 1, False, 132).kind == "scan"
    for T in (2**19, 1_000_000):  # one long sequence: tiles chained in one pass, else two launches of tiles
        for series, warps, block_t in ((5, 4, 2048), (6, 1, 256)):
            one_pass, tiles = _gpu_configs(T, 1, False, 132, series=series)
            assert (one_pass.kind, one_pass.num_warps, one_pass.block_t, one_pass.lookback, one_pass.link) == (
                "chained_scan", warps, block_t, 64, "words")
            assert (one_pass.chunk_len, one_pass.n_chunks) == (block_t, math.ceil(T / block_t))
            assert (tiles.kind, tiles.block_t, tiles.n_chunks > 1) == ("scan", 512, True)
        for fallback in (_gpu_configs(T, 1, False, 132, words=False), _gpu_configs(T, 1, False, 132, deterministic=True)):
            assert fallback == (tiles,)
    (shorter,) = _gpu_configs(2**18, 1, False, 132, series=5)  # the two launches were as fast as one pass there
    assert (shorter.kind, shorter.block_t, shorter.n_chunks > 1) == ("scan", 512, True)
    assert _gpu_config(2048, 4096, True, 132).block_t == 256
    for N, T in ((132, 1024), (512, 2048), (527, 4096)):  # [N, T], rows too few for 4-row tiles: one per program
        for series in (5, 8):  # forward kernels, light or heavy: the whole row in one tile, else 1024-step tiles
            row = _gpu_configs(T, N, True, 132, series=series)
            assert [(c.kind, c.block_b, c.num_warps, c.block_t, c.n_chunks) for c in row][-1] == ("scan", 1, 8, 1024, 1)
            assert (row[0].block_t, len(row)) == ((T, 2) if 1024 < T <= 2048 else (1024, 1))
        assert _gpu_configs(T, N, True, 132, series=9)[0].block_b == 4  # backward kernels keep 4-row tiles
    for N, T in ((131, 2048), (512, 512), (4096, 4096), (2048, 8192)):
        assert _gpu_configs(T, N, True, 132, series=5)[0].block_b == 4
    # [N, T] rows past 4096 steps: 1024-step tiles chained in one pass (past 65536 steps only
    # backward in time), else, and for float64, determinism or backward kernels, 4-row tiles
    for N, T, reverse in ((64, 32768, True), (512, 8192, True), (1024, 4097, False), (16, 65536, False),
                          (16, 262144, True)):
        one_pass, tiles = _gpu_configs(T, N, True, 132, reverse, series=5)
        assert (one_pass.kind, one_pass.block_b, one_pass.num_warps, one_pass.block_t, one_pass.lookback,
                one_pass.link, one_pass.n_chunks) == ("chained_scan", 1, 4, 1024, 8, "words", math.ceil(T / 1024))
        assert (tiles.kind, tiles.block_b, tiles.block_t) == ("scan", 4, 256)
        for other in (dict(words=False), dict(deterministic=True), dict(series=9)):
            assert _gpu_configs(T, N, True, 132, reverse, **{"series": 5, **other}) == (tiles,)
    assert _gpu_configs(262144, 16, True, 132, False, series=5)[0].kind == "scan"
    for N, T in ((528, 2048), (4096, 1024)):  # rows enough for 4 programs per SM: whole rows in one tile
        light, *_ = _gpu_configs(T, N, True, 132, series=5)
        heavy, tiles, *_ = _gpu_configs(T, N, True, 132, series=6)
        assert (light.kind, light.block_b, light.num_warps, light.block_t, light.n_chunks) == ("scan", 1, 8, T, 1)
        assert (heavy.kind, heavy.block_b, heavy.num_warps, heavy.block_t, heavy.n_chunks) == ("scan", 1, 16, T, 1)
        assert (tiles.block_b, tiles.block_t) == (1, 1024)
        assert _gpu_configs(T, N, True, 132, series=9)[0].block_b == 4
    assert _gpu_configs(4096, 4096, True, 132, series=6)[0].block_b == 4
    for N, T in ((640, 1024), (4095, 2048)):  # [T, N], mid-size batches, light kernels: one pass
        words, flags = _gpu_configs(T, N, False, 132, series=5)
        assert (words.kind, words.block_b, words.steps, words.link, words.n_chunks) == ("chained", 64, 32, "words",
                                                                                        T // 32)
        assert (flags.kind, flags.block_b, flags.steps, flags.lookback, flags.link) == ("chained", 128, 16, 4, "flags")
        heavy, heavy_flags = _gpu_configs(T, N, False, 132, series=6)  # 32 steps would spill: 16
        assert (heavy.kind, heavy.block_b, heavy.steps, heavy.link, heavy_flags) == ("chained", 64, 16, "words", flags)
        for other in (_gpu_configs(T, N, False, 132, series=9), _gpu_configs(T, N, False, 132, series=5,
                                                                             deterministic=True)):
            assert other[0].kind == "scan"
    assert _gpu_configs(512, 640, False, 132, series=5)[0].kind == "scan"


def test_deterministic_algorithms_key_the_launch_plans():
    """Turning torch.use_deterministic_algorithms on or off reaches the launch: plans and
    the fast path's cached calls are keyed by it (the chained layout is not deterministic)."""
    import torch

    from rlscan._triton.launch import settings_key

    before = settings_key()
    torch.use_deterministic_algorithms(True)
    try:
        assert settings_key() != before
    finally:
        torch.use_deterministic_algorithms(False)
    assert settings_key() == before


def test_plan_takes_the_first_setting_whose_kernel_does_not_spill(triton_path, monkeypatch):
    """A launch plan with several candidate settings compiles them in order and keeps the
    first whose kernel's local memory (spilled registers) is within the table's max_local_bytes; if the
    compiled kernel cannot be inspected, the last. Then it runs the one it kept."""
    from rlscan._triton import chained_scan, launch, policy, settings

    problem = make_problem("gae", (T, 3), device=triton_path.device, seed=5)
    candidates = tuple(launch._with_chunks(launch.Config("chained", 4, 1, steps=steps, lookback=lookback), T, 1)
                       for steps, lookback in ((4, 2), (2, 2), (2, 1)))
    limit = policy.value("max_local_bytes", settings.shipped())
    local_bytes = {4: limit + 4, 2: limit}
    compiled = []

    class Compiled:
        def __init__(self, steps):
            self.n_spills = local_bytes[steps] // 4

        def _init_handles(self):
            pass

    def warmup(*args, grid, **kwargs):
        compiled.append(kwargs["STEPS"])
        return Compiled(kwargs["STEPS"])

    monkeypatch.setattr(chained_scan.chained_kernel, "warmup", warmup, raising=False)
    monkeypatch.setattr(launch, "choose_configs", lambda *args, **kwargs: candidates)
    _cache.clear()
    with rlscan.use_backend("triton"):
        assert_matches_reference(problem)
        (plan,) = launch.plans()
        if interpreting():  # the interpreter compiles nothing: its plans run their first setting unchecked
            assert compiled == [] and plan.cfg == candidates[0]
            plan.unchecked = True  # as a plan on a GPU starts
            assert_matches_reference(problem)
        assert compiled == [4, 2] and plan.cfg == candidates[1] and plan.unchecked is False
        plan.unchecked = True
        monkeypatch.setattr(chained_scan.chained_kernel, "warmup", lambda *a, **k: object(), raising=False)
        assert_matches_reference(problem)
        assert plan.cfg == candidates[2]
    _cache.clear()


def test_words_link_is_float32_only(triton_path):
    """Pairs published as one 64-bit word hold two float32 values: float64 problems publish
    flagged pairs instead, with the other settings unchanged, and both match the reference."""
    import torch

    from rlscan._triton import launch

    settings = dict(KERNEL_CONFIGS["chained-words-look-back"])
    for dtype, link in ((torch.float32, "words"), (torch.float64, "flags")):
        problem = make_problem("gae", (T, 3), dtype=dtype, device=triton_path.device, seed=6)
        _cache.clear()
        with forced_config(**settings):
            assert_matches_reference(problem)
        (plan,) = launch.plans()
        assert (plan.cfg.kind, plan.cfg.lookback, plan.cfg.link) == ("chained", settings["lookback"], link)
    _cache.clear()


def test_words_look_back_ends_with_nan_coefficients(triton_path):
    """A NaN whose bits are all set (the word that means "not published yet") in a
    coefficient is published as the canonical NaN, so the look-back ends: NaN where the
    reference has NaN, the reference's values elsewhere."""
    import torch

    all_bits_set = torch.tensor(-1, dtype=torch.int32).view(torch.float32)
    alpha = torch.randn(T, 3, generator=torch.Generator().manual_seed(7))
    beta = torch.full((T, 3), 0.9)
    alpha[T - 2, 1] = beta[T - 2, 1] = all_bits_set  # the block holding it would publish the word -1
    with forced_config(**KERNEL_CONFIGS["chained-words-look-back"]):
        got = rlscan.linear_scan(alpha.to(triton_path.device), beta.to(triton_path.device), reverse=True)
    want = rlscan.reference.linear_scan(alpha.double(), beta.double(), reverse=True)
    torch.testing.assert_close(got.cpu().double(), want, equal_nan=True, rtol=1e-5, atol=1e-6)


def test_which_emit_steps_read_the_state_carried_in():
    """Only an op whose emit step reads ``A_in`` pays for taking it (:func:`launch.state_in`)."""
    from rlscan._triton.launch import reads_state_in
    from rlscan.ops._value_backward import kernel as value_backward
    from rlscan.ops.gae import kernel as gae
    from rlscan.ops.vtrace import kernel as vtrace

    assert not reads_state_in(gae.emit)
    assert reads_state_in(vtrace.emit)
    assert reads_state_in(value_backward.gae_emit)  # it passes A_in on


@pytest.mark.parametrize("dtype, way", [("float32", "reload"), ("float16", "exclusive"), ("float64", "reload")])
def test_the_state_carried_in_is_read_back_from_an_output_of_the_compute_dtype(triton_path, dtype, way, monkeypatch):
    """V-trace's tiles across warps store the state in their first output and read it back
    one step on, where that output holds the compute dtype; float16 outputs would round it,
    so there the exclusive scan gives it. Single warps gather it."""
    import torch

    from rlscan import _cache
    from rlscan._triton import launch, policy

    monkeypatch.setitem(policy.FORCED, "state_in_steps_per_warp", 1)
    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    problem = make_problem("vtrace", (T, 3), dtype=getattr(torch, dtype), device=triton_path.device, seed=8)
    for warps, want in ((2, way), (1, "gather")):
        _cache.clear()
        with forced_config(**dict(CONFIGS["scan-one-tile"], num_warps=warps)):
            assert_matches_reference(problem)
        assert [plan.constexprs["STATE_IN"] for plan in launch.plans()] == [want]


@pytest.mark.parametrize("config, one_tile", [("scan-one-tile", True), ("scan-tiles", False), ("scan-chunks", False)])
def test_a_tile_that_holds_every_step_runs_without_the_loop(triton_path, config, one_tile, monkeypatch):
    from rlscan import _cache
    from rlscan._triton import launch

    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    with forced_config(**CONFIGS[config]):
        assert_matches_reference(_problem("gae", "time-last", triton_path.device, seed=4))
    assert [plan.constexprs["ONE_TILE"] for plan in launch.plans()] == [one_tile]


@pytest.mark.parametrize("op, way", [("gae", None), ("retrace", None), ("vtrace", "gather"), ("vtrace", "exclusive"),
                                     ("vtrace", "reload")])
@pytest.mark.parametrize("config", ["scan-one-tile", "scan-tiles", "scan-chunks"])
def test_flipped_tiles(triton_path, op, way, config, monkeypatch):
    """A reverse scan kernel whose tiles run back in time along their first axis (``FLIP``,
    where the table's ``flip_max_block_t`` holds the tile) gives the reference's results, on
    one tile, over several (a partial one), in chunks, and whichever way its emit takes the
    state carried in; the policy's value decides which tiles are flipped."""
    from rlscan import _cache
    from rlscan._triton import launch, policy

    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    monkeypatch.setattr(launch, "FORCE_STATE_IN", way)
    problem = _problem(op, "time-last", triton_path.device, seed=5)
    for limit, flipped in ((4096, True), (0, False)):
        _cache.clear()
        monkeypatch.setitem(policy.FORCED, "flip_max_block_t", limit)
        with forced_config(**CONFIGS[config]):
            assert_matches_reference(problem)
        assert {plan.constexprs["FLIP"] for plan in launch.plans()} == {flipped}
