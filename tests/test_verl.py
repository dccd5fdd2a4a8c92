"""rlscan.adapters.verl against verl's loops written from their semantics
(rlscan.bench.verl_loops), in float32 and with bfloat16 values against float64 truth, and
patch()/unpatch() against a minimal stand-in for verl's core_algos (verl itself is too
heavy for CI)."""
import enum
import sys
import types

import pytest
import torch

import rlscan
from rlscan.adapters import verl
from rlscan.bench import verl_loops
from rlscan_testing import path_for


def _batch(B=6, T=13, seed=0, value_dtype=torch.float32, device="cpu"):
    """Responses of several shapes: EOS padding, observation spans, one token, nothing kept."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(B, T, generator=g) * 0.1
    r[torch.arange(B), torch.randint(0, T, (B,), generator=g)] += 1.0  # a sparse "score" token
    v = torch.randn(B, T, generator=g).to(value_dtype)
    m = torch.ones(B, T, dtype=torch.long)
    m[0, 9:] = 0
    m[1, 3:6] = 0
    m[1, 8:10] = 0
    m[1, 11:] = 0
    m[2, 1:] = 0
    m[3] = 0
    return r.to(device), v.to(device), m.to(device)


def test_gae_matches_verl_loop_float32(path):
    r, v, m = _batch(device=path.device)
    got = verl.compute_gae_advantage_return(r, v, m, 0.99, 0.95)
    want = verl_loops.gae(r.cpu(), v.cpu(), m.cpu(), 0.99, 0.95)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (torch.tensor(0.99), torch.tensor(0.9))])
def test_gae_defaults_and_tensor_coefficients(gamma, lam):
    r, v, m = _batch(seed=1)
    got = verl.compute_gae_advantage_return(r, v, m, gamma, lam)
    want = verl_loops.gae(r, v, m, float(gamma), float(lam))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_gae_bfloat16_values_against_float64(path):
    """verl's own loop carries bf16 values in bf16; rlscan computes in float32: compared with
    the float64 loop on the same values it is as close as float32 allows."""
    r, v, m = _batch(seed=2, value_dtype=torch.bfloat16, device=path.device)
    adv, ret = verl.compute_gae_advantage_return(r, v, m, 0.99, 0.95)
    assert adv.dtype == ret.dtype == torch.float32
    want_adv, want_ret = verl_loops.gae(r.cpu().double(), v.cpu().double(), m.cpu(), 0.99, 0.95)
    torch.testing.assert_close(adv.cpu().double(), want_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret.cpu().double(), want_ret, rtol=1e-5, atol=1e-5)


def test_gae_long_response_cpu():
    g = torch.Generator().manual_seed(3)
    T = 32768
    r, v = torch.randn(2, T, generator=g) * 0.01, torch.randn(2, T, generator=g).to(torch.bfloat16)
    m = torch.ones(2, T, dtype=torch.long)
    m[0, 20000:] = 0
    m[1, 5000:9000] = 0
    with rlscan.use_backend("cpu"):
        adv, ret = verl.compute_gae_advantage_return(r, v, m, 1.0, 0.95)
    want_adv, want_ret = verl_loops.gae(r.double(), v.double(), m, 1.0, 0.95)
    torch.testing.assert_close(adv.double(), want_adv, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ret.double(), want_ret, rtol=1e-4, atol=1e-4 * float(want_ret.abs().max()))


class _Config:
    gamma = 0.97


@pytest.mark.parametrize("config", [_Config(), {"gamma": 0.97}])
@pytest.mark.parametrize("mask_dtype", [torch.long, torch.bool, torch.float64])
def test_reinforce_plus_plus_matches_verl_loop(path, config, mask_dtype, monkeypatch):
    """Values and dtypes: verl's advantages are ``whitened · mask``, so a float64 mask makes
    them float64. On the Triton path the returns and the whitening's sums come from one scan."""
    from rlscan.ops.discounted_returns import cut_after_skips

    scans = []
    scan = cut_after_skips._scan
    monkeypatch.setattr(cut_after_skips, "_scan", lambda *a: scans.append(scan(*a)) or scans[-1])
    r, _, m = _batch(seed=4, device=path.device)
    m = m.to(mask_dtype)
    got = verl.compute_reinforce_plus_plus_outcome_advantage(r, m, config, index=None)
    want = verl_loops.reinforce_plus_plus(r.cpu(), m.cpu(), 0.97)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)
    assert len(scans) == (path.device.type != "cpu" or rlscan.get_backend() == "triton")


