"""The CPU row loops (rlscan._cpu_rows: the masked GAE and REINFORCE++'s returns over
``[B, T]`` rows contiguous in time, with the whitening's sums, and masked_whiten's own two
loops) against the general CPU path (the next kept values, then the masked loop, then
masked_whiten's torch form): the same bits (the whitening to the last bits of its dtype:
its float64 sums run in another order), in their serial and parallel versions, for every
dtype they read in place, without converting or copying an input."""
import numpy as np
import pytest
import torch

import rlscan
from rlscan import _cache, _cpu, _cpu_rows, _dispatch, whiten
from rlscan.ops import _skip
from rlscan.ops.discounted_returns import kept_returns
from rlscan.ops.gae import rows
from rlscan_testing import bitwise_equal


def responses(B, T, seed, value_dtype=torch.float32, mask_dtype=torch.int64, scattered=False):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    m = torch.arange(T)[None] < lengths[:, None]
    m[::3, T // 3: T // 2] = False  # observation spans
    if scattered:
        m &= torch.rand(B, T, generator=g) < 0.8
    r = torch.randn(B, T, generator=g, dtype=torch.float64 if value_dtype == torch.float64 else torch.float32)
    v = (torch.randn(B, T, generator=g) * 2).to(value_dtype)
    return r, v, m.to(mask_dtype)


@pytest.fixture(params=["serial", "parallel"])
def version(request, monkeypatch):
    parallel = request.param == "parallel"
    monkeypatch.setattr(_cpu, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(_cpu, "cpu_threads", lambda: 2)
    monkeypatch.setattr(_cpu._Versions, "parallel", lambda self: parallel)
    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    with rlscan.use_backend("cpu"):
        yield request.param


def _general(fn):
    """``fn()`` with the row loops switched off."""
    saved = rows.advantages, kept_returns._rows
    rows.advantages, kept_returns._rows = (lambda *a: None), (lambda *a: None)
    try:
        return fn()
    finally:
        rows.advantages, kept_returns._rows = saved


# each dtype pair once, the row counts (one row, several) and the whitening dealt across them:
# each pair is its own compiled loop, each count and flag a branch of every loop
@pytest.mark.parametrize("value_dtype, mask_dtype, B, whiten_", [
    (torch.float32, torch.int64, 1, True), (torch.bfloat16, torch.bool, 6, False),
    (torch.float32, torch.float32, 6, True), (torch.float64, torch.uint8, 1, False),
    (torch.bfloat16, torch.int32, 6, True), (torch.float32, torch.int64, 6, False)])
def test_gae_rows_are_the_general_path_bit_for_bit(version, value_dtype, mask_dtype, B, whiten_):
    r, v, m = responses(B, 37, seed=B, value_dtype=value_dtype, mask_dtype=mask_dtype)
    if whiten_ and int((m != 0).sum()) < 2:
        m[0, :2] = 1
    kw = dict(mask=m, whiten=whiten_, gamma=0.97, lmbda=0.9, time_dim=1)
    got = rlscan.gae(r, v, **kw)
    want = _general(lambda: rlscan.gae(r, v, **kw))
    assert bitwise_equal(got[1], want[1])
    if whiten_:
        assert_whitened(got[0], want[0])
    else:
        assert bitwise_equal(got[0], want[0])


def assert_whitened(got, want):
    """The whitening's statistics are summed in another order (float64 either way): the same
    values to the last bits of the result's dtype."""
    eps = torch.finfo(got.dtype).eps
    torch.testing.assert_close(got, want, rtol=8 * eps, atol=8 * eps)


@pytest.mark.parametrize("scattered", [False, True])
def test_gae_rows_with_bootstrap_terminations_and_time_first(version, scattered):
    r, v, m = responses(5, 64, seed=7, value_dtype=torch.bfloat16, scattered=scattered)
    boot = torch.randn(5)
    term = torch.rand(5, 64, generator=torch.Generator().manual_seed(1)) < 0.05
    for time_dim, t in ((1, lambda x: x), (0, lambda x: x.t())):
        kw = dict(mask=t(m), bootstrap_value=boot, terminated=t(term), gamma=0.99, lmbda=0.95, time_dim=time_dim)
        got = rlscan.gae(t(r), t(v), **kw)
        want = _general(lambda: rlscan.gae(t(r), t(v), **kw))
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.stride() == b.stride() and bitwise_equal(a.contiguous(), b.contiguous())


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.bool, torch.float32, torch.float64])
@pytest.mark.parametrize("B", [1, 5])
def test_reinforce_plus_plus_rows_are_the_general_path(version, mask_dtype, B):
    r, _, m = responses(B, 41, seed=B + 10, mask_dtype=mask_dtype)
    m[0, :2] = 1
    got = kept_returns.returns_and_advantages(r, m, 0.97)
    want = _general(lambda: kept_returns.returns_and_advantages(r, m, 0.97))
    # equal values; a masked step's zero has verl's sign in the row loop, + in the general path
    assert torch.equal(got[1], want[1]) and bitwise_equal(got[1][m != 0], want[1][m != 0])
    assert_whitened(got[0], want[0])


