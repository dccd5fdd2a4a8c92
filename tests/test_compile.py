"""Every op under ``torch.compile(fullgraph=True)``: no graph break, the eager values, and
gradients through the compiled graph (issue #5). On a machine without a GPU the ``triton``
path runs the real kernels through the interpreter inside the custom op."""
import pytest
import torch

import rlscan

from rlscan_testing import call_inputs, call_of, registered

T, N = 9, 3


def _inputs(device, dtype=torch.float64):
    d = call_inputs(T, N, device, dtype)
    d["r"] = d["series"][0]  # the first positional input, which the tests differentiate
    return d


# every registered op and variant; the ops that take a value after each step alternate between
# bootstrap_value and next_values with truncations, so both reach a compiled graph
OPS = {name: call_of(info, "next" if k % 2 == 0 else "bootstrap")
       for k, (name, info) in enumerate(registered(tables=True).items())}


def _flat(out):
    return tuple(out) if isinstance(out, tuple) else (out,)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("op", OPS)
def test_compiled_forward_matches_eager(op, path):
    d = _inputs(path.device)
    compiled = torch.compile(lambda r: OPS[op](d, r), fullgraph=True, backend="eager")
    for got, want in zip(_flat(compiled(d["r"])), _flat(OPS[op](d, d["r"]))):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("op", OPS)
def test_compiled_gradients_match_eager(op, path):
    d = _inputs(path.device)
    weights = [torch.randn_like(o) for o in _flat(OPS[op](d, d["r"]))]

    def loss(r):
        return sum((o * w).sum() for o, w in zip(_flat(OPS[op](d, r)), weights))

    r1 = d["r"].clone().requires_grad_()
    r2 = d["r"].clone().requires_grad_()
    torch.compile(loss, fullgraph=True, backend="aot_eager")(r1).backward()  # AOTAutograd traces the backward
    loss(r2).backward()
    torch.testing.assert_close(r1.grad, r2.grad, rtol=1e-12, atol=1e-12)


def test_compiled_with_inductor():
    """One op through the default backend (inductor), to cover the real compiler pipeline."""
    d = _inputs("cpu", torch.float32)
    with rlscan.use_backend("cpu"):
        compiled = torch.compile(lambda r: OPS["gae"](d, r), fullgraph=True)
        for got, want in zip(_flat(compiled(d["r"])), _flat(OPS["gae"](d, d["r"]))):
            torch.testing.assert_close(got, want)


def test_leanrl_pattern_compiles_to_the_loop():
    """LeanRL's pattern (docs/adapters/cleanrl.md): a ``gae`` that calls
    ``rlscan.adapters.cleanrl.gae`` compiles with ``fullgraph=True`` through inductor and
    gives LeanRL's loop, in its semantics (``dones[t]``: ``obs[t]`` started an episode).
    ``rlscan bench --host`` wraps the same function in ``CudaGraphModule`` on a GPU."""
    from rlscan.bench.host import _leanrl_loop, _leanrl_rlscan

    gen = torch.Generator().manual_seed(0)
    r, v = torch.randn(32, 6, generator=gen), torch.randn(32, 6, generator=gen)
    dones, next_done = torch.rand(32, 6, generator=gen) < 0.2, torch.tensor([True, False] * 3)
    next_value = torch.randn(6, generator=gen)
    with rlscan.use_backend("cpu"):
        got = torch.compile(_leanrl_rlscan, fullgraph=True)(r, v, dones, next_value, next_done)
    want = _leanrl_loop(r.double(), v.double(), dones, next_value.double(), next_done)
    assert dones[1:].any() and (~next_done).any()
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)
