"""``rlscan.gae(..., value_lmbda=)``: the advantages with ``λ``, the returns with ``λ_value``
(VAPO's decoupled λ). Each output must be the single-λ op's: bit for bit where that call is
exact (the CPU path, ``exact=True``), else within the dtype's tolerance of the float64
reference; the CPU row loop must run both in one pass; gradients flow; a bad ``value_lmbda``
is refused by name."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlscan
from rlscan.ops.gae import dual
from rlscan_testing import assert_close, bitwise_equal, count_example, documented, path_for, place


def _problem(seed, shape, time_dim, dtype, layout, masked, terminated, bootstrap, device):
    g = torch.Generator().manual_seed(seed)
    rewards = place(torch.randn(shape, generator=g).to(dtype), layout).to(device)
    values = place(torch.randn(shape, generator=g).to(dtype), layout).to(device)
    batch = shape[:time_dim] + shape[time_dim + 1:]
    kwargs = {"time_dim": time_dim}
    if masked:
        kwargs["mask"] = place(torch.rand(shape, generator=g) < 0.7, layout).to(device)
    if terminated:
        kwargs["terminated"] = place(torch.rand(shape, generator=g) < 0.2, layout).to(device)
    if bootstrap or not masked:
        kwargs["bootstrap_value"] = torch.randn(batch, generator=g).to(dtype).to(device)
    return (rewards, values), kwargs


def _coef(kind, value, shape, time_dim, seed, dtype, device):
    if kind == "float":
        return value
    g = torch.Generator().manual_seed(seed)
    if kind == "per token":
        return (0.5 + 0.5 * torch.rand(shape, generator=g)).to(dtype).to(device)
    # per sample: one value per row, broadcast along time
    sample = tuple(1 if d == time_dim else n for d, n in enumerate(shape))
    return (0.5 + 0.5 * torch.rand(sample, generator=g)).to(dtype).to(device)


@pytest.mark.parametrize("backend", ["cpu", "triton"])
@given(data=st.data())
@settings(max_examples=10)
def test_each_output_is_the_single_lambda_ops(backend, data):
    """``advantages`` = ``gae(lmbda=λ).advantages``, ``returns`` = ``gae(lmbda=λ_value).returns``."""
    count_example("test_each_output_is_the_single_lambda_ops")
    path = path_for(backend)
    with rlscan.use_backend(path.backend):
        _check_single_lambda_outputs(path, data)


def _check_single_lambda_outputs(path, data):
    ndim = data.draw(st.sampled_from([2, 2, 3]), "ndim")
    T = data.draw(st.integers(1, 16), "T")
    B = data.draw(st.integers(1, 6), "B")
    time_dim = data.draw(st.sampled_from([0, 1] if ndim == 2 else [0, 1, 2]), "time_dim")
    shape = [B] * ndim
    shape[time_dim] = T
    if ndim == 3:
        shape[(time_dim + 1) % 3] = 2
    shape = tuple(shape)
    dtype = data.draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]), "dtype")
    layout = data.draw(st.sampled_from(["contiguous", "transposed", "sliced"]), "layout")
    masked = data.draw(st.booleans(), "masked")
    whiten = masked and data.draw(st.booleans(), "whiten") and B * T >= 4
    exact = data.draw(st.booleans(), "exact")
    lmbda = data.draw(st.sampled_from([0.95, 0.5, 0.0, 1.0]), "lmbda")
    value_lmbda = data.draw(st.sampled_from([1.0, 0.9, 0.0]), "value_lmbda")
    kind = data.draw(st.sampled_from(["float", "float", "per sample", "per token"]), "value_lmbda kind")
    coef_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    value_lmbda = _coef(kind, value_lmbda, shape, time_dim, 3, coef_dtype, path.device)
    args, kwargs = _problem(data.draw(st.integers(0, 99), "seed"), shape, time_dim, dtype, layout, masked,
                            data.draw(st.booleans(), "terminated"), data.draw(st.booleans(), "bootstrap"),
                            path.device)
    if whiten and int(kwargs["mask"].sum()) < 2:
        whiten = False
    kwargs.update(gamma=0.99, exact=exact)
    got = rlscan.gae(*args, **kwargs, lmbda=lmbda, value_lmbda=value_lmbda, whiten=whiten)
    policy = rlscan.gae(*args, **kwargs, lmbda=lmbda, whiten=whiten)
    critic = rlscan.gae(*args, **kwargs, lmbda=value_lmbda)
    if exact or path.backend == "cpu":
        assert bitwise_equal(got.advantages, policy.advantages)
        assert bitwise_equal(got.returns, critic.returns)
    reference = {k: v for k, v in kwargs.items() if k != "exact"}
    ref = rlscan.reference.gae(*args, **reference, lmbda=lmbda, value_lmbda=value_lmbda)
    ref_advantages = ref.advantages
    if whiten:
        ref_advantages = rlscan.reference.masked_whiten(ref_advantages, kwargs["mask"])
    result = policy.advantages.dtype
    assert_close(got.advantages, ref_advantages, result, "advantages")
    assert_close(got.returns, ref.returns, result, "returns")


@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("time_dim", [1, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_rows_in_one_pass(whiten, time_dim, dtype, monkeypatch):
    """Masked ``[B, T]`` rows on the CPU: one loop writes both outputs (the two calls never run),
    the bits of the two single-λ calls."""
    # rows contiguous in time either way: [B, T], or the transpose of a [B, T] tensor
    shape, layout = ((9, 37), "contiguous") if time_dim == 1 else ((37, 9), "transposed")
    (r, v), kwargs = _problem(5, shape, time_dim, dtype, layout, True, True, True, "cpu")
    with rlscan.use_backend("cpu"):
        policy = rlscan.gae(r, v, **kwargs, lmbda=0.95, whiten=whiten)
        critic = rlscan.gae(r, v, **kwargs, lmbda=1.0)

        def refused(*args):
            raise AssertionError("the CPU rows ran two calls")

        monkeypatch.setattr(dual, "_two_calls", refused)
        got = rlscan.gae(r, v, **kwargs, lmbda=0.95, value_lmbda=1.0, whiten=whiten)
    assert bitwise_equal(got.advantages, policy.advantages)
    assert bitwise_equal(got.returns, critic.returns)
    assert not bitwise_equal(got.returns, policy.returns)


def test_none_is_the_single_lambda_op(path):
    (r, v), kwargs = _problem(1, (4, 13), 1, torch.float32, "contiguous", True, False, True, path.device)
    assert all(bitwise_equal(a, b) for a, b in zip(rlscan.gae(r, v, **kwargs, value_lmbda=None),
                                                    rlscan.gae(r, v, **kwargs)))
    same = rlscan.gae(r, v, **kwargs, lmbda=0.9, value_lmbda=0.9, exact=True)
    assert all(bitwise_equal(a, b) for a, b in zip(same, rlscan.gae(r, v, **kwargs, lmbda=0.9, exact=True)))


@pytest.mark.parametrize("masked", [False, True])
def test_gradients_flow_to_both_outputs(path, masked):
    """The gradient of ``w₁·advantages + w₂·returns`` is the sum of the single-λ calls' gradients."""
    (r, v), kwargs = _problem(2, (5, 11), 1, torch.float64, "contiguous", masked, True, True, path.device)
    g = torch.Generator().manual_seed(9)
    w1, w2 = torch.randn(5, 11, generator=g, dtype=torch.float64), torch.randn(5, 11, generator=g, dtype=torch.float64)
    w1, w2 = w1.to(path.device), w2.to(path.device)
    r, v = r.clone().requires_grad_(), v.clone().requires_grad_()
    got = rlscan.gae(r, v, **kwargs, lmbda=0.9, value_lmbda=1.0)
    grads = torch.autograd.grad((w1 * got.advantages).sum() + (w2 * got.returns).sum(), (r, v))
    a = rlscan.gae(r, v, **kwargs, lmbda=0.9).advantages
    b = rlscan.gae(r, v, **kwargs, lmbda=1.0).returns
    want = torch.autograd.grad((w1 * a).sum() + (w2 * b).sum(), (r, v))
    for x, y in zip(grads, want):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)


