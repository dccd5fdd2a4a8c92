"""The step-skip mask (``mask=``) of gae, td_lambda and discounted_returns against the float64
references (docs/semantics.md, "Skipped steps"): padding after EOS, observation spans inside
a response, rows with no kept step, one-step rows, γ = λ = 1, bfloat16 values, long responses,
every Triton kernel kind, exact mode bit for bit, gradients, torch.compile and bad input."""
import warnings

import numpy as np
import pytest
import torch

import rlscan
from rlscan import _cache, reference
from rlscan._triton import policy, settings
from rlscan._triton.launch import forced_config
from rlscan_testing import KERNEL_CONFIGS, masked_whiten_reference, path_for

OPS = ("gae", "td_lambda", "discounted_returns")
T = 11

# one row per pattern: padding after EOS, observation spans, nothing kept, all kept, one kept step
PATTERNS = torch.tensor([
    [1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0],
    [1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0],
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    [0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0],
])


@pytest.fixture
def triton_path_only():
    """The device of the Triton path (CPU tensors through the interpreter without a GPU)."""
    with rlscan.use_backend("triton"):
        yield path_for("triton").device


def _problem(op, B=5, T=T, seed=0, dtype=torch.float32, value_dtype=None, mask=None, bootstrap=True,
             terminated=False, device="cpu", **coefs):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(B, T, generator=g).to(dtype)
    v = torch.randn(B, T, generator=g).to(value_dtype or dtype)
    if mask is None:
        mask = PATTERNS[:B, :T] if (B, T) == (5, 11) else (torch.rand(B, T, generator=g) < 0.7).long()
    kwargs = dict(mask=mask.to(device), time_dim=1, gamma=coefs.get("gamma", 0.9))
    if op != "discounted_returns":
        kwargs["lmbda"] = coefs.get("lmbda", 0.8)
    if bootstrap:
        kwargs["bootstrap_value"] = torch.randn(B, generator=g).to(value_dtype or dtype).to(device)
    if terminated:
        kwargs["terminated"] = (torch.rand(B, T, generator=g) < 0.2).to(device)
    args = (r.to(device),) if op == "discounted_returns" else (r.to(device), v.to(device))
    return args, kwargs


def _outputs(x):
    return tuple(x) if isinstance(x, tuple) else (x,)


def _check(op, args, kwargs, atol=1e-5, **options):
    got = _outputs(getattr(rlscan, op)(*args, **kwargs, **options))
    want = _outputs(getattr(reference, op)(*args, **kwargs))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        # float32 rounding grows with the sum: tolerate it relative to the largest magnitude
        torch.testing.assert_close(g.cpu().double(), w, rtol=1e-5, atol=atol * max(1.0, float(w.abs().max())))
    return got


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("terminated", [False, True])
def test_patterns_match_reference(path, op, terminated):
    args, kwargs = _problem(op, terminated=terminated, device=path.device, seed=int(terminated))
    _check(op, args, kwargs)


@pytest.mark.parametrize("op", OPS)
def test_skipped_steps_pass_through(op):
    """A skipped step outputs what the next kept step carries; rows with nothing kept carry the
    bootstrap (0 for GAE's advantages)."""
    args, kwargs = _problem(op, bootstrap=True)
    out = _outputs(getattr(rlscan, op)(*args, **kwargs))[0]
    m = kwargs["mask"]
    boot = kwargs["bootstrap_value"]
    after_end = torch.zeros_like(boot) if op == "gae" else boot
    assert bool(m[1, 5]) and not bool(m[1, 2:5].any())
    torch.testing.assert_close(out[2], after_end[2].expand(T))  # nothing kept
    torch.testing.assert_close(out[0, 7:], after_end[0].expand(4))  # padding after EOS
    torch.testing.assert_close(out[1, 2:5], out[1, 5].expand(3))  # an observation span


