"""Every op under ``torch.compile(fullgraph=True)``: no graph break, the eager values, and
gradients through the compiled graph (issue #5). On a machine without a GPU the ``triton``
path runs the real kernels through the interpreter inside the custom op."""
import pytest
import torch

import rlscan

T, N, A = 9, 3, 4


def _inputs(device, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)

    def s(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    flags = (torch.rand(T, N, generator=g) < 0.25).to(device)
    return dict(r=s(T, N), v=s(T, N), nv=s(T, N), lr=s(T, N) * 0.3, boot=s(N), term=flags,
                trunc=flags.roll(3, 0) & ~flags, b=torch.rand(T, N, generator=g, dtype=dtype).to(device),
                q=s(T, N, A), probs=torch.softmax(s(T, N, A), -1), act=torch.randint(0, A, (T, N), generator=g).to(device))


OPS = {
    "gae": lambda d, r: rlscan.gae(r, d["v"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"]),
    "td_lambda": lambda d, r: rlscan.td_lambda(r, d["v"], bootstrap_value=d["boot"], terminated=d["term"]),
    "discounted_returns": lambda d, r: rlscan.discounted_returns(r, bootstrap_value=d["boot"], terminated=d["term"]),
    "vtrace": lambda d, r: rlscan.vtrace(r, d["v"], d["lr"], next_values=d["nv"], terminated=d["term"],
                                         truncated=d["trunc"], lmbda=0.9),
    "retrace": lambda d, r: rlscan.retrace(r, d["v"], d["nv"], d["lr"], bootstrap_value=d["boot"], terminated=d["term"]),
    "retrace_from_q": lambda d, r: rlscan.retrace_from_q(r, d["q"], d["act"], d["probs"], d["lr"],
                                                         bootstrap_value=d["boot"], terminated=d["term"]),
    "eligibility_traces": lambda d, r: rlscan.eligibility_traces(r, dones=d["term"], gamma=0.9, lmbda=0.8,
                                                                 initial=d["boot"]),
    "episodic_cumsum": lambda d, r: rlscan.episodic_cumsum(r, dones=d["term"], initial=d["boot"]),
    "linear_scan": lambda d, r: rlscan.linear_scan(r, d["b"], initial=d["boot"]),
    "linear_scan_reverse": lambda d, r: rlscan.linear_scan(r, d["b"], reverse=True, initial=d["boot"]),
}


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
