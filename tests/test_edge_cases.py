"""Empty inputs return empty outputs; NaN and infinity propagate as the loop propagates
them (never hidden), on both paths and through the chunked kernels."""
import numpy as np
import pytest
import torch

import rlscan
from rlscan._triton.launch import forced_config
from rlscan_testing import OP_NAMES, VALUE_OPS, assert_matches_reference, make_problem, path_for, to_numpy


@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("shape", [(0, 3), (4, 0), (0,), (2, 0, 3)], ids=["T=0", "N=0", "T=0 1-d", "B=0 3-d"])
def test_empty(path, op, shape):
    time_dim = 1 if len(shape) == 3 else 0
    p = make_problem(op, shape, time_dim=time_dim, dtype=torch.float64, device=path.device)
    outs = p.run()
    assert all(o.shape == torch.Size(shape) and o.dtype == torch.float64 for o in outs)


def test_empty_numpy(path):
    if path.device.type != "cpu":
        pytest.skip("numpy arrays live on the CPU")
    outs = to_numpy(make_problem("vtrace", (0, 3))).run()
    assert all(isinstance(o, np.ndarray) and o.shape == (0, 3) and o.dtype == np.float32 for o in outs)


def test_empty_keeps_autograd(path):
    r = torch.zeros(0, 3, requires_grad=True, device=path.device)
    adv = rlscan.gae(r, torch.zeros(0, 3, device=path.device), bootstrap_value=torch.zeros(3, device=path.device))
    adv.advantages.sum().backward()
    assert r.grad is not None and r.grad.shape == (0, 3)


def _poison(p, name, step, env, value=float("nan")):
    x = p.arguments()[name].clone()
    x[step, env] = value
    return p.replace(**{name: x})


# numpy (the references, the interpreter) warns where inf * 0 makes the NaN the loop makes.
quiet_nan = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@quiet_nan
@pytest.mark.parametrize("op", OP_NAMES)
@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_first_input(path, op, value):
    """A non-finite reward (or x, α) reaches exactly the steps the loop lets it reach."""
    p = make_problem(op, (9, 3), seed=51, device=path.device)
    name = p.info.series[0]
    p = _poison(p, name, 4, 1, value)
    outs = assert_matches_reference(p)
    assert not torch.isfinite(outs[0][4, 1])


@pytest.mark.parametrize("op", VALUE_OPS)
def test_nan_value_after_termination_still_propagates(path, op):
    """A NaN value right after a termination still reaches the terminated step (0 · NaN = NaN)."""
    p = make_problem(op, (9, 3), terminated="middle", seed=52, device=path.device)
    series = p.info.series
    name = "values" if "values" in series else "expected_q" if "expected_q" in series else None
    if name is None:  # discounted returns read values only at truncations and the edge
        p = make_problem(op, (9, 3), values="next", terminated="middle", seed=52, device=path.device)
        name = "next_values"
        p = _poison(p, name, 4, 1)
    else:
        p = _poison(p, name, 5, 1)
    outs = assert_matches_reference(p)
    assert torch.isnan(outs[0][4, 1]).item()


def test_nan_bootstrap(path):
    p = make_problem("td_lambda", (6, 3), terminated="none", seed=53, device=path.device)
    boot = p.kwargs["bootstrap_value"].clone()
    boot[2] = float("nan")
    out = assert_matches_reference(p.replace(bootstrap_value=boot))[0]
    assert torch.isnan(out[:, 2]).all() and torch.isfinite(out[:, :2]).all()


@pytest.mark.parametrize("op", ["gae", "vtrace", "retrace", "episodic_cumsum", "linear_scan"])
@pytest.mark.parametrize("config", [dict(kind="scan", block_t=2, block_b=2, n_chunks=3),
                                    dict(kind="stripe", stripes=2, steps=2, block_b=2, n_chunks=2)],
                         ids=["scan-chunks", "stripe-chunks"])
def test_nan_across_chunks(op, config):
    """Through the chunked two-launch kernels, a NaN reaches the other chunks as in the loop."""
    
    triton = path_for("triton")
    p = make_problem(op, (11, 3), seed=54, device=triton.device)
    p = _poison(p, p.info.series[0], 9, 0)
    with rlscan.use_backend("triton"), forced_config(**config):
        assert_matches_reference(p)


UNBOUNDED = {  # an infinite input at step 4 that makes a β infinite: (argument, clips, the steps it reaches)
    "vtrace": ("log_rhos", dict(rho_clip=float("inf"), c_clip=float("inf"), pg_rho_clip=float("inf")), slice(0, 5)),
    "retrace": ("log_rhos", dict(c_clip=float("inf")), slice(0, 4)),  # c_4 enters β_3
    "linear_scan": ("beta", {}, slice(4, 9)),
    "linear_scan_reverse": ("beta", {}, slice(0, 5)),
}


@quiet_nan
@pytest.mark.parametrize("op", sorted(UNBOUNDED))
@pytest.mark.parametrize("exact", [False, True], ids=["fast", "exact"])
def test_unbounded_beta_gives_nan(path, op, exact):
    """Where β_t is infinite A_t is NaN, and so is every step it reaches, on every path and in the
    reference (docs/semantics.md, "Numbers"; ∞ · A had been ±∞ on one path and NaN on another)."""
    name, clips, reached = UNBOUNDED[op]
    p = make_problem(op, (9, 3), terminated="none", seed=55, device=path.device)
    p = _poison(p.replace(**clips), name, 4, 1, float("inf"))
    outs = assert_matches_reference(p, exact=exact)
    assert torch.isnan(outs[0][reached, 1]).all() and torch.isfinite(outs[0][:, 0]).all()