def test_verl_loop_bit_for_bit(path):
    """float32: the CPU loop and the exact kernel are verl's loop bit for bit (before whitening)."""
    g = torch.Generator().manual_seed(4)
    r, v = torch.randn(5, T, generator=g), torch.randn(5, T, generator=g)
    m = PATTERNS
    A, R = rlscan.gae(r.to(path.device), v.to(path.device), mask=m.to(path.device), gamma=0.99, lmbda=0.95,
                      time_dim=1, exact=True)
    with torch.no_grad():
        next_value, next_adv, steps = 0, 0, []
        for t in reversed(range(T)):
            adv = r[:, t] + 0.99 * next_value - v[:, t] + 0.99 * 0.95 * next_adv
            next_value = v[:, t] * m[:, t] + (1 - m[:, t]) * next_value
            next_adv = adv * m[:, t] + (1 - m[:, t]) * next_adv
            steps.append(next_adv)
    want = torch.stack(steps[::-1], 1)
    assert torch.equal(A.cpu(), want)
    assert torch.equal(R.cpu(), want + v)


def test_reinforce_pp_returns(path):
    """rlscan.reinforce_pp_returns against its docstring's equation in float64: the running
    return passes through skipped spans, ``G = 0`` there, the advantages whitened over the kept
    steps; and its arguments are checked."""
    g = torch.Generator().manual_seed(5)
    r, m = torch.randn(5, T, generator=g), PATTERNS
    adv, ret = rlscan.reinforce_pp_returns(r.to(path.device), m.to(path.device), gamma=0.9)
    running, steps = torch.zeros(5, dtype=torch.float64), []
    for t in reversed(range(T)):
        kept = m[:, t] != 0
        running = torch.where(kept, r[:, t].double() + 0.9 * running, running)
        steps.append(torch.where(kept, running, 0.0))
    want = torch.stack(steps[::-1], 1)
    torch.testing.assert_close(ret.cpu(), want.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(adv.cpu(), (masked_whiten_reference(want, m) * (m != 0)).float(), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match=r"gamma must lie in \[0, 1\]"):
        rlscan.reinforce_pp_returns(r, m, gamma=1.5)
    with pytest.raises(ValueError, match="compute_dtype must be"):
        rlscan.reinforce_pp_returns(r, m, gamma=0.9, compute_dtype=torch.float16)


def test_reinforce_pp_returns_reset_at_skipped(path):
    """The reset form (SkyRL's) against its docstring's equation in float64: every step has a
    return, the running return reset after each skipped step; the CPU row loop, and the
    general form (rows not contiguous in time, time first) alike; its arguments checked."""
    g = torch.Generator().manual_seed(6)
    r, m = torch.randn(5, T, generator=g), PATTERNS
    running, steps = torch.zeros(5, dtype=torch.float64), []
    for t in reversed(range(T)):
        running = r[:, t].double() + 0.9 * running
        steps.append(running)
        running = running * m[:, t]
    want = torch.stack(steps[::-1], 1)
    want_adv = (masked_whiten_reference(want, m) * (m != 0)).float()
    for rows, mask, time_dim in ((r, m, -1), (r.t().contiguous().t(), m, -1), (r.t().contiguous(), m.t(), 0)):
        adv, ret = rlscan.reinforce_pp_returns(rows.to(path.device), mask.to(path.device), gamma=0.9, time_dim=time_dim,
                                               reset_at_skipped=True)
        if time_dim == 0:
            adv, ret = adv.t(), ret.t()
        torch.testing.assert_close(ret.cpu(), want.float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(adv.cpu(), want_adv, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="not cu_seqlens"):
        rlscan.reinforce_pp_returns(r.flatten(), None, gamma=0.9, cu_seqlens=torch.tensor([0, 5, 55]),
                                    reset_at_skipped=True)
    if path.device.type == "cpu":  # a GPU mask's values are not read twice
        with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
            rlscan.reinforce_pp_returns(r, m * 2, gamma=0.9, reset_at_skipped=True)
    with pytest.raises(TypeError, match="reset_at_skipped must be a bool"):
        rlscan.reinforce_pp_returns(r, m, gamma=0.9, reset_at_skipped=1)


@pytest.mark.parametrize("op", OPS)
def test_one_step_rows(path, op):
    for m in (torch.ones(3, 1, dtype=torch.long), torch.tensor([[1], [0], [1]])):
        args, kwargs = _problem(op, B=3, T=1, mask=m, device=path.device)
        _check(op, args, kwargs)


@pytest.mark.parametrize("op", OPS)
def test_gamma_lambda_one(path, op):
    """verl's defaults: γ = λ = 1 (GAE's advantages are then the returns-to-go minus the value)."""
    args, kwargs = _problem(op, gamma=1.0, lmbda=1.0, device=path.device, bootstrap=False)
    _check(op, args, kwargs)


@pytest.mark.parametrize("op", ["gae", "td_lambda"])
def test_bfloat16_values(path, op):
    """bf16 values (float32 rewards) against float64 truth on the same values: float32 accuracy."""
    args, kwargs = _problem(op, value_dtype=torch.bfloat16, device=path.device)
    got = _check(op, args, kwargs)
    assert all(g.dtype == torch.float32 for g in got)


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64, torch.float32, torch.bfloat16])
def test_mask_dtypes(dtype):
    args, kwargs = _problem("gae")
    kwargs["mask"] = kwargs["mask"].to(dtype)
    _check("gae", args, kwargs)


