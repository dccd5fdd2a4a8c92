"""Property-based fuzzing: every op on both paths against its float64 reference, over
random lengths, batch shapes (empty ones too), time_dim, memory layouts, dtypes, flag
patterns, γ, λ, β and clips; on the Triton path also over the kernel's launch settings
(kernel, tile sizes, chunks, ``exact``).

The ``ci`` hypothesis profile (the default) bounds the examples; for a long run::

    TRITON_INTERPRET=1 python -m pytest tests/test_fuzz.py --hypothesis-profile=long

The number of examples each test ran is printed at the end of the session.
"""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlscan
from rlscan._triton.launch import forced_config
from rlscan_testing import (
    FLOAT_DTYPES, OP_NAMES, OPS, assert_matches_reference, count_example, make_problem, path_for,
)

# The interpreter costs about 50 µs per element and kernel call: keep its problems small.
LIMITS = {"cpu": dict(max_T=300, max_envs=24), "triton": dict(max_T=40, max_envs=6)}
# Share of the profile's examples per test: the interpreter's examples cost more.
SHARE = {"cpu": 1.0, "triton": 0.5}

FLAG_PATTERNS = [None, "none", "random", "all", "alternate", "first", "middle", "last"]
UNIT = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0.0, 1.0))
CLIP = st.one_of(st.sampled_from([0.0, 1.0, math.inf]), st.floats(0.0, 3.0))


@st.composite
def batch_shapes(draw, max_envs):
    """0 to 3 batch dimensions of 0 to 4 environments each, at most ``max_envs`` in all."""
    dims = draw(st.lists(st.integers(0, 4), max_size=3))
    while math.prod(dims) > max_envs:
        dims[dims.index(max(dims))] -= 1
    return tuple(dims)


@st.composite
def problems(draw, op, backend):
    limits = LIMITS[backend]
    T = draw(st.integers(1, limits["max_T"]))
    batch = draw(batch_shapes(limits["max_envs"]))
    at = draw(st.integers(0, len(batch)))
    shape = batch[:at] + (T,) + batch[at:]
    time_dim = at - len(shape) if draw(st.booleans()) else at
    info = OPS[op]
    values = None
    if info.reverse_value_op:
        values = draw(st.sampled_from(["bootstrap", "next"] + (["none"] if info.bootstrap == "optional" else [])))
    terminated = draw(st.sampled_from(FLAG_PATTERNS))
    truncated = draw(st.sampled_from(FLAG_PATTERNS + ["same"])) if values == "next" else None
    coef = st.one_of(UNIT, st.sampled_from(["tensor", "per_step", "scalar_tensor"]))
    problem = make_problem(
        op, shape, time_dim=time_dim,
        dtype=draw(st.sampled_from(FLOAT_DTYPES)),
        seed=draw(st.integers(0, 2**31 - 1)),
        values=values,
        terminated=terminated,
        truncated=None if truncated == "same" else truncated,
        flag_dtype=draw(st.sampled_from([torch.bool, torch.uint8, torch.float32])),
        expand_flags=draw(st.booleans()),
        gamma=draw(coef), lmbda=draw(coef),
        beta=draw(st.one_of(st.just("tensor"), st.floats(-1.0, 1.0))),
        clips=tuple(draw(CLIP) for _ in range(3)),
        initial=draw(st.booleans()),
        layout=draw(st.sampled_from(["contiguous", "transposed", "sliced"])),
        device=path_for(backend).device,
    )
    if truncated == "same" and problem.kwargs.get("terminated") is not None:
        # terminated and truncated at the very same steps: termination wins
        problem.kwargs["truncated"] = problem.kwargs["terminated"].clone()
    return problem


def _examples(backend: str) -> int:
    return max(5, int(settings.default.max_examples * SHARE[backend]))


# Interpreter work per example, in (program x time tile) units: about 10 ms each.
LAUNCH_BUDGET = 40


@st.composite
def launch_settings(draw, problem):
    """On the Triton path: the default launch, ``exact``, or random tile sizes for the
    scan, stripe, block or chained kernels, chunked or not, grown until the example stays cheap."""
    kind = draw(st.sampled_from(["default", "exact", "scan", "stripe", "block", "chained", "chained_stripe",
                                 "chained_scan"]))
    if kind in ("default", "exact"):
        return kind
    T = problem.args[0].shape[problem.kwargs["time_dim"]]
    envs = max(1, problem.args[0].numel() // T)
    block_b = draw(st.sampled_from([2, 8]))
    n_chunks = draw(st.integers(1, 3))
    if kind in ("scan", "chained_scan"):
        config = dict(kind=kind, block_b=block_b, n_chunks=n_chunks, block_t=draw(st.sampled_from([1, 2, 4, 8])))
    elif kind in ("stripe", "chained_stripe"):
        config = dict(kind=kind, block_b=block_b, n_chunks=n_chunks, stripes=draw(st.sampled_from([1, 2, 4])),
                      steps=draw(st.sampled_from([1, 2, 3, 5])))
    else:  # the block and chained kernels' steps are a tile axis: a power of two
        config = dict(kind=kind, block_b=block_b, n_chunks=n_chunks, stripes=draw(st.sampled_from([1, 2, 4])),
                      steps=draw(st.sampled_from([1, 2, 4])))
    if kind in ("chained", "chained_stripe", "chained_scan"):
        config["test_lookback"] = draw(st.booleans())
        config["link"] = draw(st.sampled_from(["flags", "words"]))
        config["lookback"] = draw(st.sampled_from([1, 2, 4, 8]))
    while _cost(config, T, envs) > LAUNCH_BUDGET:
        config["block_t" if kind in ("scan", "chained_scan") else "stripes"] *= 2
    return config


def _cost(config, T, envs):
    programs = math.ceil(envs / config["block_b"]) * (2 if config["n_chunks"] > 1 else 1)
    if config["kind"] in ("scan", "chained_scan"):
        return programs * math.ceil(T / config["block_t"])
    if config["kind"] in ("block", "chained"):
        return programs * math.ceil(T / (config["stripes"] * config["steps"]))
    return programs * 2 * math.ceil(T / config["stripes"])


def _check(problem, launch):
    if any(n == 0 for n in problem.args[0].shape):
        outs = problem.run()
        assert all(tuple(o.shape) == tuple(problem.args[0].shape) for o in outs)
    elif launch == "exact":
        assert_matches_reference(problem, exact=True)
    elif launch == "default":
        assert_matches_reference(problem)
    else:
        with forced_config(**launch):
            assert_matches_reference(problem)


def _fuzz_test(backend):
    @pytest.mark.parametrize("op", OP_NAMES)
    @settings(max_examples=_examples(backend))
    @given(data=st.data())
    def test(op, data):
        problem = data.draw(problems(op, backend), label="problem")
        launch = data.draw(launch_settings(problem), label="launch") if backend == "triton" else "default"
        with rlscan.use_backend(backend):
            _check(problem, launch)
        count_example(f"test_fuzz.py::test_fuzz_{backend}[{op}]")

    test.__name__ = f"test_fuzz_{backend}"
    test.__doc__ = f"Every op on the {backend} path agrees with its float64 reference."
    return test


test_fuzz_cpu = _fuzz_test("cpu")
test_fuzz_triton = _fuzz_test("triton")
