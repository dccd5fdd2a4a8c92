"""``rlscan.masked_normalize``: its arguments, and its two implementations (the CPU loops and
the torch form the GPU runs) against each other. Its numbers against AReaL's own
``Normalization``, which it follows, are ``tests/test_areal.py``'s."""
import itertools

import numpy as np
import pytest
import torch

import rlscan

LEVELS = ("batch", "group", None)


def inputs(B=8, S=37, seed=0, mask_dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, S, generator=g) * 3 + 1
    m = (torch.rand(B, S, generator=g) > 0.3).to(mask_dtype)
    m[0] = 0  # a row that keeps nothing
    return x, m


def test_the_cpu_loops_and_the_torch_form_agree():
    """Every level, leave-one-out and bias, with and without a mask: the CPU path's loops and
    the torch form (the Triton backend's, here on CPU tensors) give the same bits but for
    float64's rounding of the sums, which float32 hides but in its last bit."""
    x, m = inputs()
    for mean, std, loo, unbiased, mask in itertools.product(LEVELS, LEVELS, (False, True), (True, False), (None, m)):
        kw = dict(mean=mean, std=std, group_size=4, leave_one_out=loo, unbiased=unbiased)
        with rlscan.use_backend("cpu"):
            cpu = rlscan.masked_normalize(x, mask, **kw)
        torch_form = _torch_form(x, mask, **kw)
        assert cpu.dtype == torch.float32
        torch.testing.assert_close(cpu, torch_form, rtol=2 ** -22, atol=1e-6, msg=str(kw))


def _torch_form(x, mask, **kw):
    from rlscan import normalize

    original = normalize._cpu_rows.rows_of
    normalize._cpu_rows.rows_of = lambda *a: None  # no rows the loops take: the torch form
    try:
        with rlscan.use_backend("cpu"):
            return rlscan.masked_normalize(x, mask, **kw)
    finally:
        normalize._cpu_rows.rows_of = original


def test_float64_numpy_and_shapes():
    x, m = inputs()
    got = rlscan.masked_normalize(x.double().numpy(), m.numpy(), mean="group", std="group", group_size=2)
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    want = rlscan.masked_normalize(x.double(), m, mean="group", std="group", group_size=2)
    np.testing.assert_array_equal(got, want.numpy())
    # a score per row (AReaL's reward_norm): [B], no mask
    scores = x[:, 0].clone()
    out = rlscan.masked_normalize(scores, mean="group", std="group", group_size=4)
    groups = scores.double().view(2, 4)
    want = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True).float().double() + 1e-5)
    torch.testing.assert_close(out.double(), want.view(-1), rtol=1e-6, atol=1e-6)
    # [B, S, k] and an empty batch
    assert rlscan.masked_normalize(torch.randn(4, 3, 2), group_size=2, mean="group").shape == (4, 3, 2)
    assert rlscan.masked_normalize(torch.empty(0, 5)).shape == (0, 5)


def test_a_mask_that_keeps_nothing_returns_x():
    x, m = inputs()
    out = rlscan.masked_normalize(x, torch.zeros_like(m))
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_bad_arguments_are_named():
    x, m = inputs()
    with pytest.raises(TypeError, match="x must be a float32 or float64"):
        rlscan.masked_normalize(x.bfloat16())
    with pytest.raises(ValueError, match="mask must have the shape of x"):
        rlscan.masked_normalize(x, m[:, 1:])
    with pytest.raises(TypeError, match="mask must be a bool, integer or floating"):
        rlscan.masked_normalize(x, m.to(torch.complex64))
    with pytest.raises(ValueError, match="mean must be 'batch', 'group' or None"):
        rlscan.masked_normalize(x, m, mean="none")
    with pytest.raises(ValueError, match="group_size must be a positive int"):
        rlscan.masked_normalize(x, m, std="group")
    with pytest.raises(ValueError, match=r"group_size \(3\) must divide the batch's 8 rows"):
        rlscan.masked_normalize(x, m, mean="group", group_size=3)
    with pytest.raises(ValueError, match="eps must be a finite float"):
        rlscan.masked_normalize(x, m, eps=-1.0)
    with pytest.raises(TypeError, match="leave_one_out must be a bool"):
        rlscan.masked_normalize(x, m, leave_one_out=1)
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        rlscan.masked_normalize(x, m * 2)
    with pytest.raises(ValueError, match="torch.distributed is not initialised"):
        rlscan.masked_normalize(x, m, group=object())


def test_the_parallel_loops_give_the_serial_loops_bits():
    """Each call runs a loop's serial or parallel version, whichever was faster lately: both
    give the same bits, the reassociated sums of the statistics included."""
    from rlscan import _cpu_rows

    g = np.random.default_rng(0)
    x = g.standard_normal((16, 1001)).astype(np.float32) * 3 + 1
    m = (g.random((16, 1001)) > 0.3).astype(np.float32)
    sums = [np.empty((16, 4)), np.empty((16, 4))]
    outs, stats = [np.empty_like(x), np.empty_like(x)], [np.empty((4, 2)), np.empty((4, 2))]
    for k, parallel in enumerate((False, True)):
        _cpu_rows.moment_rows_loop.version(None, parallel)(x, m, True, sums[k])
        _cpu_rows.normalize_groups_loop.version(None, parallel)(x, m, True, 4, True, False, True, True, 1e-5, True,
                                                                outs[k], stats[k])
    assert np.array_equal(sums[0], sums[1]) and np.array_equal(stats[0], stats[1])
    assert np.array_equal(outs[0].view(np.int32), outs[1].view(np.int32))