@pytest.mark.parametrize("op", OPS)
def test_long_responses_cpu(op):
    """32,768 tokens, with EOS padding and observation spans, on the CPU path."""
    L = 32768
    g = torch.Generator().manual_seed(7)
    m = torch.ones(2, L, dtype=torch.long)
    m[0, 30000:] = 0
    for start in range(1000, 28000, 3000):
        m[1, start:start + 400] = 0
    args, kwargs = _problem(op, B=2, T=L, mask=m, gamma=0.999, lmbda=0.95)
    with rlscan.use_backend("cpu"):
        _check(op, args, kwargs, atol=1e-4)


# every kind for GAE's one pass (two lanes per environment); for its two scans (λ < 0.5: the
# next kept values, then GAE) and the other ops, whose scans are the same, one kind of each family
FAMILIES = ("scan-chunks", "block-chunks", "chained-stripe-words", "chained-scan-words")
KINDS = [("gae", 0.8, config) for config in KERNEL_CONFIGS] + [
    (op, 0.3, config) for op in ("gae", "td_lambda", "discounted_returns") for config in FAMILIES]


@pytest.fixture
def lanes(monkeypatch):
    """GAE's one pass as two lanes of the engine, for rows that would run one program each."""
    from rlscan.ops.gae import one_pass

    monkeypatch.setitem(policy.FORCED, "gae_row_tiles", ())


@pytest.mark.parametrize("op, lmbda, config", KINDS)
def test_kernel_kinds(triton_path_only, lanes, op, lmbda, config, monkeypatch):
    from rlscan.ops.gae import one_pass

    ran = []
    run = one_pass._run
    monkeypatch.setattr(one_pass, "_run", lambda *a: ran.append(run(*a)) or ran[-1])
    args, kwargs = _problem(op, B=3, T=T, seed=len(config), device=triton_path_only, terminated=True,
                            mask=PATTERNS[[0, 1, 4]], lmbda=lmbda)
    with forced_config(**KERNEL_CONFIGS[config]):
        _check(op, args, kwargs)
    one_pass_applies = op == "gae" and lmbda >= policy.value("gae_lambda_min", settings.shipped())
    assert (len(ran) == 1 and ran[0] is not None) == one_pass_applies


