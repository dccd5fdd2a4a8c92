"""rlscan.adapters.verl against the installed verl release's own functions
(``verl.trainer.ppo.core_algos``), called on the same inputs: random multi-turn masks,
EOS padding, per-token KL-style rewards, bf16 values, γ and λ as floats and 0-d tensors,
every option of every estimator. Skipped, with the reason, where verl is not installed
(the README's test command installs it).

What "the same" means: the token estimators' results before the whitening (the returns)
are verl's bit for bit in float32 on the CPU path (and with ``exact=True`` on the Triton
path); the whitened advantages and the outcome estimators differ from verl's only by the
rounding of their float32 statistics, which rlscan sums in float64 (:func:`assert_rounding`
bounds each element by the magnitudes the statistic's rounding scales).
"""
import collections
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlscan
from rlscan.adapters import _verl_token_baseline, verl
from rlscan_testing import count_example, path_for

EPS32 = float(torch.finfo(torch.float32).eps)


@pytest.fixture(scope="module")
def core_algos():
    return pytest.importorskip("verl.trainer.ppo.core_algos",
                               reason="verl is not installed (the README's test command installs verl==0.9.1)")


def batch(B=24, T=96, seed=0, value_dtype=torch.float32, mask_dtype=torch.int64):
    """Responses as verl holds them: EOS padding at random lengths (one empty, one full),
    observation spans inside every third response, a KL-style reward on every response token
    and a score at its last one; rewards on masked tokens too (verl ignores them)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0], lengths[1] = 0, T
    t = torch.arange(T)
    m = t[None] < lengths[:, None]
    for b in range(2, B, 3):
        for _ in range(3):
            start = int(torch.randint(0, T, (1,), generator=g))
            m[b, start:start + int(torch.randint(1, T // 6 + 2, (1,), generator=g))] = False
    r = torch.randn(B, T, generator=g) * 0.02
    r[torch.arange(B), (lengths - 1).clamp(min=0)] += torch.randn(B, generator=g)
    v = (torch.randn(B, T, generator=g) * 3).to(value_dtype)
    return r, v, m.to(mask_dtype)


def assert_rounding(got, want, terms, k=16):
    """``|got − want| ≤ k·eps32·(|want| + terms)``: equal up to the float32 rounding of
    statistics whose rounding is scaled by ``terms`` (broadcast to the shape)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    eps = EPS32 if got.dtype != torch.float64 else EPS32  # verl's statistics are float32 even then
    bound = k * eps * (want.double().abs() + torch.as_tensor(terms, dtype=torch.float64).expand(want.shape))
    excess = (got.double() - want.double()).abs() - bound
    assert float(excess.max()) <= 0, f"max |got - want| {float((got.double() - want.double()).abs().max()):.3g}"


def whitening_terms(x, m):
    """What the whitening's float32 statistics scale: ``(|x| + mean|x|) / σ`` over the batch
    (the mean's sum rounds with the size of its terms)."""
    kept = x.double()[m != 0]
    return (x.double().abs() + kept.abs().mean()) / kept.std()


# ----------------------------------------------------------------------------- GAE


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float32, torch.float64])
@pytest.mark.parametrize("coefs", ["floats", "float32 tensors", "float64 tensors", "ones"])
def test_gae_is_verls(core_algos, mask_dtype, coefs):
    r, v, m = batch(seed=1, mask_dtype=mask_dtype)
    gamma, lam = {"floats": (0.99, 0.95), "ones": (1.0, 1.0),
                  "float32 tensors": (torch.tensor(0.97), torch.tensor(0.9)),
                  "float64 tensors": (torch.tensor(0.97, dtype=torch.float64), torch.tensor(0.3, dtype=torch.float64))
                  }[coefs]
    with rlscan.use_backend("cpu"):
        adv, ret = verl.compute_gae_advantage_return(r, v, m, gamma, lam)
    want_adv, want_ret = core_algos.compute_gae_advantage_return(r, v, m, gamma, lam)
    assert adv.dtype == want_adv.dtype and ret.dtype == want_ret.dtype
    if mask_dtype == torch.float64:
        # verl carries float64 from its second step on (its first, the last token, is float32); rlscan from the first
        carry = (r - v).abs().max()
        assert_rounding(ret, want_ret, carry)
        assert_rounding(adv, want_adv, whitening_terms(want_ret - v, m) + carry / (want_ret - v)[m != 0].std())
    else:
        assert torch.equal(ret, want_ret)
        assert_rounding(adv, want_adv, whitening_terms(want_ret - v, m))


