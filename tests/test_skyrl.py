"""rlscan.adapters.skyrl against the installed SkyRL releases' own functions (``ppo_utils`` of
``skyrl`` 0.4 and of ``skyrl-train`` 0.3, each where installed: the README's test command
installs both), called on the same inputs that hypothesis draws: responses right-aligned
(0.4's layout) or right-padded (0.3's), masks with observation spans, KL-style rewards on
every token, every mask dtype, γ and λ from 0 to 1, groups of mixed sizes (one included)
under every kind of label.

What "the same" means: the token estimators' returns are SkyRL's bit for bit (float32 and
float64, and with a float64 mask, where SkyRL carries float64); the whitened advantages
differ from SkyRL's only by the rounding of its float32 statistics, which rlscan sums in
float64 (:func:`assert_rounding`); GRPO, RLOO and MAXRL are SkyRL's bit for bit.
With ``skip_masked=True`` the token estimators are verl 0.9.1's (the semantics it names),
checked against verl's own functions where verl is installed.

SkyRL declares Python >= 3.12; ``tools/skyrl_py311.py`` imports its ``ppo_utils`` here.
"""
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import rlscan
from rlscan.adapters import _common, skyrl
from rlscan_testing import bitwise_equal, count_example, path_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import skyrl_py311  # noqa: E402

EPS32 = float(torch.finfo(torch.float32).eps)
RELEASES = sorted(skyrl_py311.MODULES)
GROUPED = ["compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage", "compute_maxrl_advantage"]
MASK_DTYPES = [torch.int64, torch.float32, torch.bool, torch.float64]


@pytest.fixture(scope="module")
def modules():
    found = skyrl_py311.ppo_utils()
    if not found:
        pytest.skip("SkyRL is not installed (the README's test command installs skyrl==0.4.0 and skyrl-train==0.3.1)")
    return found


@pytest.fixture(scope="module", params=RELEASES)
def ppo_utils(request, modules):
    if request.param not in modules:
        pytest.skip(f"{request.param} is not installed")
    return modules[request.param]


@pytest.fixture
def fresh_mode():
    yield
    skyrl.unpatch()


# ----------------------------------------------------------------------------- inputs


@st.composite
def responses(draw, max_B=6, max_T=40):
    """``(rewards, values, mask)``: responses right-aligned (SkyRL 0.4's layout) or right-padded
    (0.3's) at random lengths, with observation spans where the mask is a loss mask; a small
    reward on every token (the KL term), a score at each response's last token."""
    B, T = draw(st.integers(1, max_B)), draw(st.integers(1, max_T))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    t = torch.arange(T)
    aligned = draw(st.booleans())
    m = t[None] >= (T - lengths)[:, None] if aligned else t[None] < lengths[:, None]
    if draw(st.booleans()):  # observation spans inside the responses
        m &= torch.rand(B, T, generator=g) < 0.7
    last = torch.full((B,), T - 1) if aligned else (lengths - 1).clamp(min=0)
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.float64]))
    r = torch.randn(B, T, generator=g, dtype=dtype) * 0.01
    r[torch.arange(B), last] += torch.randn(B, generator=g, dtype=dtype)
    v = torch.randn(B, T, generator=g, dtype=dtype) * 3
    return r, v, m.to(draw(st.sampled_from(MASK_DTYPES)))


unit = st.one_of(st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0]), st.floats(0.0, 1.0))