@pytest.mark.parametrize("kernel", ["rows", "chained rows", "lanes"])
@pytest.mark.parametrize("lmbda", [1.0, 0.95, 0.5])
def test_one_pass_whitened(triton_path_only, lmbda, kernel, monkeypatch):
    """GAE's one pass gathers the whitening's sums: the result is masked_whiten's, and the
    float64 reference's, for large values and λ down to the one pass's limit, in both of its
    kernels (rows in two tiles of 8 steps)."""
    from rlscan.ops.gae import one_pass

    tiles = {"rows": ((64, 8, 1, 0),), "chained rows": ((64, 8, 1, 2),), "lanes": ()}[kernel]
    monkeypatch.setitem(policy.FORCED, "gae_row_tiles", tiles)
    monkeypatch.setitem(policy.FORCED, "gae_row_min_t", 2)
    args, kwargs = _problem("gae", B=5, T=T, device=triton_path_only, lmbda=lmbda, gamma=0.99,
                            value_dtype=torch.bfloat16)
    args = (args[0], (args[1].float() * 4 + 20).to(torch.bfloat16))
    adv, ret = rlscan.gae(*args, **kwargs, whiten=True)
    want_adv, want_ret = reference.gae(*args, **kwargs)
    torch.testing.assert_close(ret.cpu().double(), want_ret, rtol=1e-5, atol=1e-5 * float(want_ret.abs().max()))
    want = masked_whiten_reference(want_adv, kwargs["mask"].cpu())
    torch.testing.assert_close(adv.cpu().double(), want, rtol=1e-4, atol=1e-4)
    two_scans, _ = rlscan.gae(*args, **kwargs, whiten=True, exact=True)
    torch.testing.assert_close(adv, two_scans, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call", ["one pass", "dual-λ rows", "kept returns", "packed", "packed kept returns"])
def test_whitening_in_a_fixed_order_under_deterministic_algorithms(triton_path_only, call, monkeypatch):
    """Where a scan gathers the whitening's sums itself (float64 atomics, added in the order its
    programs finish), under ``torch.use_deterministic_algorithms`` the whitening is
    ``masked_whiten``'s instead, which adds them in a fixed order: bit for bit its result on
    the call's unwhitened outputs."""
    from rlscan.ops.discounted_returns.kept_returns import returns_and_advantages

    monkeypatch.setitem(policy.FORCED, "gae_row_tiles", ((64, 8, 1, 0),))  # rows that one program walks
    monkeypatch.setitem(policy.FORCED, "gae_row_min_t", 2)
    (r, v), kwargs = _problem("gae", device=triton_path_only)
    r, mask = r * 4 + 20, kwargs["mask"]  # away from 0: the two ways of summing round differently
    if call.startswith("packed"):
        keep = mask.reshape(-1).bool()
        r, v, mask = r.reshape(-1), v.reshape(-1), keep
        kwargs = dict(cu_seqlens=torch.tensor([0, 11, 22, 33, 44, 55], device=r.device), mask=mask, gamma=0.9,
                      lmbda=0.8)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        if call.endswith("kept returns"):
            cu = {"cu_seqlens": kwargs["cu_seqlens"]} if call.startswith("packed") else {"time_dim": 1}
            adv, ret = returns_and_advantages(r, mask, 0.9, **cu)
            assert torch.equal(adv, rlscan.masked_whiten(ret, mask, zero_skipped=True))
            return
        more = {"value_lmbda": 1.0} if call == "dual-λ rows" else {}
        plain = rlscan.gae(r, v, **kwargs, **more)
        adv, ret = rlscan.gae(r, v, **kwargs, **more, whiten=True)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert torch.equal(ret, plain.returns)
    assert torch.equal(adv, rlscan.masked_whiten(plain.advantages, mask))


def test_one_pass_pairs_the_lanes_of_one_row_settings(triton_path_only, lanes, monkeypatch):
    """Where the table runs one row per program (``block_b = 1``), the one pass runs an
    environment's two lanes in one program (``block_b = 2``) instead of falling back."""
    from rlscan._triton import launch
    from rlscan._triton.settings import Config
    from rlscan.ops.gae import one_pass

    ran = []
    run = one_pass._run
    monkeypatch.setattr(one_pass, "_run", lambda *a: ran.append(run(*a)) or ran[-1])
    monkeypatch.setattr(launch, "choose_configs", lambda T, B, *a, **k: (Config("scan", 1, 4, block_t=8, chunk_len=T),))
    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    args, kwargs = _problem("gae", B=3, T=T, device=triton_path_only, terminated=True, mask=PATTERNS[[0, 1, 4]])
    with launch.recording_plans() as plans:
        _check("gae", args, kwargs)
    assert len(ran) == 1 and ran[0] is not None
    assert [p.cfg.block_b for p in plans] == [2]


@pytest.mark.parametrize("kernel, failed, instead", [("_run", "_failed", "running two scans"),
                                                    ("_run_rows", "_rows_failed", "running two lanes")])
def test_one_pass_failure_falls_back(triton_path_only, monkeypatch, kernel, failed, instead):
    """A failing one-pass kernel warns once: the lanes' failure gives the two scans, the row
    kernel's the lanes."""
    from rlscan.ops.gae import one_pass

    def broken(*args):
        raise RuntimeError("a compiler failure")

    if kernel == "_run":
        monkeypatch.setitem(policy.FORCED, "gae_row_tiles", ())
    monkeypatch.setattr(one_pass, kernel, broken)
    monkeypatch.setattr(one_pass, failed, [])
    args, kwargs = _problem("gae", device=triton_path_only)
    with pytest.warns(UserWarning, match=instead):
        _check("gae", args, kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check("gae", args, kwargs)  # warned once


# the masked row kernel on one warp in tiles of 8 steps (rows of up to 16) or 16, so that
# rows of 2-40 steps span one to three tiles, walked by one program or chained (a look-back
# of 1 or 2 words; "no states": odd tiles publish no state, so the look-back composes their
# pairs); mask patterns, flags, a bootstrap value or none, bf16 values
ROWS_SMALL = {"walked": (((16, 8, 1, 0), (64, 16, 1, 0)), False),
              "chained": (((16, 8, 1, 1), (64, 16, 1, 2)), False),
              "chained, no states": (((16, 8, 1, 2), (64, 8, 1, 1)), True)}


@pytest.mark.parametrize("T_rows", [2, 8, 11, 40])
@pytest.mark.parametrize("terminated, bootstrap", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("value_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", list(ROWS_SMALL))
def test_row_kernel(triton_path_only, monkeypatch, T_rows, terminated, bootstrap, value_dtype, rows):
    from rlscan.ops.gae import one_pass

    monkeypatch.setitem(policy.FORCED, "gae_row_tiles", ROWS_SMALL[rows][0])
    monkeypatch.setattr(one_pass, "ROW_TEST_LOOKBACK", ROWS_SMALL[rows][1])
    monkeypatch.setitem(policy.FORCED, "gae_row_min_t", 2)
    ran = []
    run = one_pass._run_rows
    monkeypatch.setattr(one_pass, "_run_rows", lambda *a: ran.append(run(*a)) or ran[-1])
    mask = PATTERNS if T_rows == T else None
    args, kwargs = _problem("gae", T=T_rows, seed=T_rows, device=triton_path_only, terminated=terminated,
                            bootstrap=bootstrap, value_dtype=value_dtype, mask=mask, gamma=1.0, lmbda=0.95)
    got = _check("gae", args, kwargs)
    assert len(ran) == 1 and ran[0] is not None
    again = rlscan.gae(*args, **kwargs)  # a repeat call: the kept launcher where there is one
    chained = next(lookback for most, _, _, lookback in ROWS_SMALL[rows][0] if T_rows <= most) > 0
    for a, b in zip(got, again):
        if chained:  # the look-back composes tiles in the order they finish (docs/semantics.md, "Numbers")
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        else:  # one program walks each row: the same bits
            assert torch.equal(a, b)


def test_row_kernel_only_where_it_applies(triton_path_only, monkeypatch):
    """Rows of 8 to 16 steps contiguous in time run one program each; shorter rows, longer
    ones and steps apart in memory run as two lanes."""
    from rlscan.ops.gae import one_pass

    monkeypatch.setitem(policy.FORCED, "gae_row_tiles", ((16, 8, 1, 0),))
    monkeypatch.setitem(policy.FORCED, "gae_row_min_t", 8)
    ran = []
    run = one_pass._run_rows
    monkeypatch.setattr(one_pass, "_run_rows", lambda *a: ran.append(run(*a) is not None) or None)
    for steps in (4, 11, 40):
        args, kwargs = _problem("gae", T=steps, seed=steps, device=triton_path_only)
        _check("gae", args, kwargs)
    args, kwargs = _problem("gae", device=triton_path_only)
    strided = tuple(torch.cat([a, a], dim=1)[:, ::2] for a in args)
    _check("gae", strided, dict(kwargs, mask=torch.cat([kwargs["mask"]] * 2, dim=1)[:, ::2]))
    assert ran == [False, True, False, False]


def test_chained_rows_not_under_deterministic_algorithms(triton_path_only, monkeypatch):
    """The chained row kernel's look-back composes tiles in the order programs finish: under
    ``torch.use_deterministic_algorithms`` the rows run as two lanes instead, and a repeat call
    gives the same bits, whitened too."""
    from rlscan.ops.gae import one_pass

    monkeypatch.setitem(policy.FORCED, "gae_row_tiles", ((64, 8, 1, 1),))
    monkeypatch.setitem(policy.FORCED, "gae_row_min_t", 8)
    ran = []
    run = one_pass._run_rows
    monkeypatch.setattr(one_pass, "_run_rows", lambda *a: ran.append(run(*a) is not None) or None)
    args, kwargs = _problem("gae", T=20, seed=5, device=triton_path_only)
    _check("gae", args, kwargs)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        first = _check("gae", args, kwargs)
        for a, b in zip(first, rlscan.gae(*args, **kwargs)):
            assert torch.equal(a, b)
        whitened = rlscan.gae(*args, **kwargs, whiten=True)
        for a, b in zip(whitened, rlscan.gae(*args, **kwargs, whiten=True)):
            assert torch.equal(a, b)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert ran[:2] == [True, False] and not any(ran[2:])


@pytest.mark.parametrize("op", OPS)
def test_time_first_layout(path, op):
    args, kwargs = _problem(op, device=path.device)
    args = tuple(a.t() for a in args)  # [T, B] views of [B, T] storage
    kwargs = dict(kwargs, mask=kwargs["mask"].t().contiguous(), time_dim=0)
    _check(op, args, kwargs)
    if op == "gae":
        adv, _ = rlscan.gae(*args, **kwargs, whiten=True)
        want = masked_whiten_reference(reference.gae(*args, **kwargs)[0], kwargs["mask"].cpu())
        torch.testing.assert_close(adv.cpu().double(), want, rtol=1e-4, atol=1e-4)


def test_other_layouts_numpy_and_out(path):
    """Two batch groups ([B1, T, B2], the two scans), numpy in and out, and out= (the two scans)."""
    g = torch.Generator().manual_seed(9)
    r, v = torch.randn(2, T, 3, generator=g), torch.randn(2, T, 3, generator=g)
    m = (torch.rand(2, T, 3, generator=g) < 0.6).to(path.device)
    kwargs = dict(mask=m, time_dim=1, gamma=0.9, lmbda=0.8)
    _check("gae", (r.to(path.device), v.to(path.device)), kwargs)
    if path.device.type == "cpu":
        got = rlscan.gae(r.numpy(), v.numpy(), **kwargs)
        want = reference.gae(r, v, **kwargs)
        assert all(isinstance(x, np.ndarray) for x in got)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)
    out = (torch.empty(2, T, 3, device=path.device), torch.empty(2, T, 3, device=path.device))
    result = rlscan.gae(r.to(path.device), v.to(path.device), **kwargs, whiten=True, out=out)
    assert result[0] is out[0] and result[1] is out[1]
    want_adv, want_ret = reference.gae(r, v, **kwargs)
    torch.testing.assert_close(out[1].cpu().double(), want_ret, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[0].cpu().double(), masked_whiten_reference(want_adv, m.cpu()), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", OPS)
def test_gradients(op):
    """float64 gradients of the differentiable form against finite differences (CPU path)."""
    args, kwargs = _problem(op, B=2, T=6, dtype=torch.float64, terminated=True, mask=PATTERNS[[1, 4], :6])
    leaves = [a.clone().requires_grad_() for a in args] + [kwargs["bootstrap_value"].clone().requires_grad_()]

    def f(*xs):
        return getattr(rlscan, op)(*xs[:-1], **dict(kwargs, bootstrap_value=xs[-1]))

    with rlscan.use_backend("cpu"):
        assert torch.autograd.gradcheck(f, tuple(leaves))


def test_gradients_triton_path_match_cpu(triton_path_only):
    args, kwargs = _problem("gae", B=2, T=6, mask=PATTERNS[[1, 4], :6])
    grads = []
    for backend, device in (("cpu", "cpu"), ("triton", triton_path_only)):
        leaves = [a.detach().to(device).requires_grad_() for a in args]
        kw = {k: x.to(device) if isinstance(x, torch.Tensor) else x for k, x in kwargs.items()}
        with rlscan.use_backend(backend):
            A, R = rlscan.gae(*leaves, **kw)
            (A * torch.arange(6.0, device=device) + R).sum().backward()
        grads.append([x.grad.cpu() for x in leaves])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("op", OPS)
def test_compiled(path, op):
    torch._dynamo.reset()
    args, kwargs = _problem(op, device=path.device)
    fn = getattr(rlscan, op)
    compiled = torch.compile(lambda *a: fn(*a, **kwargs), fullgraph=True, backend="eager")
    # compiled, GAE runs its two scans (custom ops); eager, its one pass: float32 rounding apart
    for got, want in zip(_outputs(compiled(*args)), _outputs(fn(*args, **kwargs))):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


def test_compiled_whitened(path, monkeypatch):
    """GAE with whiten=True inside torch.compile: the masked ops' custom ops, then the whitening
    as torch operations, with no graph break; also as a process's first masked GAE call, where
    no eager call has imported what the masked spec names (a :class:`Ref` resolved inside the
    traced region fails: dynamo cannot trace ``importlib``)."""
    import dataclasses

    from rlscan._spec import Ref
    from rlscan.ops.gae.op import FROM_MASK

    for spec in (FROM_MASK, FROM_MASK.op, FROM_MASK.first):
        for f in dataclasses.fields(spec):
            if isinstance(getattr(spec, f.name), Ref):
                monkeypatch.setattr(getattr(spec, f.name), "_value", None)  # as before any eager call
    torch._dynamo.reset()
    args, kwargs = _problem("gae", device=path.device)
    compiled = torch.compile(lambda *a: rlscan.gae(*a, **kwargs, whiten=True), fullgraph=True, backend="eager")
    for got, want in zip(compiled(*args), rlscan.gae(*args, **kwargs, whiten=True)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


def test_masked_whiten_matches_float64(path):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 300, generator=g) * 3 + 2
    m = (torch.rand(5, 300, generator=g) < 0.6).long()
    m[2] = 0
    keep = m != 0
    xd = x.double()
    mean = xd[keep].mean()
    var = ((xd[keep] - mean) ** 2).sum() / (keep.sum() - 1)
    want = (xd - mean) / torch.sqrt(var + 1e-8)
    for mask in (m, m.bool(), m.float()):
        got = rlscan.masked_whiten(x.to(path.device), mask.to(path.device))
        torch.testing.assert_close(got.cpu().double(), want, rtol=1e-5, atol=1e-5)
    got = rlscan.masked_whiten(x.to(path.device), m.to(path.device), shift_mean=False)
    torch.testing.assert_close(got.cpu().double(), want + mean, rtol=1e-5, atol=1e-5)
    for mask in (m, m.bool(), m.float()):
        got = rlscan.masked_whiten(x.to(path.device), mask.to(path.device), zero_skipped=True)
        torch.testing.assert_close(got.cpu().double(), torch.where(keep, want, 0), rtol=1e-5, atol=1e-5)
    # the loop module's whitening (used against verl's numbers) agrees too
    torch.testing.assert_close(masked_whiten_reference(xd, m), want)


def test_whitening_kernels_run_and_merge_many_parts(triton_path_only):
    """The Triton whitening runs without falling back (a warning here is an error), for
    masked_whiten and GAE's gathered sums; its merge of block statistics, over more blocks
    than one block of the merging program holds, equals float64 arithmetic."""
    from rlscan._triton import whiten as kernels

    g = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 50, generator=g) * 2 + 5).to(triton_path_only)
    m = (torch.rand(4, 50, generator=g) < 0.7).to(triton_path_only)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = rlscan.masked_whiten(x, m)
        args, kwargs = _problem("gae", B=3, T=T, device=triton_path_only)
        adv, _ = rlscan.gae(*args, **kwargs, whiten=True)
    keep = m.cpu()
    mean, std = x.cpu().double()[keep].mean(), x.cpu().double()[keep].std()
    torch.testing.assert_close(got.cpu().double(), (x.cpu().double() - mean) / std, rtol=1e-5, atol=1e-5)
    want = masked_whiten_reference(reference.gae(*args, **kwargs)[0], kwargs["mask"].cpu())
    torch.testing.assert_close(adv.cpu().double(), want, rtol=1e-4, atol=1e-4)

    P = 2 * kernels.FINISH_BLOCK + 5
    n = torch.randint(0, 40, (P,), generator=g).double()
    s = torch.randn(P, generator=g, dtype=torch.float64) * n + 3 * n
    q = torch.rand(P, generator=g, dtype=torch.float64) * n
    mean = s.sum() / n.sum()
    m2 = (q + n * (s / n.clamp(min=1) - mean) ** 2).sum()  # q about each block's mean
    stats = kernels.statistics(torch.stack([n, s, q]).to(triton_path_only), 1e-8)
    want = torch.stack([mean, torch.rsqrt(m2 / (n.sum() - 1) + 1e-8), n.sum()])
    torch.testing.assert_close(stats.cpu(), want, rtol=1e-12, atol=0)


def test_whitening_kernel_failure_falls_back(triton_path_only, monkeypatch):
    """A Triton failure in the whitening warns once and gives the torch form's result."""
    import rlscan.whiten
    from rlscan._triton import whiten as kernels

    def broken(*args, **kwargs):
        raise RuntimeError("a compiler failure")

    monkeypatch.setattr(rlscan.whiten, "_warned", [])
    monkeypatch.setattr(kernels, "apply_sums", broken)
    monkeypatch.setattr(kernels, "masked_whiten", broken)
    args, kwargs = _problem("gae", B=3, T=T, device=triton_path_only)
    with pytest.warns(UserWarning, match="the Triton kernels failed"):
        adv, _ = rlscan.gae(*args, **kwargs, whiten=True)
    want = masked_whiten_reference(reference.gae(*args, **kwargs)[0], kwargs["mask"].cpu())
    torch.testing.assert_close(adv.cpu().double(), want, rtol=1e-4, atol=1e-4)
    x, m = args[0], kwargs["mask"]
    torch.testing.assert_close(rlscan.masked_whiten(x, m, zero_skipped=True).cpu().double(),
                               masked_whiten_reference(x.cpu().double(), m.cpu()) * (m.cpu() != 0), rtol=1e-5, atol=1e-5)


def test_masked_whiten_errors():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="at least two"):
        rlscan.masked_whiten(x, torch.zeros(3, 4))
    with pytest.raises(ValueError, match="at least two"):
        rlscan.masked_whiten(x, torch.eye(3, 4)[:1].expand(3, 4) * torch.tensor([[1], [0], [0]]))
    with pytest.raises(ValueError, match="shape"):
        rlscan.masked_whiten(x, torch.ones(3, 5))
    with pytest.raises(ValueError, match="0 and 1"):
        rlscan.masked_whiten(x, torch.full((3, 4), 0.5))
    with pytest.raises(TypeError, match="floating"):
        rlscan.masked_whiten(torch.ones(3, 4, dtype=torch.long), torch.ones(3, 4))
    with pytest.raises(TypeError, match="zero_skipped must be a bool"):
        rlscan.masked_whiten(x, torch.ones(3, 4), zero_skipped=1)