@pytest.mark.parametrize("gamma", [0.99, 1.0])
def test_gae_bfloat16_values(core_algos, gamma):
    """verl's loop carries bf16 values (``γ·V'`` rounded to bf16, where γ < 1); rlscan reads
    them in place and computes in float32: verl's own results on the values in float32 bit
    for bit, and closer to the float64 truth than verl's bf16 loop."""
    r, v, m = batch(seed=2, value_dtype=torch.bfloat16)
    with rlscan.use_backend("cpu"):
        adv, ret = verl.compute_gae_advantage_return(r, v, m, gamma, 0.95)
    want_adv, want_ret = core_algos.compute_gae_advantage_return(r, v.float(), m, gamma, 0.95)
    assert torch.equal(ret, want_ret)
    assert_rounding(adv, want_adv, whitening_terms(want_ret - v.float(), m))
    bf16_adv, bf16_ret = core_algos.compute_gae_advantage_return(r, v, m, gamma, 0.95)
    assert bf16_ret.dtype == ret.dtype == torch.float32
    truth = core_algos.compute_gae_advantage_return(r.double(), v.double(), m, gamma, 0.95)[1]
    assert float((ret.double() - truth).abs().max()) <= float((bf16_ret.double() - truth).abs().max()) + 1e-6
    if gamma == 1.0:  # no bf16 product: verl's bf16 loop is its float32 loop
        assert torch.equal(ret, bf16_ret)


def test_gae_triton_path(core_algos, path):
    """The Triton path (the interpreter on the CPU): verl's returns bit for bit with
    ``exact=True``, to float32's rounding of a reordered scan without."""
    r, v, m = batch(seed=3, value_dtype=torch.bfloat16)
    want_adv, want_ret = core_algos.compute_gae_advantage_return(r, v.float(), m, 0.99, 0.95)
    exact = verl.compute_gae_advantage_return(r.to(path.device), v.to(path.device), m.to(path.device), 0.99, 0.95,
                                              exact=True)
    assert torch.equal(exact[1].cpu(), want_ret)
    fast = verl.compute_gae_advantage_return(r.to(path.device), v.to(path.device), m.to(path.device), 0.99, 0.95)
    torch.testing.assert_close(fast[1].cpu(), want_ret, rtol=1e-5, atol=1e-5)
    assert_rounding(fast[0].cpu(), want_adv, whitening_terms(want_ret - v.float(), m), k=1024)


# ----------------------------------------------------------------------------- REINFORCE++


def _configs():
    from omegaconf import OmegaConf

    from verl.trainer.config import AlgoConfig

    return {"AlgoConfig": AlgoConfig(gamma=0.97), "dict": {"gamma": 0.97}, "namespace": SimpleNamespace(gamma=0.97),
            "DictConfig": OmegaConf.create({"gamma": 0.97})}


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float32, torch.float64])
@pytest.mark.parametrize("config", ["AlgoConfig", "dict", "namespace", "DictConfig"])
def test_reinforce_plus_plus_is_verls(core_algos, path, mask_dtype, config):
    """verl 0.9's semantics: an observation span carries the running return through; the
    returns are 0 wherever the mask is 0. Returns bit for bit (the Triton path with
    ``exact=True``; without it, to float32's rounding of a reordered scan)."""
    if path.backend == "triton" and config != "AlgoConfig":
        pytest.skip("the config's kinds are read alike on both paths (the interpreter is slow)")
    config = _configs()[config]
    r, _, m = batch(seed=4, mask_dtype=mask_dtype)
    # verl reads config.gamma (a dict has none); rlscan also reads config["gamma"]
    want_adv, want_ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m, SimpleNamespace(gamma=0.97))
    on = dict(exact=True) if path.backend == "triton" else {}
    adv, ret = verl.compute_reinforce_plus_plus_outcome_advantage(r.to(path.device), m.to(path.device), config,
                                                                  index=None, **on)
    assert adv.dtype == want_adv.dtype and ret.dtype == want_ret.dtype
    assert torch.equal(ret.cpu(), want_ret)
    assert torch.equal(ret.cpu() == 0, (want_ret == 0))
    assert_rounding(adv.cpu(), want_adv, whitening_terms(want_ret, m))
    if path.backend == "triton":
        adv, ret = verl.compute_reinforce_plus_plus_outcome_advantage(r.to(path.device), m.to(path.device), config)
        torch.testing.assert_close(ret.cpu(), want_ret, rtol=1e-5, atol=1e-6)
        assert_rounding(adv.cpu(), want_adv, whitening_terms(want_ret, m), k=1024)


def test_reinforce_plus_plus_one_pass_failure_falls_back(core_algos, monkeypatch):
    """A failing one-pass kernel warns once; the return and the whitening then run apart."""
    from rlscan.ops.discounted_returns import kept_returns

    def broken(*args):
        raise RuntimeError("a compiler failure")

    monkeypatch.setattr(kept_returns, "_scan", broken)
    monkeypatch.setattr(kept_returns, "_failed", [])
    r, _, m = batch(seed=6)
    want_adv, want_ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m, SimpleNamespace(gamma=0.97))
    device = path_for("triton").device
    with rlscan.use_backend("triton"):
        with pytest.warns(UserWarning, match="one-pass kernel failed"):
            got = verl.compute_reinforce_plus_plus_outcome_advantage(r.to(device), m.to(device), {"gamma": 0.97})
        again = verl.compute_reinforce_plus_plus_outcome_advantage(r.to(device), m.to(device), {"gamma": 0.97})
    for adv, ret in (got, again):
        torch.testing.assert_close(ret.cpu(), want_ret, rtol=1e-5, atol=1e-6)
        assert_rounding(adv.cpu(), want_adv, whitening_terms(want_ret, m), k=1024)