def assert_rounding(got, want, x, m, k=16):
    """Whitened ``x``: ``|got − want| ≤ k·eps32·(|want| + (|x| + mean|x|) / σ)``, the rounding of
    float32 statistics (``μ``, ``σ`` over the kept positions; ``μ``'s sum rounds with the size
    of its terms, ``mean|x|``, which is more than ``|μ|`` where they cancel)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    kept = x.double()[m != 0]
    terms = (x.double().abs() + kept.abs().mean()) / kept.std()
    bound = k * EPS32 * (want.double().abs() + terms)
    assert bool(((got.double() - want.double()).abs() <= bound).all()), float((got - want).abs().max())


def both(ours, theirs):
    """Both calls' results, or both calls' ``ValueError`` (too few kept tokens to whiten)."""
    try:
        want = theirs()
    except ValueError:
        with pytest.raises(ValueError):
            ours()
        return None, None
    return ours(), want


# ----------------------------------------------------------------------------- token estimators


@given(batch=responses(), gamma=unit, lambd=unit)
def test_gae_is_skyrls(ppo_utils, batch, gamma, lambd):
    r, v, m = batch
    got, want = both(lambda: skyrl.compute_gae_advantage_return(r, v, m, gamma, lambd),
                     lambda: ppo_utils.compute_gae_advantage_return(r, v, m, gamma, lambd))
    if got is None:
        return
    count_example("test_gae_is_skyrls")
    assert bitwise_equal(got[1], want[1])
    assert_rounding(got[0], want[0], want[1] - v, m)


@given(batch=responses(), gamma=unit)
def test_reinforce_plus_plus_is_skyrls(ppo_utils, batch, gamma):
    """SkyRL's return restarts before every masked token; with a float64 mask its running
    return is float64 (rlscan's too)."""
    r, _, m = batch
    got, want = both(lambda: skyrl.compute_reinforce_plus_plus_outcome_advantage(r, m, gamma),
                     lambda: ppo_utils.compute_reinforce_plus_plus_outcome_advantage(r, m, gamma))
    if got is None:
        return
    count_example("test_reinforce_plus_plus_is_skyrls")
    assert bitwise_equal(got[1], want[1])
    assert_rounding(got[0], want[0], want[1], m)
    assert bool((got[0][m == 0] == 0).all())


@pytest.fixture(scope="module")
def core_algos():
    return pytest.importorskip("verl.trainer.ppo.core_algos",
                               reason="verl is not installed (the README's test command installs verl==0.9.1)")


@given(batch=responses(), gamma=unit, lambd=unit)
def test_skip_masked_is_verls(core_algos, batch, gamma, lambd):
    """``skip_masked=True``: masked tokens are skipped steps of GAE's recursion and carry
    REINFORCE++'s return through, which verl 0.9's own functions compute. The dtypes stay
    SkyRL's: verl's GAE carries float64 from a float64 mask (it gets the mask in float32
    here) and takes no bool mask (it gets those as int64)."""
    r, v, m = batch
    m = m.long() if m.dtype == torch.bool else m
    verl_m = m.float() if m.dtype == torch.float64 else m
    got, want = both(lambda: skyrl.compute_gae_advantage_return(r, v, m, gamma, lambd, skip_masked=True),
                     lambda: core_algos.compute_gae_advantage_return(r, v, verl_m, gamma, lambd))
    if got is not None:
        count_example("test_skip_masked_is_verls")
        assert bitwise_equal(got[1], want[1])
        assert_rounding(got[0], want[0], want[1] - v, m)
    got, want = both(lambda: skyrl.compute_reinforce_plus_plus_outcome_advantage(r, m, gamma, skip_masked=True),
                     lambda: core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m, SimpleNamespace(
                         gamma=gamma)))
    if got is not None:
        assert bitwise_equal(got[1], want[1])
        assert_rounding(got[0], want[0], want[1], m)


def test_token_estimators_on_the_triton_path(modules):
    """On the Triton path (CUDA tensors; here the interpreter on the CPU), the broadcast mask of
    ones and REINFORCE++'s terminations run there too: SkyRL's returns to float32's rounding of
    a reordered scan (bit for bit is the CPU path's, where SkyRL computes)."""
    ppo_utils = next(iter(modules.values()))
    g = torch.Generator().manual_seed(3)
    r, v = torch.randn(4, 40, generator=g), torch.randn(4, 40, generator=g) * 3
    m = (torch.arange(40)[None] >= torch.tensor([[0], [9], [20], [39]])).long()
    m[2, 25:30] = 0
    device = path_for("triton").device
    with rlscan.use_backend("triton"):
        for skip in (False, True):
            got = skyrl.compute_gae_advantage_return(r.to(device), v.to(device), m.to(device), 0.99, 0.95,
                                                     skip_masked=skip)
            want = (core_gae(r, v, m) if skip else ppo_utils.compute_gae_advantage_return(r, v, m, 0.99, 0.95))
            torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-5)
        got = skyrl.compute_reinforce_plus_plus_outcome_advantage(r.to(device), m.to(device), 0.97)
        want = ppo_utils.compute_reinforce_plus_plus_outcome_advantage(r, m, 0.97)
        torch.testing.assert_close(got[1].cpu(), want[1], rtol=1e-5, atol=1e-5)
        assert_rounding(got[0].cpu(), want[0], want[1], m, k=1024)


def core_gae(r, v, m):
    """The masked GAE on the CPU path: what ``skip_masked=True`` computes there."""
    with rlscan.use_backend("cpu"):
        return skyrl.compute_gae_advantage_return(r, v, m, 0.99, 0.95, skip_masked=True)


