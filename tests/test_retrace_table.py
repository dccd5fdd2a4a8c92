"""``retrace_from_q`` on the Triton path: the prologue that reads the action tables once in
memory order (time fastest for ``[N, T]``, environments fastest for ``[T, N]``, two batch
groups), then plain Retrace under several launch settings, and the fused ``exact`` kernel;
one action, and more than one block of them (``MAX_BLOCK_A``), with and without
``next_expected_q``."""
import pytest
import torch

import rlscan
from rlscan import reference
from rlscan._triton import launch
from rlscan._triton.launch import forced_config
from rlscan.ops.retrace.table import TablePlan
from rlscan_testing import KERNEL_CONFIGS, assert_close, path_for

CONFIGS = {"heuristic": {}, "scan-chunks": KERNEL_CONFIGS["scan-chunks"], "exact": None}


def _problem(T, N, A, time_dim, values, seed):
    gen = torch.Generator().manual_seed(seed)
    shape = {0: (T, N), 1: (N, T), 2: (2, T, N)}[time_dim]
    time_dim = min(time_dim, 1)
    probs = torch.softmax(torch.randn(shape + (A,), generator=gen, dtype=torch.float64), -1)
    args = dict(rewards=torch.randn(shape, generator=gen, dtype=torch.float64),
                q_values=torch.randn(shape + (A,), generator=gen, dtype=torch.float64),
                actions=torch.randint(0, A, shape, generator=gen), target_probs=probs,
                behaviour_log_probs=-torch.rand(shape, generator=gen, dtype=torch.float64))
    kwargs = dict(terminated=torch.rand(shape, generator=gen) < 0.2, time_dim=time_dim, gamma=0.9, lmbda=0.8,
                  c_clip=1.1)
    if values == "next":
        kwargs.update(next_expected_q=torch.randn(shape, generator=gen, dtype=torch.float64),
                      truncated=torch.rand(shape, generator=gen) < 0.2)
    else:
        kwargs["bootstrap_value"] = torch.randn(shape[:time_dim] + shape[time_dim + 1:], generator=gen,
                                                dtype=torch.float64)
    return args, kwargs


@pytest.mark.parametrize("config, A", [(c, A) for c in CONFIGS for A in (1, 6)] + [("heuristic", 70)])
@pytest.mark.parametrize("time_dim", [0, 1, 2], ids=["time-first", "time-last", "two-groups"])
def test_retrace_from_q_paths(config, A, time_dim):
    device = path_for("triton").device
    values = "next" if A == 6 else "bootstrap"
    args, kwargs = _problem(11, 3, A, time_dim, values, seed=A + 7 * time_dim + len(config))
    want = reference.retrace_from_q(*args.values(), **kwargs)
    moved = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
    exact = CONFIGS[config] is None
    launch._PLANS.clear()
    with rlscan.use_backend("triton"), forced_config(**(CONFIGS[config] or {})):
        got = rlscan.retrace_from_q(*map(moved, args.values()), exact=exact,
                                    **{k: moved(v) for k, v in kwargs.items()})
        plans = list(launch._PLANS.values())
    assert any(isinstance(p, TablePlan) for p in plans) != exact  # the prologue ran, except for exact
    for g, w in zip(got, want):
        assert_close(g.cpu(), torch.as_tensor(w), torch.float64, f"{config} A={A}")