def test_reinforce_plus_plus_config_errors():
    r, _, m = batch()
    with pytest.raises(ValueError, match="needs config"):
        verl.compute_reinforce_plus_plus_outcome_advantage(r, m)
    with pytest.raises(ValueError, match="config has no 'gamma'"):
        verl.compute_reinforce_plus_plus_outcome_advantage(r, m, config={})
    with pytest.raises(ValueError, match="config has no attribute 'gamma'"):
        verl.compute_reinforce_plus_plus_outcome_advantage(r, m, config=SimpleNamespace(lam=1.0))
    with pytest.raises(ValueError, match="config.gamma must lie in"):
        verl.compute_reinforce_plus_plus_outcome_advantage(r, m, config={"gamma": 1.5})


# ----------------------------------------------------------------------------- outcome estimators


def groups_of(B, seed, sizes=(1, 2, 3, 5, 8)):
    """uids as verl makes them (strings in an object array), in groups of mixed sizes, shuffled."""
    rng = np.random.default_rng(seed)
    labels, g = [], 0
    while len(labels) < B:
        left = B - len(labels)
        size = int(rng.choice(sizes))
        size = left if size >= left or left - size < min(sizes) else size  # the last group no smaller than any
        labels += [f"uid-{g}"] * size
        g += 1
    labels = np.array(labels[:B], dtype=object)
    rng.shuffle(labels)
    return labels


def outcome_batch(seed, mask_dtype, B=40, T=24, low_variance=False):
    r, _, m = batch(B, T, seed=seed, mask_dtype=mask_dtype)
    r = r * (m != 0)  # verl's outcome rewards sit on response tokens
    if low_variance:  # scores that differ in their last digits: the group's std is tiny
        r = torch.zeros_like(r)
        r[:, 0] = 1.0 + 1e-5 * torch.arange(B) % 3
    return r, m


def _group_terms(s, index, fn):
    """``[B, 1]``: ``fn(scores of the response's group, its score)`` per response, in float64."""
    s = s.double()
    out = torch.empty(len(s), 1, dtype=torch.float64)
    for i, label in enumerate(index):
        out[i] = fn(s[[j for j, x in enumerate(index) if x == label]], s[i])
    return out


def _std(x):
    return x.std() if len(x) > 1 else torch.tensor(1.0, dtype=torch.float64)


def _mean(x):
    return x.mean() if len(x) > 1 else torch.tensor(0.0, dtype=torch.float64)


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float32, torch.float64, torch.bool])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("epsilon", [1e-6, 0.1])
@pytest.mark.parametrize("low_variance", [False, True])
def test_grpo_is_verls(core_algos, mask_dtype, norm, epsilon, low_variance):
    r, m = outcome_batch(7, mask_dtype, low_variance=low_variance)
    index = groups_of(len(r), 7)
    got = verl.compute_grpo_outcome_advantage(r, m, index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm)
    want = core_algos.compute_grpo_outcome_advantage(r, m, index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm)
    assert got[0] is got[1] and want[0] is want[1]
    scale = (lambda g, s: (s.abs() + _mean(g).abs()) / (_std(g) + epsilon)) if norm else (
        lambda g, s: s.abs() + _mean(g).abs())
    assert_rounding(got[0], want[0], _group_terms(r.sum(-1), index, scale))


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float32, torch.bool])
@pytest.mark.parametrize("norm", [True, False, None])
def test_grpo_passk_is_verls(core_algos, mask_dtype, norm):
    """``config.get("norm_adv_by_std_in_grpo", True)`` decides, as in verl (None: not in the config)."""
    from verl.trainer.config import AlgoConfig

    r, m = outcome_batch(8, mask_dtype)
    index = groups_of(len(r), 8, sizes=(2, 3, 5))
    config = AlgoConfig() if norm is None else {"norm_adv_by_std_in_grpo": norm}
    if norm is None:
        assert "norm_adv_by_std_in_grpo" in config  # AlgoConfig's default, True
    got = verl.compute_grpo_passk_outcome_advantage(r, m, index, config=config)
    want = core_algos.compute_grpo_passk_outcome_advantage(r, m, index, config=config)
    assert got[0] is got[1]
    assert_rounding(got[0], want[0], _group_terms(r.sum(-1), index, lambda g, s: 2 * g.abs().max() / _std(g)))
    assert torch.equal(got[0] != 0, want[0] != 0)
    with pytest.raises(ValueError, match="at least 2 responses"):
        verl.compute_grpo_passk_outcome_advantage(r, m, groups_of(len(r), 8, sizes=(1, 2)), config=config)
    with pytest.raises(ValueError, match="needs config"):
        verl.compute_grpo_passk_outcome_advantage(r, m, index)