# ----------------------------------------------------------------------------- group estimators


@st.composite
def grouped(draw, max_B=24, max_T=12):
    """``(rewards, mask, index)``: groups of 1 to 9 responses, shuffled, labelled as SkyRL's
    trainer labels them (uid strings in a list or an array) or by integers; scores from
    Gaussian, 0/1 (ties) or nearly equal (a tiny std) rewards."""
    sizes = draw(st.lists(st.integers(1, 9), min_size=1, max_size=6))
    B, T = sum(sizes), draw(st.integers(1, max_T))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    labels = np.repeat(np.arange(len(sizes)), sizes)[torch.randperm(B, generator=g).numpy()]
    kind = draw(st.sampled_from(["uids", "uid array", "ints", "list"]))
    index = {"uids": [f"uid-{x}" for x in labels], "uid array": np.array([f"{x}" for x in labels]),
             "ints": labels.astype(np.int64), "list": [int(x) for x in labels]}[kind]
    dtype = draw(st.sampled_from([torch.float32, torch.float32, torch.float64]))
    rewards = draw(st.sampled_from(["gaussian", "binary", "close"]))
    r = torch.zeros(B, T, dtype=dtype)
    r[:, -1] = {"gaussian": torch.randn(B, generator=g, dtype=dtype) * 3,
                "binary": torch.randint(0, 2, (B,), generator=g).to(dtype),
                "close": 1.0 + 1e-5 * torch.randint(0, 3, (B,), generator=g).to(dtype)}[rewards]
    r += torch.randn(B, T, generator=g, dtype=dtype) * 0.01 * draw(st.sampled_from([0, 1]))
    m = (torch.rand(B, T, generator=g) < 0.8).to(draw(st.sampled_from(MASK_DTYPES)))
    return r, m, index


@pytest.mark.parametrize("name", GROUPED)
@given(batch=grouped(), epsilon=st.sampled_from([1e-6, 0.1]), norm=st.booleans())
def test_group_estimators_are_skyrls(ppo_utils, name, batch, epsilon, norm):
    if not hasattr(ppo_utils, name):
        pytest.skip(f"{ppo_utils.__name__} has no {name}")
    r, m, index = batch
    kwargs = {"compute_grpo_outcome_advantage": dict(epsilon=epsilon, grpo_norm_by_std=norm),
              "compute_maxrl_advantage": dict(epsilon=epsilon)}.get(name, {})
    got = getattr(skyrl, name)(r, m, index, **kwargs)
    want = getattr(ppo_utils, name)(r, m, index, **kwargs)
    count_example("test_group_estimators_are_skyrls")
    assert got[0] is got[1]
    assert bitwise_equal(got[0], want[0]) and bitwise_equal(got[1], want[1])


def test_group_labels():
    """Labels group as SkyRL's dict groups them; an integer tensor groups by value; labels that
    do not order (strings beside integers) and NaN labels are refused by name."""
    r, m = torch.randn(6, 3), torch.ones(6, 3)
    want = skyrl.compute_rloo_outcome_advantage(r, m, np.array([3, 1, 3, 1, 1, 7]))[0]
    for index in ([b"c", b"a", b"c", b"a", b"a", b"z"], torch.tensor([3, 1, 3, 1, 1, 7]),
                  ("x", "y", "x", "y", "y", "")):
        assert bitwise_equal(skyrl.compute_rloo_outcome_advantage(r, m, index)[0], want)
    with pytest.raises(TypeError, match="index labels must be of one kind"):
        skyrl.compute_grpo_outcome_advantage(r, m, ["a", 1, "a", 1, 1, 2])
    with pytest.raises(ValueError, match="index holds NaN"):
        skyrl.compute_grpo_outcome_advantage(r, m, np.array([0.0, np.nan, 0, 0, 1, 1]))
    with pytest.raises(ValueError, match="one group label per response"):
        skyrl.compute_maxrl_advantage(r, m, ["a"] * 5)
    with pytest.raises(ValueError, match="index .* is required"):
        skyrl.compute_grpo_outcome_advantage(r, m, None)
    with pytest.raises(TypeError, match="index must be"):
        skyrl.compute_grpo_outcome_advantage(r, m, 3)


# ----------------------------------------------------------------------------- bad input