def test_out_and_numpy(path):
    (r, v), kwargs = _problem(3, (4, 16), 1, torch.float32, "contiguous", True, False, True, path.device)
    want = rlscan.gae(r, v, **kwargs, lmbda=0.95, value_lmbda=1.0, exact=True)
    out = (torch.empty_like(r), torch.empty_like(r))
    got = rlscan.gae(r, v, **kwargs, lmbda=0.95, value_lmbda=1.0, exact=True, out=out)
    assert got.advantages is out[0] and got.returns is out[1]
    assert bitwise_equal(got.advantages, want.advantages) and bitwise_equal(got.returns, want.returns)
    if path.device.type == "cpu":
        as_np = {k: (x.numpy() if isinstance(x, torch.Tensor) else x) for k, x in kwargs.items()}
        got = rlscan.gae(r.numpy(), v.numpy(), **as_np, lmbda=0.95, value_lmbda=1.0, exact=True)
        assert isinstance(got.returns, np.ndarray) and isinstance(got.advantages, np.ndarray)
        assert bitwise_equal(got.returns, want.returns) and bitwise_equal(got.advantages, want.advantages)


BAD = [
    (1.5, ValueError), (-0.1, ValueError), (float("nan"), ValueError), ("1.0", TypeError), (True, TypeError),
    ([1.0], TypeError), ("tensor above one", ValueError), ("int tensor", TypeError), ("wrong shape", ValueError),
]