@pytest.mark.parametrize("name", ["rloo", "opo", "gpg", "reinforce_plus_plus_baseline"])
@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.float32, torch.float64, torch.bool])
@pytest.mark.parametrize("index_kind", ["uids", "ints", "list"])
def test_group_estimators_are_verls(core_algos, name, mask_dtype, index_kind):
    r, m = outcome_batch(9, mask_dtype)
    index = groups_of(len(r), 9)
    if index_kind == "ints":
        index = np.array([int(x.split("-")[1]) for x in index], dtype=np.int64)
    elif index_kind == "list":
        index = list(index)
    member = name.upper()
    ours = getattr(verl, verl._ESTIMATORS[member][1])
    theirs = getattr(core_algos, verl._ESTIMATORS[member][1])
    kwargs = dict(f_norm=0.7) if name == "gpg" else {}
    got = ours(r, m, index, config=None, **kwargs)
    want = theirs(r, m, index, config=None, **kwargs)
    assert got[0] is got[1] and want[0] is want[1]
    s = r.sum(-1)
    if name == "rloo":
        terms = _group_terms(s, index, lambda g, x: len(g) / max(len(g) - 1, 1) * (x.abs() + g.abs().max()))
    elif name == "opo":
        terms = _group_terms(s, index, lambda g, x: x.abs() + g.abs().max())
    elif name == "gpg":
        terms = _group_terms(s, index, lambda g, x: (x.abs() + g.abs().max()) * len(s) / 0.7)
    else:
        centred = s.double() - _group_terms(s, index, lambda g, x: _mean(g))[:, 0]
        x = centred[:, None].expand(m.shape)
        terms = _group_terms(s, index, lambda g, x: x.abs() + g.abs().max()) * (
            whitening_terms(x, m).max() / (x.abs().max() + 1))
    assert_rounding(got[0], want[0], terms)


def test_low_variance_groups_like_verls_own_check(core_algos):
    """verl's own check of its vectorised GRPO (scores 1.0 and 1.00001): the same to 1e-5."""
    r = torch.tensor([[1.0], [1.00001], [2.0], [2.00001]])
    m = torch.ones_like(r)
    index = np.array(["prompt-a", "prompt-a", "prompt-b", "prompt-b"], dtype=object)
    for name in ("compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage"):
        got = getattr(verl, name)(r, m, index)
        want = getattr(core_algos, name)(r, m, index)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_group_estimator_errors():
    r, _, m = batch()
    with pytest.raises(ValueError, match="index .* is required"):
        verl.compute_grpo_outcome_advantage(r, m, None)
    with pytest.raises(ValueError, match="one group label per response"):
        verl.compute_rloo_outcome_advantage(r, m, np.arange(3))
    with pytest.raises(TypeError, match="index must be"):
        verl.compute_opo_outcome_advantage(r, m, torch.zeros(len(r)))
    with pytest.raises(TypeError, match="norm_adv_by_std_in_grpo must be a bool"):
        verl.compute_grpo_outcome_advantage(r, m, np.arange(len(r)), norm_adv_by_std_in_grpo="yes")
    with pytest.raises(ValueError, match="at least two tokens"):
        verl.compute_reinforce_plus_plus_baseline_outcome_advantage(r, torch.zeros_like(m), np.arange(len(r)))


