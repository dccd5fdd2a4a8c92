"""Every op against its float64 reference, on both paths (the CPU loop, and the Triton
kernels, through the interpreter when there is no GPU): lengths, batch shapes, layouts,
dtypes, episode ends, and the extreme values of γ and λ."""
import numpy as np
import pytest
import torch

import rlscan
from rlscan import reference
from rlscan._inputs import plan_layout
from rlscan_testing import (
    FLOAT_DTYPES, OP_NAMES, VALUE_OPS, assert_close, assert_matches_reference, make_problem, to_numpy,
)


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("T", [1, 2, 7, 40])
def test_lengths(path, op, T):
    """Odd lengths, one step, and several tiles of the default kernel (carries between them)."""
    assert_matches_reference(make_problem(op, (T, 3), seed=T, device=path.device))


@pytest.mark.parametrize("op", OP_NAMES)
def test_long_single_environment(path, op):
    """T = 129: past a power of two, with one environment (N = 1)."""
    assert_matches_reference(make_problem(op, (129, 1), seed=5, device=path.device))


@pytest.mark.parametrize("op", OP_NAMES)
def test_one_dimensional(path, op):
    """A plain ``[T]`` series: the batch shape is ``()``."""
    assert_matches_reference(make_problem(op, (9,), seed=3, device=path.device))


@pytest.mark.parametrize("op", VALUE_OPS)
@pytest.mark.parametrize("truncated", ["random", "alternate", "all"])
def test_next_values_and_truncation(path, op, truncated):
    """Per-step values after each step (required with truncation), truncations beside terminations."""
    problem = make_problem(op, (11, 3), values="next", terminated="random", truncated=truncated, seed=11,
                           device=path.device)
    assert_matches_reference(problem)


def test_discounted_returns_without_bootstrap(path):
    """Without a bootstrap the return stops at the window's edge."""
    for truncated, values in ((None, "none"), ("random", "next")):
        problem = make_problem("discounted_returns", (9, 4), values=values, truncated=truncated, seed=2,
                               device=path.device)
        assert_matches_reference(problem)


@pytest.mark.parametrize("op", VALUE_OPS)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("kind", ["terminated", "truncated", "both"])
def test_episode_end_positions(path, op, where, kind):
    """A termination, a truncation, or both at once, at the first, a middle and the last step."""
    term = where if kind in ("terminated", "both") else "none"
    trunc = where if kind in ("truncated", "both") else "none"
    problem = make_problem(op, (7, 2), values="next", terminated=term, truncated=trunc, seed=7,
                           device=path.device)
    assert_matches_reference(problem)


@pytest.mark.parametrize("op", ["eligibility_traces", "episodic_cumsum"])
@pytest.mark.parametrize("where", ["first", "middle", "last", "all", "none"])
def test_dones_positions(path, op, where):
    assert_matches_reference(make_problem(op, (7, 2), terminated=where, seed=8, device=path.device))


@pytest.mark.parametrize("op", ["gae", "td_lambda", "vtrace", "retrace", "eligibility_traces"])
@pytest.mark.parametrize("gamma, lmbda", [(0.0, 0.9), (1.0, 0.9), (0.9, 0.0), (0.9, 1.0), (1.0, 1.0), (0.0, 0.0)])
def test_extreme_gamma_lambda(path, op, gamma, lmbda):
    problem = make_problem(op, (9, 2), gamma=gamma, lmbda=lmbda, seed=4, device=path.device)
    assert_matches_reference(problem)


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_extreme_gamma_discounted_returns(path, gamma):
    assert_matches_reference(make_problem("discounted_returns", (9, 2), gamma=gamma, device=path.device))


@pytest.mark.parametrize("op", ["gae", "td_lambda", "discounted_returns", "vtrace", "retrace",
                                "eligibility_traces"])
@pytest.mark.parametrize("kind", ["tensor", "per_step", "scalar_tensor"])
def test_tensor_gamma_lambda(path, op, kind):
    """γ and λ per step and environment, per step broadcast over the batch, and as a 0-d tensor."""
    problem = make_problem(op, (8, 3), gamma=kind, lmbda=kind, values=None, truncated=None, seed=6,
                           device=path.device)
    assert_matches_reference(problem)


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_dtypes(path, op, dtype):
    """Outputs come back in the input dtype, to its rounding (half precision computes in float32)."""
    problem = make_problem(op, (10, 3), dtype=dtype, seed=9, device=path.device)
    outs = assert_matches_reference(problem)
    assert all(o.dtype == dtype for o in outs)


@pytest.mark.parametrize("op", ["gae", "vtrace", "episodic_cumsum"])
def test_out_dtype(path, op):
    """``out_dtype=float32`` keeps half-precision inputs' float32 results."""
    problem = make_problem(op, (10, 3), dtype=torch.float16, seed=9, device=path.device)
    outs = assert_matches_reference(problem, dtype=torch.float32, out_dtype=torch.float32)
    assert all(o.dtype == torch.float32 for o in outs)


def test_mixed_dtypes_promote(path):
    """float32 rewards with float64 values compute and return float64; a float16 bootstrap joins in."""
    problem = make_problem("gae", (10, 3), seed=1, device=path.device)
    values = problem.args[1].double()
    problem = problem.replace(values=values, bootstrap_value=problem.kwargs["bootstrap_value"].half())
    outs = assert_matches_reference(problem, dtype=torch.float64)
    assert all(o.dtype == torch.float64 for o in outs)