@pytest.mark.parametrize("bad, error", BAD, ids=[str(b) for b, _ in BAD])
def test_bad_value_lmbda_is_refused_by_name(bad, error):
    (r, v), kwargs = _problem(4, (3, 8), 1, torch.float32, "contiguous", True, False, True, "cpu")
    if bad == "tensor above one":
        bad = torch.full((3, 1), 1.5)
    elif bad == "int tensor":
        bad = torch.ones(3, 1, dtype=torch.int64)
    elif bad == "wrong shape":
        bad = torch.ones(4, 1)
    with pytest.raises(error, match="value_lmbda") as caught:
        rlscan.gae(r, v, **kwargs, value_lmbda=bad)
    assert documented("value_lmbda", error.__name__, str(caught.value)), str(caught.value)


@pytest.mark.parametrize("T", [2, 11, 40])
@pytest.mark.parametrize("whiten", [False, True])
@pytest.mark.parametrize("terminated", [False, True])
def test_triton_rows_in_one_pass(T, whiten, terminated, monkeypatch):
    """Rows that the single-λ op walks with one program each (here tiles of 8 or 16 steps) run
    ``dual_rows_kernel``, within tolerance of the float64 reference; the two calls never run."""
    from rlscan._triton import policy

    path = path_for("triton")
    monkeypatch.setitem(policy.FORCED, "gae_row_tiles", ((16, 8, 1, 0), (64, 16, 1, 0)))
    monkeypatch.setitem(policy.FORCED, "gae_row_min_t", 2)

    def refused(*args):
        raise AssertionError("the rows ran two calls")

    monkeypatch.setattr(dual, "_two_calls", refused)
    (r, v), kwargs = _problem(T, (5, T), 1, torch.float32, "contiguous", True, terminated, True, path.device)
    kwargs["values"] = v.to(torch.bfloat16)
    with rlscan.use_backend(path.backend):
        got = rlscan.gae(r, **kwargs, lmbda=0.95, value_lmbda=1.0, whiten=whiten)
    ref = rlscan.reference.gae(r, **kwargs, lmbda=0.95, value_lmbda=1.0)
    advantages = rlscan.reference.masked_whiten(ref.advantages, kwargs["mask"]) if whiten else ref.advantages
    assert_close(got.advantages, advantages, torch.float32, "advantages")
    assert_close(got.returns, ref.returns, torch.float32, "returns")


def test_triton_rows_only_where_the_single_op_walks_them(monkeypatch):
    """Chained tiles (a look-back), rows under ``gae_row_min_t`` and a ``λ`` under
    ``gae_lambda_min`` run the two calls."""
    from rlscan._triton import policy

    path = path_for("triton")
    monkeypatch.setitem(policy.FORCED, "gae_row_min_t", 8)
    ran = []
    two_calls = dual._two_calls
    monkeypatch.setattr(dual, "_two_calls", lambda *a: ran.append(True) or two_calls(*a))
    (r, v), kwargs = _problem(0, (3, 12), 1, torch.float32, "contiguous", True, False, True, path.device)
    cases = [(((64, 8, 1, 0),), 12, 0.95, False), (((64, 8, 1, 1),), 12, 0.95, True),
             (((64, 8, 1, 0),), 6, 0.95, True), (((64, 8, 1, 0),), 12, 0.1, True)]
    with rlscan.use_backend(path.backend):
        for tiles, T, value_lmbda, two in cases:
            monkeypatch.setitem(policy.FORCED, "gae_row_tiles", tiles)
            ran.clear()
            sub = {k: (x[:, :T] if isinstance(x, torch.Tensor) and x.dim() == 2 else x) for k, x in kwargs.items()}
            rlscan.gae(r[:, :T], v[:, :T], **sub, lmbda=0.95, value_lmbda=value_lmbda)
            assert ran == ([True] if two else []), (tiles, T, value_lmbda)


def test_torch_compile_fullgraph():
    """Inside ``torch.compile`` the two calls are two custom ops: traced without a graph break,
    with the eager bits."""
    (r, v), kwargs = _problem(6, (4, 16), 1, torch.float32, "contiguous", True, True, True, "cpu")
    with rlscan.use_backend("cpu"):
        compiled = torch.compile(lambda r, v: rlscan.gae(r, v, **kwargs, lmbda=0.95, value_lmbda=1.0), fullgraph=True)
        got = compiled(r, v)
        want = rlscan.gae(r, v, **kwargs, lmbda=0.95, value_lmbda=1.0)
    assert all(bitwise_equal(a, b) for a, b in zip(got, want))