def test_rows_read_inputs_in_place(version, monkeypatch):
    """No input converted (bf16 values, bool masks), no next-kept-values series, no float64
    copy for the whitening: the outputs are the only tensors of the batch's size."""
    def refuse(*args, **kwargs):
        raise AssertionError("a copy or a second pass")

    monkeypatch.setattr(_cpu, "_converted", refuse)
    monkeypatch.setattr(whiten, "_torch_form", refuse)
    monkeypatch.setattr(_dispatch, "_two_scans", refuse)
    monkeypatch.setattr(_skip, "check_mask_values", refuse)
    r, v, m = responses(8, 50, seed=3, value_dtype=torch.bfloat16)
    m[0, :2] = 1
    rlscan.gae(r, v, mask=m, whiten=True, gamma=1.0, lmbda=0.95, time_dim=1)
    kept_returns.returns_and_advantages(r, m.bool(), 1.0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_rows_check_the_masks_values(version, dtype):
    r, v, m = responses(4, 20, seed=5, mask_dtype=dtype)
    m[2, 3] = 2
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        rlscan.gae(r, v, mask=m, whiten=True, time_dim=1)
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        kept_returns.returns_and_advantages(r, m, 0.9)


@pytest.mark.parametrize("x_dtype, mask_dtype", [(torch.float32, torch.int64), (torch.float32, torch.bool),
                                                 (torch.float64, torch.float32)])
def test_masked_whiten_rows_are_the_torch_form(version, x_dtype, mask_dtype):
    """``rlscan.masked_whiten`` on the CPU: the row loops (each row's sums, the mask's values
    checked on the way, then the result) give the torch form's values, for ``[B, T]`` rows and
    for the last dimension of a 3-d tensor, into a fresh tensor, into ``out`` (rows contiguous,
    or not: a copy) and in place; a mask of other values is refused."""
    x, _, m = responses(6, 41, seed=9, value_dtype=x_dtype, mask_dtype=mask_dtype, scattered=True)
    for zero_skipped in (False, True):
        for xs, ms in ((x, m), (x.view(2, 3, 41), m.view(2, 3, 41))):
            want = whiten._torch_form(xs, ms, True, 1e-8, zero_skipped)
            got = rlscan.masked_whiten(xs, ms, zero_skipped=zero_skipped)
            assert got.shape == xs.shape and got.dtype == x_dtype
            assert_whitened(got, want)
            in_place = xs.clone()
            for values, out in ((xs, torch.empty_like(xs)), (in_place, in_place),
                                (xs, torch.empty_like(xs.transpose(0, -1)).transpose(0, -1))):
                assert rlscan.masked_whiten(values, ms, zero_skipped=zero_skipped, out=out) is out
                assert bitwise_equal(out, got)
    with pytest.raises(TypeError, match="out must have the dtype of values"):
        rlscan.masked_whiten(x, m, out=torch.empty(x.shape, dtype=torch.float16))
    if mask_dtype != torch.bool:
        m[4, 7] = 3
        with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
            rlscan.masked_whiten(x, m)


@pytest.mark.parametrize("x_dtype, mask_dtype", [(torch.float32, torch.int64), (torch.float32, torch.bool),
                                                 (torch.float32, torch.float64), (torch.float64, torch.int32),
                                                 (torch.float32, torch.float32)])
def test_masked_broadcast(version, x_dtype, mask_dtype):
    """rlscan.masked_broadcast, a value per row over its mask (the outcome estimators'
    advantages), in its row loop and in torch's product (rows not contiguous): the float64
    product rounded to the product's dtype, and torch's bits, the sign of a zero and the NaN
    of an infinite value times 0 included; a mask value other than 0 and 1 raises."""
    _, _, m = responses(9, 33, seed=4, mask_dtype=mask_dtype)
    x = torch.randn(9, dtype=x_dtype, generator=torch.Generator().manual_seed(0))
    x[0] = float("inf")
    want = x.unsqueeze(-1) * m
    reference = (x.double().unsqueeze(-1) * m.double()).to(want.dtype)
    assert bitwise_equal(want, reference)
    for mask in (m, m.t().contiguous().t()):  # the row loop, then torch's product
        assert bitwise_equal(rlscan.masked_broadcast(x, mask), want)
    assert _cpu_rows.broadcast(x, m.t().contiguous().t()) is None
    if mask_dtype != torch.bool:
        m[2, 5] = 2
        for mask in (m, m.t().contiguous().t()):
            with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
                rlscan.masked_broadcast(x, mask)
    with pytest.raises(ValueError, match=r"mask must have the shape of values with one more dimension"):
        rlscan.masked_broadcast(x[:-1], m)
    with pytest.raises(TypeError, match="values must be a floating tensor"):
        rlscan.masked_broadcast(x.long(), m)


def test_whitening_statistics_resist_cancellation():
    """Rows far from 0 with a small spread: the rows' shifted sums, merged, keep the variance."""
    x = 1e4 + torch.randn(6, 300, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 1e-3
    sums = np.array([[300, float((x[b] - x[b, -1]).sum()), float(((x[b] - x[b, -1]) ** 2).sum()), float(x[b, -1])]
                     for b in range(6)])
    n, mean, var = _cpu_rows.statistics(sums)
    assert n == 1800
    assert abs(mean - float(x.mean())) < 1e-9
    assert abs(var / float(x.var()) - 1) < 1e-9
