"""``retrace_from_q`` on the Triton path: the prologue that reads the action tables once in
memory order (time fastest for ``[N, T]``, environments fastest for ``[T, N]``, two batch
groups), then plain Retrace under several launch settings, and the fused ``exact`` kernel;
one action, and more than one block of them (the table's ``retrace_max_block_a``), with and without
``next_expected_q``."""
import pytest
import torch

import rlscan
from rlscan import _cache, reference
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
    _cache.clear()
    with rlscan.use_backend("triton"), forced_config(**(CONFIGS[config] or {})):
        got = rlscan.retrace_from_q(*map(moved, args.values()), exact=exact,
                                    **{k: moved(v) for k, v in kwargs.items()})
        plans = list(launch.plans())
    assert any(isinstance(p, TablePlan) for p in plans) != exact  # the prologue ran, except for exact
    for g, w in zip(got, want):
        assert_close(g.cpu(), torch.as_tensor(w), torch.float64, f"{config} A={A}")


def _moved(x, device):
    """``x`` on ``device`` with the same strides (``Tensor.to`` makes a view with gaps contiguous)."""
    if not isinstance(x, torch.Tensor):
        return x
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device).copy_(x)


def _run(args, kwargs):
    device = path_for("triton").device
    moved = lambda x: _moved(x, device)  # noqa: E731
    _cache.clear()
    _cache.clear()  # a plan is made, not replayed from an earlier test's call
    with rlscan.use_backend("triton"):
        got = rlscan.retrace_from_q(*map(moved, args.values()), **{k: moved(v) for k, v in kwargs.items()})
        plans = [p for p in launch.plans() if isinstance(p, TablePlan)]
    assert len(plans) == 1
    return got, plans[0].constexprs["FLAT_A"]


@pytest.mark.parametrize("A", [1, 4, 18])
@pytest.mark.parametrize("time_dim", [0, 1, 2], ids=["time-first", "time-last", "two-groups"])
def test_flat_tables_take_the_vector_path(A, time_dim):
    """Contiguous inputs: the prologue reads the tables as rows of ``A`` consecutive values
    (``FLAT_A = A``), and its numbers are the reference's."""
    args, kwargs = _problem(9, 3, A, time_dim, "bootstrap", seed=A + time_dim)
    want = reference.retrace_from_q(*args.values(), **kwargs)
    got, flat = _run(args, kwargs)
    assert flat == A
    for g, w in zip(got, want):
        assert_close(g.cpu(), torch.as_tensor(w), torch.float64, f"A={A}")


def _strided(x, how):
    """``x`` as a view of the same values laid out otherwise in memory."""
    if how == "actions-first":  # the action axis slowest
        return x.movedim(-1, 0).contiguous().movedim(0, -1)
    if how == "padded":  # every row of actions inside a wider row
        wide = torch.zeros(x.shape[:-1] + (x.shape[-1] + 3,), dtype=x.dtype)
        wide[..., 1:x.shape[-1] + 1] = x
        return wide[..., 1:x.shape[-1] + 1]
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["actions-first", "padded", "series"])
@pytest.mark.parametrize("time_dim", [0, 1], ids=["time-first", "time-last"])
def test_strided_inputs_take_the_general_path(how, time_dim):
    """Tables not in rows of consecutive actions, or a series out of memory order: the
    general prologue (``FLAT_A = 0``), with the same numbers."""
    args, kwargs = _problem(9, 3, 4, time_dim, "bootstrap", seed=11 + time_dim)
    if how == "series":
        args["behaviour_log_probs"] = args["behaviour_log_probs"].t().contiguous().t()
    else:
        args["q_values"], args["target_probs"] = _strided(args["q_values"], how), _strided(args["target_probs"], how)
    want = reference.retrace_from_q(*args.values(), **kwargs)
    got, flat = _run(args, kwargs)
    assert flat == 0
    for g, w in zip(got, want):
        assert_close(g.cpu(), torch.as_tensor(w), torch.float64, how)


@pytest.mark.parametrize("out_dtype", [None, torch.float16])
@pytest.mark.parametrize("time_dim", [0, 1], ids=["time-first", "time-last"])
def test_repeat_calls_give_the_first_calls_numbers(out_dtype, time_dim):
    """Later calls of a signature (on a GPU: the three scratch series in one allocation, passed
    by address) give the first call's numbers, also where the outputs are narrower than the
    scratch (float32 inputs; Triton's interpreter rounds float64 to bfloat16 wrongly)."""
    args, kwargs = _problem(40, 5, 4, time_dim, "bootstrap", seed=3 + time_dim)
    single = lambda x: x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
    args, kwargs = ({k: single(x) for k, x in d.items()} for d in (args, kwargs))
    device = path_for("triton").device
    moved = {k: _moved(x, device) for k, x in args.items()}
    kw = {k: _moved(x, device) for k, x in kwargs.items()}
    _cache.clear()
    with rlscan.use_backend("triton"):
        first = rlscan.retrace_from_q(*moved.values(), out_dtype=out_dtype, **kw)
        for _ in range(3):
            again = rlscan.retrace_from_q(*moved.values(), out_dtype=out_dtype, **kw)
    for a, b in zip(first, again):
        assert a.dtype == (out_dtype or torch.float32) and torch.equal(a, b)