def test_reinforce_plus_plus_one_pass_failure_falls_back(monkeypatch):
    """A failing one-pass kernel warns once; the return and the whitening then run apart."""
    from rlscan.ops.discounted_returns import cut_after_skips

    def broken(*args):
        raise RuntimeError("a compiler failure")

    monkeypatch.setattr(cut_after_skips, "_scan", broken)
    monkeypatch.setattr(cut_after_skips, "_failed", [])
    r, _, m = _batch(seed=6, device=path_for("triton").device)
    want = verl_loops.reinforce_plus_plus(r, m, 0.97)
    with rlscan.use_backend("triton"):
        with pytest.warns(UserWarning, match="one-pass kernel failed"):
            got = verl.compute_reinforce_plus_plus_outcome_advantage(r, m, _Config())
        again = verl.compute_reinforce_plus_plus_outcome_advantage(r, m, _Config())  # warned once
    for a, b, w in zip(got, again, want):
        torch.testing.assert_close(a.cpu(), w.cpu(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(b.cpu(), w.cpu(), rtol=1e-5, atol=1e-5)


def test_reinforce_plus_plus_returns_bit_for_bit():
    """float32 returns are verl's loop bit for bit (the CPU loop runs in its order)."""
    r, _, m = _batch(seed=5)
    with rlscan.use_backend("cpu"):
        _, ret = verl.compute_reinforce_plus_plus_outcome_advantage(r, m, _Config())
    assert torch.equal(ret, verl_loops.reinforce_plus_plus(r, m, 0.97)[1])


def test_bad_input():
    r, v, m = _batch()
    with pytest.raises(ValueError, match="response_mask must have the shape"):
        verl.compute_gae_advantage_return(r, v, m[:, :-1], 0.99, 0.95)
    with pytest.raises(ValueError, match="values must have the shape"):
        verl.compute_gae_advantage_return(r, v[:-1], m, 0.99, 0.95)
    with pytest.raises(TypeError, match="token_level_rewards must be a floating"):
        verl.compute_gae_advantage_return(r.long(), v, m, 0.99, 0.95)
    with pytest.raises(ValueError, match="only 0 and 1"):
        verl.compute_gae_advantage_return(r, v, m * 0.5, 0.99, 0.95)
    with pytest.raises(ValueError, match="lam must lie in"):
        verl.compute_gae_advantage_return(r, v, m, 0.99, 1.5)
    with pytest.raises(ValueError, match="0-d tensor"):
        verl.compute_gae_advantage_return(r, v, m, torch.tensor([0.9, 0.9]), 0.95)
    with pytest.raises(ValueError, match="at least two"):
        verl.compute_gae_advantage_return(r, v, torch.zeros_like(m), 0.99, 0.95)
    with pytest.raises(ValueError, match="needs config"):
        verl.compute_reinforce_plus_plus_outcome_advantage(r, m)


# ----------------------------------------------------------------------------- patch()


def _original_gae(*args, **kwargs):
    return "verl's gae"


def _original_rpp(*args, **kwargs):
    return "verl's reinforce++"


@pytest.fixture
def fake_verl(monkeypatch):
    """A stand-in for verl.trainer.ppo.core_algos: the enum, the registry and verl's lookup."""
    core_algos = types.ModuleType("verl.trainer.ppo.core_algos")

    class AdvantageEstimator(str, enum.Enum):
        GAE = "gae"
        REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
        GRPO = "grpo"

    core_algos.AdvantageEstimator = AdvantageEstimator
    core_algos.ADV_ESTIMATOR_REGISTRY = {"gae": _original_gae, "reinforce_plus_plus": _original_rpp, "grpo": len}
    core_algos.compute_gae_advantage_return = _original_gae
    core_algos.compute_reinforce_plus_plus_outcome_advantage = _original_rpp
    core_algos.get_adv_estimator_fn = lambda name: core_algos.ADV_ESTIMATOR_REGISTRY[getattr(name, "value", name)]
    names = ["verl", "verl.trainer", "verl.trainer.ppo"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", core_algos)
    sys.modules["verl.trainer.ppo"].core_algos = core_algos
    yield core_algos
    verl.unpatch()


def test_patch_registers_and_unpatch_restores(fake_verl):
    est = fake_verl.AdvantageEstimator
    verl.patch()
    verl.patch()  # idempotent
    assert fake_verl.get_adv_estimator_fn(est.GAE) is verl.compute_gae_advantage_return
    assert fake_verl.get_adv_estimator_fn("reinforce_plus_plus") is verl.compute_reinforce_plus_plus_outcome_advantage
    assert fake_verl.compute_gae_advantage_return is verl.compute_gae_advantage_return
    assert fake_verl.get_adv_estimator_fn("grpo") is len
    r, v, m = _batch()
    adv, ret = fake_verl.get_adv_estimator_fn(est.GAE)(token_level_rewards=r, values=v, response_mask=m, gamma=0.99,
                                                        lam=0.95)
    torch.testing.assert_close(ret, verl_loops.gae(r, v, m, 0.99, 0.95)[1])
    verl.unpatch()
    assert fake_verl.get_adv_estimator_fn(est.GAE) is _original_gae
    assert fake_verl.compute_reinforce_plus_plus_outcome_advantage is _original_rpp
    assert fake_verl.get_adv_estimator_fn("reinforce_plus_plus") is _original_rpp


def test_patch_without_verl(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)
    with pytest.raises(ImportError, match="needs verl"):
        verl.patch()