@pytest.mark.parametrize("flag_dtype", [torch.bool, torch.uint8, torch.float32, torch.float64])
def test_flag_dtypes(path, flag_dtype):
    gae = make_problem("gae", (9, 3), values="next", truncated="random", flag_dtype=flag_dtype, device=path.device)
    assert_matches_reference(gae)
    assert_matches_reference(make_problem("episodic_cumsum", (9, 3), flag_dtype=flag_dtype, device=path.device))


# ----------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("time_dim", [1, -1])
def test_time_last(path, op, time_dim):
    """``[N, T]`` with time_dim=1 or -1 (contiguous along time)."""
    assert_matches_reference(make_problem(op, (3, 9), time_dim=time_dim, seed=12, device=path.device))


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("layout", ["transposed", "sliced"])
def test_strided_views(path, op, layout):
    """Transposed and sliced views are read in place."""
    problem = make_problem(op, (9, 3), layout=layout, seed=13, device=path.device)
    assert_matches_reference(problem)
    problem = make_problem(op, (3, 9), time_dim=1, layout=layout, seed=14, device=path.device)
    assert_matches_reference(problem)


@pytest.mark.parametrize("op", ["gae", "vtrace", "retrace", "eligibility_traces", "episodic_cumsum"])
def test_expanded_flags(path, op):
    """Flags broadcast over the batch (zero strides)."""
    problem = make_problem(op, (9, 4), values="next" if op in VALUE_OPS else None,
                           truncated="random" if op in VALUE_OPS else None, expand_flags=True, seed=15,
                           device=path.device)
    assert problem.kwargs.get("terminated", problem.kwargs.get("dones")).stride()[1] == 0
    assert_matches_reference(problem)


@pytest.mark.parametrize("op", OP_NAMES)
def test_torchrl_layout(path, op):
    """TorchRL's ``[B, T, 1]`` with time_dim=-2."""
    assert_matches_reference(make_problem(op, (3, 8, 1), time_dim=-2, seed=16, device=path.device))


@pytest.mark.parametrize("op", OP_NAMES)
def test_two_batch_groups(path, op):
    """``[B1, T, B2]``: the batch falls into two strided groups around time."""
    problem = make_problem(op, (2, 7, 3), time_dim=1, seed=17, device=path.device)
    assert _layout(problem).two_level
    assert_matches_reference(problem)


@pytest.mark.parametrize("op", ["gae", "vtrace", "retrace", "eligibility_traces", "linear_scan_reverse"])
def test_many_batch_groups(path, op):
    """A sliced ``[B1, T, B2, B3]`` whose batch dimensions fall into three strided groups."""
    problem = make_problem(op, (2, 5, 2, 3), time_dim=1, layout="sliced", seed=18, device=path.device)
    assert _layout(problem) is None  # more than two groups: the call is split
    assert_matches_reference(problem)


def _layout(problem):
    """How rlscan maps the problem's inputs onto its ``[T, B]`` grid (None: not in one launch)."""
    tensors = [x for x in problem.arguments().values() if isinstance(x, torch.Tensor) and x.dim() > 0]
    anchor = problem.args[0]
    full = [x for x in tensors if x.shape == anchor.shape]
    batch = [x for x in tensors if x.shape != anchor.shape]
    return plan_layout(anchor.shape, problem.kwargs["time_dim"] % anchor.dim(), full, batch)


@pytest.mark.parametrize("op", ["gae", "vtrace", "retrace", "eligibility_traces", "linear_scan"])
def test_numpy_in_numpy_out(path, op):
    if path.device.type != "cpu":
        pytest.skip("numpy arrays live on the CPU")
    problem = to_numpy(make_problem(op, (8, 3), values="next" if op in VALUE_OPS else None,
                                    truncated="random" if op in VALUE_OPS else None, seed=19))
    outs = assert_matches_reference(problem)
    assert all(isinstance(o, np.ndarray) and o.dtype == np.float32 for o in outs)


@pytest.mark.parametrize("op", OP_NAMES)
def test_out_argument(path, op):
    """``out=`` fills the given tensors (any layout) and returns them."""
    problem = make_problem(op, (9, 3), seed=20, device=path.device)
    n = len(problem.reference())
    given = tuple(torch.full((3, 9), float("nan"), device=path.device).t() for _ in range(n))
    outs = assert_matches_reference(problem, out=given if n > 1 else given[0])
    assert all(o is g for o, g in zip(outs, given))


# ----------------------------------------------------------------------------- the linear scan


@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_scalar_beta(path, reverse):
    op = "linear_scan_reverse" if reverse else "linear_scan"
    for beta in (0.0, 0.5, 1.0, -0.75):
        assert_matches_reference(make_problem(op, (9, 3), beta=beta, device=path.device))


@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_growing_beta(path, reverse):
    """|β| > 1 is allowed: the recurrence grows, the kernels still agree with the loop."""
    alpha = torch.randn(12, 2, dtype=torch.float64, device=path.device)
    beta = torch.full((12, 2), 1.5, dtype=torch.float64, device=path.device)
    out = rlscan.linear_scan(alpha, beta, reverse=reverse)
    assert_close(out, reference.linear_scan(alpha, beta, reverse=reverse), torch.float64)


@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_written_out(path, reverse):
    """A hand-checkable case: α = 1, β = 1/2 gives 1, 1.5, 1.75, ... in scan order."""
    alpha = torch.ones(4, 1, device=path.device)
    out = rlscan.linear_scan(alpha, 0.5, reverse=reverse).cpu().flatten()
    expected = torch.tensor([1.0, 1.5, 1.75, 1.875])
    torch.testing.assert_close(out, expected.flip(0) if reverse else expected)
