"""Every Triton kernel path, forced with small shapes (``forced_config``): the scan kernel
over several tiles (partial last tile), the chunked two-launch path, the stripe kernel
(partial last window), the chunked stripe kernel, the block kernel (chunked or not), the
chained one-pass kernel (with its look-back made to compose published pairs), and the
sequential ``exact`` kernel.
Every path runs ``[T, N]``; the chunked ones also ``[N, T]`` and the two-level
``[B1, T, B2]`` layout (the interpreter is slow: the product of all would cost minutes)."""
import math

import pytest

import rlscan
from rlscan._triton.launch import choose_config, forced_config
from rlscan_testing import KERNEL_CONFIGS, OP_NAMES, VALUE_OPS, assert_matches_reference, make_problem, path_for

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
    assert (cfg.n_chunks > 1) == ("n_chunks" in CONFIGS[config] or cfg.kind == "chained")
    assert (cfg.chunk_len * (cfg.n_chunks - 1)) < T <= cfg.chunk_len * cfg.n_chunks


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("config", CONFIGS)
def test_kernel_path(triton_path, op, config):
    problem = _problem(op, "time-first", triton_path.device, seed=len(config))
    with forced_config(**CONFIGS[config]):
        assert_matches_reference(problem)


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("config", ["scan-chunks", "stripe-window-chunks", "block-chunks", "chained-look-back", "chained-window"])
@pytest.mark.parametrize("layout", ["time-last", "two-groups"])
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


def test_gpu_heuristic_by_shape():
    """The measured rules of ``_gpu_config`` (docs/perf-notes.md), on an H200's 132 SMs."""
    from rlscan._triton.launch import _gpu_config

    sequential = lambda cfg: cfg.kind == "stripe" and cfg.stripes == 1 and cfg.steps == 1  # noqa: E731
    assert sequential(_gpu_config(8, 65536, False, 132))
    for T in (16, 128, 2048):
        assert sequential(_gpu_config(T, 65536, False, 132))  # enough environments alone
        assert not sequential(_gpu_config(T, 16384, False, 132))
    for N, T in ((4096, 2048), (16384, 512), (8192, 1024)):
        cfg = _gpu_config(T, N, False, 132, reverse=True)  # one pass, one 8-step block per program
        assert (cfg.kind, cfg.block_b, cfg.num_warps, cfg.steps, cfg.chunk_len) == ("chained", 128, 1, 8, 8)
        assert cfg.n_chunks == T // 8
        for reverse, deterministic in ((False, False), (True, True)):
            # forward scans, and any scan under torch.use_deterministic_algorithms: two launches
            cfg = _gpu_config(T, N, False, 132, reverse=reverse, deterministic=deterministic)
            assert (cfg.kind, cfg.block_b, cfg.num_warps, cfg.steps) == ("block", 128, 1, 4)
            assert 1024 <= math.ceil(N / 128) * cfg.n_chunks <= 2112
    assert _gpu_config(128, 4096, False, 132).kind == "stripe"
    one_sequence = _gpu_config(1_000_000, 1, False, 132)
    assert (one_sequence.block_t, one_sequence.n_chunks > 1) == (512, True)
    assert _gpu_config(2048, 4096, True, 132).block_t == 256


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