def test_bad_input():
    r, v, m = torch.randn(3, 5), torch.randn(3, 5), torch.ones(3, 5, dtype=torch.long)
    with pytest.raises(ValueError, match="response_mask must have the shape"):
        skyrl.compute_gae_advantage_return(r, v, m[:, :-1], 0.99, 0.95)
    with pytest.raises(ValueError, match="values must have the shape"):
        skyrl.compute_gae_advantage_return(r, v[:-1], m, 0.99, 0.95)
    with pytest.raises(TypeError, match="values must be a torch.Tensor"):
        skyrl.compute_gae_advantage_return(r, None, m, 0.99, 0.95)
    with pytest.raises(TypeError, match="token_level_rewards must be a floating"):
        skyrl.compute_reinforce_plus_plus_outcome_advantage(r.long(), m, 0.99)
    for fn in (lambda k: skyrl.compute_gae_advantage_return(r, v, k, 0.99, 0.95),
               lambda k: skyrl.compute_reinforce_plus_plus_outcome_advantage(r, k, 0.99),
               lambda k: skyrl.compute_reinforce_plus_plus_outcome_advantage(r, k, 0.99, skip_masked=True),
               lambda k: skyrl.compute_grpo_outcome_advantage(r, k, [0, 0, 1])):
        with pytest.raises(ValueError, match="response_mask must hold only 0 and 1"):
            fn(m * 0.5)
    with pytest.raises(ValueError, match="lambd must lie in"):
        skyrl.compute_gae_advantage_return(r, v, m, 0.99, 1.5)
    with pytest.raises(TypeError, match="gamma must be a float"):
        skyrl.compute_reinforce_plus_plus_outcome_advantage(r, m, "0.9")
    with pytest.raises(TypeError, match="skip_masked must be a bool"):
        skyrl.compute_gae_advantage_return(r, v, m, 0.99, 0.95, skip_masked=1)
    with pytest.raises(TypeError, match="grpo_norm_by_std must be a bool"):
        skyrl.compute_grpo_outcome_advantage(r, m, [0, 0, 1], grpo_norm_by_std="yes")
    with pytest.raises(TypeError, match="epsilon must be a float"):
        skyrl.compute_maxrl_advantage(r, m, [0, 0, 1], epsilon=None)


# ----------------------------------------------------------------------------- patch() and the releases


def test_patch_through_skyrls_registry(modules, fresh_mode):
    """``patch()`` reaches SkyRL's dispatcher (``compute_advantages_and_returns``, which the
    trainer calls) and the names ``ppo_utils`` exports, in every installed release; the mode
    follows ``patch(skip_masked=...)``. The round trip is the contract's
    (integration_tests/test_adapter_contract.py)."""
    r, v, m = torch.randn(4, 7), torch.randn(4, 7), torch.ones(4, 7, dtype=torch.long)
    m[::2, 5:] = 0
    m[1, 2:4] = 0
    skyrl.patch()
    for module in modules.values():
        registry = module.AdvantageEstimatorRegistry
        for name, (attr, fn) in skyrl._ESTIMATORS.items():
            if hasattr(module, attr):
                assert registry.get(name) is fn and getattr(module, attr) is fn
        call = dict(token_level_rewards=r, response_mask=m, index=np.array(["a", "a", "b", "b"]), values=v,
                    config=None, gamma=0.97, lambd=0.9)
        adv, ret = module.compute_advantages_and_returns(adv_estimator="gae", **call)
        assert bitwise_equal(ret, skyrl.compute_gae_advantage_return(r, v, m, 0.97, 0.9)[1])
        skyrl.patch(skip_masked=True)
        masked = module.compute_advantages_and_returns(adv_estimator="reinforce++", **call)[1]
        assert bitwise_equal(masked, skyrl.compute_reinforce_plus_plus_outcome_advantage(r, m, 0.97,
                                                                                         skip_masked=True)[1])
        assert not bitwise_equal(masked, skyrl.compute_reinforce_plus_plus_outcome_advantage(r, m, 0.97,
                                                                                             skip_masked=False)[1])
        skyrl.patch()


def test_patch_refuses_other_releases(monkeypatch):
    versions = {"skyrl": "0.5.0", "skyrl-train": None}
    monkeypatch.setattr(_common, "installed_version", lambda dist: versions[dist])
    with pytest.raises(ImportError, match=r"follows skyrl >=0.4.0,<0.5; skyrl 0.5.0 is installed"):
        skyrl.patch()
    versions.update({"skyrl": None, "skyrl-train": "0.2.9"})
    with pytest.raises(ImportError, match=r"skyrl-train 0.2.9 is installed"):
        skyrl.patch()
    versions.update({"skyrl-train": None})
    with pytest.raises(ImportError, match="needs SkyRL"):
        skyrl.patch()
    assert not skyrl.is_patched()