@pytest.mark.parametrize("name", ["grpo", "grpo_passk", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline"])
@pytest.mark.parametrize("rows", ["row loop", "strided"])
def test_group_estimators_refuse_a_mask_of_other_values(name, rows):
    """The mask's values are checked where the advantages are written over it: by the row
    loop as it reads the mask, or beside torch's product where the rows are not contiguous."""
    r, m = outcome_batch(7, torch.int64)
    m = m.clone()
    m[3, 5] = 2
    if rows == "strided":
        r, m = r.t().contiguous().t(), m.t().contiguous().t()
    fn = getattr(verl, f"compute_{name}_outcome_advantage")
    with pytest.raises(ValueError, match="response_mask must hold only 0 and 1"):
        fn(r, m, groups_of(len(r), 7, sizes=(2, 3)), config={"norm_adv_by_std_in_grpo": True})


# ----------------------------------------------------------------------------- optimal token baselines


def token_baseline_batch(seed, B, T, sizes, mask_dtype, dtype, with_weights):
    """verl's inputs to the optimal token baselines: responses of a few lengths (ties and a
    unique longest alike), some empty, observation spans in every third; rewards on the
    masked tokens too (verl multiplies them away); ``old_log_probs`` of ``π`` and
    ``sum_pi_squared`` at least ``π²`` (``w ≥ 0``, as from a real distribution)."""
    g = torch.Generator().manual_seed(seed)
    choices = torch.tensor([0, T // 3, T // 2, T, T])
    lengths = choices[torch.randint(0, len(choices), (B,), generator=g)]
    t = torch.arange(T)
    m = t[None] < lengths[:, None]
    for b in range(0, B, 3):
        start = int(torch.randint(0, T, (1,), generator=g))
        m[b, start:start + int(torch.randint(1, T // 4 + 2, (1,), generator=g))] = False
    r = torch.randn(B, T, generator=g) * 0.05
    r[torch.arange(B), (lengths - 1).clamp(min=0)] += torch.randn(B, generator=g)
    lp = -torch.rand(B, T, generator=g) * 4
    pi = lp.exp()
    sp = pi * pi + (1 - pi) ** 2 * torch.rand(B, T, generator=g)
    iw = (torch.rand(B, T, generator=g) * 2) if with_weights else None
    index = groups_of(B, seed, sizes=sizes)
    cast = (lambda x: x.to(dtype)) if dtype is not None else (lambda x: x)
    return cast(r), m.to(mask_dtype), index, cast(lp), cast(sp), None if iw is None else cast(iw)


def _token_baseline_terms(returns, index, m):
    """What the float32 rounding of a group's sums scales: the group's size times its
    largest return (the baseline is a weighted mean of the returns)."""
    out = torch.empty(len(returns), 1, dtype=torch.float64)
    G = returns.double().abs() * (m != 0)
    for i, label in enumerate(index):
        members = [j for j, x in enumerate(index) if x == label]
        out[i] = len(members) * float(G[members].max())
    return out


def _check_token_baseline(core_algos, multi_turn, r, m, index, lp, sp, iw, zero_tail, epsilon):
    """rlscan's estimator against verl's on the same inputs: the returns bit for bit; the
    advantages within the float32 rounding of the group sums, and bit for bit where every
    group has at most 3 responses (each torch reduction then adds in order); NaN alike."""
    name = ("compute_multi_turn_optimal_token_baseline_advantage" if multi_turn
            else "compute_optimal_token_baseline_advantage")
    kwargs = dict(rollout_is_weights=iw, handle_zero_tail=zero_tail, epsilon=epsilon)
    adv, ret = getattr(verl, name)(r, m, index, lp, sp, **kwargs)
    want_adv, want_ret = getattr(core_algos, name)(r, m, index, lp, sp, **kwargs)
    assert adv.dtype == want_adv.dtype and ret.dtype == want_ret.dtype
    assert torch.equal(ret, want_ret)
    assert torch.equal(adv.isnan(), want_adv.isnan())
    adv, want_adv = adv.nan_to_num(), want_adv.nan_to_num()
    if max(collections.Counter(index).values(), default=0) <= 3:
        assert torch.equal(adv, want_adv), float((adv - want_adv).abs().max())
    if adv.numel():
        assert_rounding(adv, want_adv, _token_baseline_terms(want_ret, index, m), k=4)


@pytest.mark.parametrize("form", ["rows", "tensors"])
@pytest.mark.parametrize("multi_turn", [False, True])
@given(data=st.data())
@settings(max_examples=10)
def test_optimal_token_baselines_are_verls(core_algos, form, multi_turn, data):
    """Both estimators, every option, on each form: the CPU loop (float32 rows contiguous in
    time, an integer or bool mask) and the torch form (the GPU's; on the CPU for other
    dtypes and layouts)."""
    count_example("test_optimal_token_baselines_are_verls")
    B, T = data.draw(st.integers(1, 12), "B"), data.draw(st.integers(1, 24), "T")
    sizes = data.draw(st.sampled_from([(1, 2, 3), (2, 3, 5), (4, 8), (1, 2, 9)]), "sizes")
    if form == "rows":
        mask_dtypes, dtypes, layouts = [torch.int64, torch.bool, torch.int32], [torch.float32], ["rows"]
    else:
        mask_dtypes, dtypes = [torch.int64, torch.bool, torch.float32, torch.float64], [torch.float32, torch.float64]
        layouts = ["rows", "time first"]
    mask_dtype = data.draw(st.sampled_from(mask_dtypes), "mask_dtype")
    dtype = data.draw(st.sampled_from(dtypes), "dtype")
    layout = data.draw(st.sampled_from(layouts), "layout")
    r, m, index, lp, sp, iw = token_baseline_batch(data.draw(st.integers(0, 999), "seed"), B, T, sizes, mask_dtype,
                                                   dtype, data.draw(st.booleans(), "rollout_is_weights"))
    if layout == "time first":  # the same values laid out time first in memory
        r, lp, sp = (x.t().contiguous().t() for x in (r, lp, sp))
    if form == "tensors" and _verl_token_baseline._rows_apply(r, m, lp, sp, iw):  # a row or a step: contiguous
        r, lp, sp, iw = (None if x is None else x.double() for x in (r, lp, sp, iw))
    assert _verl_token_baseline._rows_apply(r, m, lp, sp, iw) == (form == "rows")
    _check_token_baseline(core_algos, multi_turn, r, m, index, lp, sp, iw, data.draw(st.booleans(), "zero_tail"),
                          data.draw(st.sampled_from([1e-8, 1e-3, 0.0]), "epsilon"))  # 0: 0/0 where none is kept


@pytest.mark.parametrize("form", ["rows", "tensors"])
@pytest.mark.parametrize("multi_turn", [False, True])
@pytest.mark.parametrize("zero_tail", [False, True])
def test_optimal_token_baseline_groups(core_algos, form, multi_turn, zero_tail):
    """The groups each rule singles out: one response with tokens beside empty ones (a group
    of one for the multi-turn estimator), a tie for the longest, a unique longest, a group of
    one, an all-empty group; verl's numbers bit for bit (groups of at most 3)."""
    T = 12
    lengths = [7, 0, 0, 9, 9, 4, 11, 3, 6, 0, 0]
    index = np.array(["a", "a", "a", "b", "b", "b", "c", "c", "d", "e", "e"], dtype=object)
    m = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).long()
    m[6, 2:5] = 0  # an observation span: the multi-turn estimator aligns ranks, not positions
    r, _, _, lp, sp, iw = token_baseline_batch(1, len(lengths), T, (2,), torch.int64, None, True)
    if form == "tensors":
        r, lp, sp, iw = r.double(), lp.double(), sp.double(), iw.double()
    _check_token_baseline(core_algos, multi_turn, r, m, index, lp, sp, iw, zero_tail, 1e-8)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0)])
def test_optimal_token_baselines_of_nothing(core_algos, shape):
    r, lp, sp = torch.randn(shape), -torch.rand(shape), torch.rand(shape)
    m = torch.ones(shape, dtype=torch.int64)
    for multi_turn in (False, True):
        _check_token_baseline(core_algos, multi_turn, r, m, np.array(["a"] * shape[0], dtype=object), lp, sp, None,
                              True, 1e-8)


def test_group_sums_add_in_torchs_order():
    """The CPU loop's group sums are torch's ``sum(dim=0)`` bit for bit (its ``multi_row_sum``
    order), from one response to groups large enough for every level of its cascade."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the order is checked against torch's x86 kernels")
    g = torch.Generator().manual_seed(0)
    for n in (1, 2, 5, 16, 17, 40, 256, 300, 4097):
        x = torch.randn(n, 64, generator=g) * torch.rand(n, 64, generator=g) ** 4 * 1000
        out = np.empty(64, np.float32)
        _verl_token_baseline._tree_sums(x.numpy(), n, 64, np.empty((4, 64), np.float32), out)
        assert torch.equal(torch.from_numpy(out), x.sum(dim=0)), n


@pytest.mark.parametrize("multi_turn", [False, True])
def test_optimal_token_baselines_on_threads(core_algos, monkeypatch, multi_turn):
    """The CPU loop's groups split between threads (as on a large batch: its first call), and
    all on the calling thread (its second), give the same bits."""
    monkeypatch.setattr(_verl_token_baseline, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(_verl_token_baseline, "_ways_of", collections.OrderedDict())
    r, m, index, lp, sp, iw = token_baseline_batch(5, 40, 33, (2, 3, 5), torch.int64, None, True)
    name = ("compute_multi_turn_optimal_token_baseline_advantage" if multi_turn
            else "compute_optimal_token_baseline_advantage")
    want_adv, want_ret = getattr(core_algos, name)(r, m, index, lp, sp, iw)
    first, second = (getattr(verl, name)(r, m, index, lp, sp, iw) for _ in range(2))
    # one batch, run once each way (none where numba has one thread)
    assert [ways.runs for ways in _verl_token_baseline._ways_of.values()] == \
        ([[1, 1]] if _verl_token_baseline._threads() > 1 else [])
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert torch.equal(first[1], want_ret)
    assert_rounding(first[0], want_adv, _token_baseline_terms(want_ret, index, m), k=4)


@pytest.mark.parametrize("form", ["rows", "tensors"])
@pytest.mark.parametrize("multi_turn", [False, True])
@pytest.mark.parametrize("mask_dtype, value, at", [(torch.int64, 2, 4), (torch.int64, -1, 9), (torch.int32, 256, 0),
                                                   (torch.int16, 3, 9), (torch.int16, 256, 9), (torch.uint8, 255, 8)])
def test_optimal_token_baseline_refuses_other_mask_values(form, multi_turn, mask_dtype, value, at):
    """The CPU loop reads the mask as bytes: a value whose low byte is 0 or 1 but another is
    not (256), and one in the bytes after the row's last 8-byte word (10 tokens of 2 bytes
    or 1), are refused as any other."""
    r, m, index, lp, sp, _ = token_baseline_batch(3, 6, 10, (2, 3), mask_dtype, None, False)
    m[2, at] = value
    if form == "tensors":
        r, lp, sp = r.double(), lp.double(), sp.double()
    fn = (verl.compute_multi_turn_optimal_token_baseline_advantage if multi_turn
          else verl.compute_optimal_token_baseline_advantage)
    with pytest.raises(ValueError, match="response_mask must hold only 0 and 1"):
        fn(r, m, index, lp, sp)


def test_optimal_token_baseline_bad_input():
    r, m, index, lp, sp, _ = token_baseline_batch(3, 6, 10, (2, 3), torch.int64, None, False)
    fn = verl.compute_optimal_token_baseline_advantage
    with pytest.raises(ValueError, match="sum_pi_squared must have the shape"):
        fn(r, m, index, lp, sp[:, :-1])
    with pytest.raises(TypeError, match="old_log_probs must be a floating tensor"):
        fn(r, m, index, lp.long(), sp)
    with pytest.raises(TypeError, match="rollout_is_weights must be a torch.Tensor"):
        fn(r, m, index, lp, sp, rollout_is_weights=1.0)
    with pytest.raises(TypeError, match="handle_zero_tail must be a bool"):
        fn(r, m, index, lp, sp, handle_zero_tail=1)
    with pytest.raises(TypeError, match="epsilon must be a float"):
        fn(r, m, index, lp, sp, epsilon="1e-8")
    with pytest.raises(ValueError, match="index .* is required"):
        fn(r, m, None, lp, sp)
    with pytest.raises(ValueError, match="one group label per response"):
        fn(r, m, index[:-1], lp, sp)
    with pytest.raises(ValueError, match="token_level_rewards must be"):
        fn(r[0], m[0], index, lp[0], sp[0])


# ----------------------------------------------------------------------------- GDPO


def gdpo_inputs(seed, B, T, mask_dtype, keys, prompt_length=5):
    """verl's trainer's GDPO arguments: per-key rewards in ``non_tensor_batch`` (float and
    integer arrays, a -0.0 among them), ``batch`` with the prompts and the attention mask
    (an empty response's reward sits at its last column, as verl's index -1 puts it)."""
    r, _, m = batch(B, T, seed=seed, mask_dtype=mask_dtype)
    r = r * (m != 0)
    rng = np.random.default_rng(seed)
    lengths = (m != 0).long().sum(-1)
    attention = torch.cat([torch.ones(B, prompt_length, dtype=torch.int64),
                           (torch.arange(T)[None] < lengths[:, None]).long()], dim=1)
    non_tensor = {"uid": groups_of(B, seed), "acc": rng.integers(0, 2, B), "fmt": rng.normal(size=B),
                  "len": -rng.random(B)}
    non_tensor["fmt"][0] = -0.0
    tensors = {"prompts": torch.zeros(B, prompt_length, dtype=torch.int64), "attention_mask": attention}
    return r, m, non_tensor["uid"], non_tensor, tensors


@given(data=st.data())
@settings(max_examples=25)
def test_gdpo_is_verls(core_algos, data):
    """verl's GDPO (its own GRPO per reward key, then ``masked_whiten``) on the same inputs,
    with every option: the reward keys and weights from each kind of config, or the token
    rewards alone; within the float32 rounding of verl's statistics."""
    from omegaconf import OmegaConf

    from verl.trainer.config import AlgoConfig

    count_example("test_gdpo_is_verls")
    B, T = data.draw(st.integers(2, 24), "B"), data.draw(st.integers(1, 20), "T")
    mask_dtype = data.draw(st.sampled_from([torch.int64, torch.bool, torch.float32, torch.float64]), "mask_dtype")
    keys = data.draw(st.sampled_from([None, ["acc"], ["acc", "fmt", "len"]]), "keys")
    weights = None if keys is None else data.draw(st.sampled_from([None, [0.3, 1.7, 1.0, 5.0][:len(keys)]]),
                                                  "weights")
    kind = data.draw(st.sampled_from(["AlgoConfig", "dict", "DictConfig"]), "config")
    norm = data.draw(st.booleans(), "norm_adv_by_std_in_grpo")
    epsilon = data.draw(st.sampled_from([1e-6, 0.1]), "epsilon")
    r, m, index, non_tensor, tensors = gdpo_inputs(data.draw(st.integers(0, 999), "seed"), B, T, mask_dtype, keys)
    if int((m != 0).sum()) < 2:
        return
    kwargs = dict(epsilon=epsilon, norm_adv_by_std_in_grpo=norm)
    if keys is not None:
        fields = dict(gdpo_reward_keys=keys, gdpo_reward_weights=weights)
        config = {"AlgoConfig": lambda: AlgoConfig(**fields), "dict": lambda: fields,
                  "DictConfig": lambda: OmegaConf.create(fields)}[kind]()
        kwargs.update(config=config, non_tensor_batch=non_tensor, batch=tensors)
    got = verl.compute_gdpo_outcome_advantage(r, m, index, **kwargs)
    want = core_algos.compute_gdpo_outcome_advantage(r, m, index, **kwargs)
    assert got[0] is got[1] and got[0].dtype == want[0].dtype
    rewards = [r.sum(-1)] if keys is None else [torch.tensor(non_tensor[k], dtype=torch.float32) for k in keys]
    assert_rounding(got[0], want[0], _gdpo_terms(rewards, weights or [1.0] * len(rewards), index, m, norm, epsilon))


def _gdpo_terms(rewards, weights, index, m, norm, epsilon):
    """What the float32 rounding of verl's statistics scales in GDPO's advantages: each
    GRPO advantage's ``(|s| + |μ|) / (σ + ε)``, weighted, and the whitening's, over the
    whitening's ``σ``."""
    x = torch.zeros(len(index), 1, dtype=torch.float64)
    terms = torch.zeros(len(index), 1, dtype=torch.float64)
    for w, s in zip(weights, rewards):
        scale = (lambda g: _std(g) + epsilon) if norm else (lambda g: 1.0)
        x += w * _group_terms(s, index, lambda g, v: (v - _mean(g)) / scale(g))
        terms += abs(w) * _group_terms(s, index, lambda g, v: (v.abs() + _mean(g).abs()) / scale(g))
    kept = x.expand(m.shape)[m != 0]
    spread = (kept.var() + 1e-8).sqrt()
    return (terms + x.abs() + kept.abs().mean()) / spread


def test_gdpo_errors():
    r, m, index, non_tensor, tensors = gdpo_inputs(1, 8, 6, torch.int64, None)
    fn = verl.compute_gdpo_outcome_advantage
    with pytest.raises(ValueError, match="needs config.gdpo_reward_keys"):
        fn(r, m, index, config={"gdpo_reward_keys": None}, non_tensor_batch=non_tensor, batch=tensors)
    with pytest.raises(ValueError, match="'nope' is not in non_tensor_batch"):
        fn(r, m, index, config={"gdpo_reward_keys": ["acc", "nope"]}, non_tensor_batch=non_tensor, batch=tensors)
    with pytest.raises(ValueError, match="a weight for each of the 2"):
        fn(r, m, index, config={"gdpo_reward_keys": ["acc", "fmt"], "gdpo_reward_weights": [1.0]},
           non_tensor_batch=non_tensor, batch=tensors)
    with pytest.raises(ValueError, match="one reward per response"):
        fn(r, m, index, config={"gdpo_reward_keys": ["x"]}, non_tensor_batch={"x": np.zeros(3)}, batch=tensors)
    wide = dict(tensors, attention_mask=torch.ones(8, 5 + 7, dtype=torch.int64))  # 7 response tokens of 6
    with pytest.raises(ValueError, match="counts more than the 6 tokens"):
        fn(r, m, index, config={"gdpo_reward_keys": ["acc"]}, non_tensor_batch=non_tensor, batch=wide)
    with pytest.raises(TypeError, match="norm_adv_by_std_in_grpo must be a bool"):
        fn(r, m, index, norm_adv_by_std_in_grpo=None)
    with pytest.raises(ValueError, match="at least two tokens"):
        fn(r, torch.zeros_like(m), index)
    m = m.clone()
    m[1, 1] = 3
    with pytest.raises(ValueError, match="response_mask must hold only 0 and 1"):
        fn(r, m, index)


# ----------------------------------------------------------------------------- inputs


def test_bad_input():
    r, v, m = batch()
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
    with pytest.raises(TypeError, match="exact must be a bool"):
        verl.compute_gae_advantage_return(r, v, m, 0.99, 0.95, exact=1)


# ----------------------------------------------------------------------------- patch() and the release


@pytest.fixture
def patched(core_algos):
    yield core_algos
    verl.unpatch()


def test_patch_registers(patched):
    """Through verl's real registry (by enum member and by name), and the module's names its
    trainer calls. Idempotence and unpatch() are the contract's (integration_tests/test_adapter_contract.py)."""
    core_algos = patched
    est = core_algos.AdvantageEstimator
    originals = {name: core_algos.get_adv_estimator_fn(name) for name, _, _ in verl._ESTIMATORS.values()}
    verl.patch()
    for member, (name, attr, fn) in verl._ESTIMATORS.items():
        assert core_algos.get_adv_estimator_fn(getattr(est, member)) is fn
        assert core_algos.get_adv_estimator_fn(name) is fn
        assert getattr(core_algos, attr) is fn
    assert core_algos.get_adv_estimator_fn("grpo_vectorized") is not verl.compute_grpo_outcome_advantage
    r, v, m = batch()
    adv, ret = core_algos.get_adv_estimator_fn(est.GAE)(token_level_rewards=r, values=v, response_mask=m, gamma=0.99,
                                                        lam=0.95)
    assert torch.equal(ret, originals["gae"](r, v, m, 0.99, 0.95)[1])


def test_patch_without_verl(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", None)
    with pytest.raises(ImportError, match="needs verl"):
        verl.patch()


@pytest.mark.parametrize("version, ok", [("0.9.0", True), ("0.9.1", True), ("0.9.2.dev0", True), ("0.8.0", False),
                                         ("0.10.0", False), ("1.0", False), ("main", False)])
def test_release_range(version, ok):
    if ok:
        verl.check_release(version)
    else:
        with pytest.raises(ImportError, match=rf"follows verl >=0\.9\.0,<0\.10; verl {version} is installed"):
            verl.check_release(version)


def test_patch_refuses_a_release_outside_the_range(monkeypatch):
    core_algos = types.ModuleType("verl.trainer.ppo.core_algos")
    core_algos.ADV_ESTIMATOR_REGISTRY = {}
    monkeypatch.setitem(sys.modules, "verl.trainer.ppo.core_algos", core_algos)
    monkeypatch.setattr(verl, "_installed_verl", lambda: "0.8.0")
    with pytest.raises(ImportError, match="verl 0.8.0 is installed"):
        verl.patch()
    assert core_algos.ADV_ESTIMATOR_REGISTRY == {}
    with pytest.raises(ImportError, match="verl 0.8.0 is installed"):
        verl.compute_reinforce_plus_plus_outcome_advantage(*batch()[::2], {"gamma": 1.0})