@pytest.mark.parametrize("op", OPS)
def test_bad_input(op):
    args, kwargs = _problem(op)
    fn = getattr(rlscan, op)
    with pytest.raises(ValueError, match="mask must have the shape"):
        fn(*args, **dict(kwargs, mask=kwargs["mask"][:, :-1]))
    with pytest.raises(ValueError, match="only 0 and 1"):
        fn(*args, **dict(kwargs, mask=kwargs["mask"] * 0.5))
    with pytest.raises(ValueError, match="only 0 and 1"):
        fn(*args, **dict(kwargs, mask=kwargs["mask"] * 2))
    with pytest.raises(TypeError, match="mask must be"):
        fn(*args, **dict(kwargs, mask=kwargs["mask"].to(torch.complex64)))
    with pytest.raises(TypeError, match="rewards must be a floating"):
        fn(args[0].long(), *args[1:], **kwargs)
    boot = kwargs.pop("bootstrap_value")
    with pytest.raises(ValueError, match="mask and next_values"):
        fn(*args, **kwargs, next_values=args[0])
    with pytest.raises(ValueError, match="truncated"):
        fn(*args, **kwargs, truncated=torch.zeros_like(args[0]), bootstrap_value=boot)
    if op == "gae":
        with pytest.raises(ValueError, match="whiten=True needs mask"):
            fn(*args, **dict(kwargs, mask=None), bootstrap_value=boot, whiten=True)
        with pytest.raises(TypeError, match="whiten must be a bool"):
            fn(*args, **kwargs, whiten=1)
