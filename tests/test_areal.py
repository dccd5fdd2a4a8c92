"""rlscan.adapters.areal against the installed AReaL release's own code, on the same inputs:
``PPOActor._compute_advantages`` as it ships against the patched method (every output of the
data dict), and ``Normalization`` (``areal.utils.data``) against :func:`normalize` at every
level, on one process and across two gloo ranks. AReaL installs with ``--no-deps``; its
modules import here with stand-ins for the web and logging clients they never call
(``tools/areal_cpu_timing.py``). Skipped, with the reason, where AReaL is not installed.

What "the same" means: the GAE (advantages and returns) is AReaL's bit for bit on the CPU
path, and with ``exact=True`` on the Triton path; the normalisations agree to float32's
rounding (``assert_rounding``): AReaL sums in torch's order and rlscan in its own, both in
float64, and where AReaL rounds each token's leave-one-out mean to float32 before its squares,
rlscan takes the squares about the unrounded means.
"""
import importlib.util
import itertools
import sys
from pathlib import Path

import pytest
import torch

import rlscan
import rank_processes
from rlscan.adapters import areal
from rlscan_testing import path_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

EPS32 = float(torch.finfo(torch.float32).eps)
LEVELS = ("batch", "group", None)


@pytest.fixture(scope="module")
def modules():
    if importlib.util.find_spec("areal") is None:  # its package imports with the stand-ins only
        pytest.skip("AReaL is not installed (the README's test command installs areal==1.0.4)")
    from areal_cpu_timing import areal_modules

    return areal_modules()


def assert_rounding(got, want, k=4):
    """Within ``k`` float32 roundings of the result's magnitude (at least 1: a centred value
    near 0 carries its terms' rounding)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    bound = k * EPS32 * torch.maximum(want.double().abs(), torch.ones_like(want, dtype=torch.float64))
    excess = (got.double() - want.double()).abs() - bound
    assert float(excess.max()) <= 0, f"max |got - want| {float((got.double() - want.double()).abs().max()):.3g}"


def batch(B=16, S=48, seed=0, values=True, ref=False, prox=False):
    from areal_cpu_timing import batch as make

    d = make(B, S, seed)
    d["loss_mask"][1, :] = 0  # a sequence with no response token
    d["loss_mask"][2, 0] = 1  # a first token in the loss: the rolled mask keeps the last position
    if not values:
        del d["values"]
    g = torch.Generator().manual_seed(seed + 1)
    if ref:
        d["ref_logp"] = -torch.rand(B, S, generator=g)
    if prox:
        d["prox_logp"] = -torch.rand(B, S, generator=g)
    return d


def copy(d):
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in d.items()}


# ----------------------------------------------------------------------------- the actor's method


CONFIGS = {
    "defaults": (dict(), dict()),
    "no values, k3 against a reference": (dict(kl_estimator="k3", kl_ctl=0.05), dict(values=False, ref=True)),
    "recomputed log-probabilities, no-EOS scores zeroed": (
        dict(recompute_logprob=True, mask_no_eos_with_zero=True, discount=0.99, gae_lambda=0.9), dict(prox=True)),
    "decoupled loss, overlong penalty, reward scaling": (
        dict(use_decoupled_loss=True, overlong_reward_penalty=True, overlong_tokens=8, overlong_penalty_factor=0.5,
             max_new_tokens=40, reward_bias=-0.5, reward_scaling=2.0, reward_clip=1.0), dict()),
    "GRPO: group-normalised scores and advantages": ("grpo", dict()),
    "Dr.GRPO": ("dr_grpo", dict()),
    "RLOO": ("rloo", dict()),
    "PPO's batch adv_norm": ("batch", dict()),
}


def _config(name, cli_args):
    extra, _ = CONFIGS[name]
    if isinstance(extra, dict):
        return extra
    norm = cli_args.NormConfig
    return {"grpo": dict(reward_norm=norm(mean_level="group", std_level="group", group_size=4),
                         adv_norm=norm(mean_level="group", std_level="group", group_size=4)),
            "dr_grpo": dict(adv_norm=norm(mean_level="group", std_level=None, group_size=4)),
            "rloo": dict(adv_norm=norm(mean_level="group", mean_leave1out=True, std_level=None, group_size=4)),
            "batch": dict(adv_norm=norm(mean_level="batch", std_level="batch"))}[extra]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_compute_advantages_is_areals(modules, name):
    """Every entry of the data dict AReaL's method returns; the GAE bit for bit."""
    actor, _, cli_args = modules
    from areal_cpu_timing import actor_of

    config = _config(name, cli_args)
    ppo = actor_of(actor, cli_args, **{"discount": 1.0, "gae_lambda": 0.95, **config})
    d = batch(**CONFIGS[name][1])
    want = actor.PPOActor._compute_advantages(ppo, copy(d))
    with rlscan.use_backend("cpu"):
        got = areal.compute_advantages(ppo, copy(d))
    assert got.keys() == want.keys()
    for key in want:
        if key == "advantages" and ppo.adv_norm is not None:
            assert_rounding(got[key], want[key])
        elif isinstance(want[key], torch.Tensor):
            assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), key
    if ppo.adv_norm is None:
        assert torch.equal(got["advantages"].view(torch.int32), want["advantages"].view(torch.int32))  # signs of 0


def test_gae_on_the_triton_path(modules):
    """The Triton path (the interpreter on the CPU): AReaL's bit for bit with ``exact=True``,
    to float32's rounding of the reordered scan without."""
    actor, _, cli_args = modules
    from areal_cpu_timing import actor_of

    from rlscan import _backend

    if _backend.triton_version()[0] < _backend.MIN_TRITON:
        pytest.skip("rlscan's Triton path needs Triton >= 3.6")
    ppo = actor_of(actor, cli_args, discount=0.99, gae_lambda=0.95)
    want = actor.PPOActor._compute_advantages(ppo, batch(B=6, S=20, seed=3))
    no_eos = want["attention_mask"].sum(-1) == want["attention_mask"].shape[1]
    args = (want["tot_rewards"], want["values"], want["loss_mask"], no_eos, 0.99, 0.95)
    path = path_for("triton")
    with rlscan.use_backend("triton"):
        exact = areal.compute_gae(*(x.to(path.device) if isinstance(x, torch.Tensor) else x for x in args), exact=True)
        fast = areal.compute_gae(*(x.to(path.device) if isinstance(x, torch.Tensor) else x for x in args))
    assert torch.equal(exact[0].cpu(), want["advantages"]) and torch.equal(exact[1].cpu(), want["returns"])
    torch.testing.assert_close(fast[1].cpu(), want["returns"], rtol=1e-5, atol=1e-5)


def test_gae_arguments_are_named():
    r, m = torch.zeros(2, 5), torch.ones(2, 5)
    with pytest.raises(ValueError, match="discount must lie in"):
        areal.compute_gae(r, r, m, torch.ones(2, dtype=torch.bool), 1.5, 0.9)
    with pytest.raises(TypeError, match="gae_lambda must be a float"):
        areal.compute_gae(r, r, m, torch.ones(2, dtype=torch.bool), 1.0, "0.9")
    with pytest.raises(ValueError, match=r"seq_no_eos_mask must be a tensor \[B\]"):
        areal.compute_gae(r, r, m, torch.ones(3, dtype=torch.bool), 1.0, 0.9)
    with pytest.raises(ValueError, match=r"values must be 2-d \[B, S\]"):
        areal.compute_gae(r, r[0], m, torch.ones(2, dtype=torch.bool), 1.0, 0.9)


# ----------------------------------------------------------------------------- Normalization


def _inputs(B, S, seed, mask):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, S, generator=g) * 3 + 1
    if mask is None:
        return x, None
    m = (torch.rand(B, S, generator=g) > 0.3).to(mask)
    m[0] = 0
    return x, m


def test_normalization_is_areals(modules, path):
    """Every level of the mean and the std, leave-one-out means, biased and unbiased, groups
    of one and of four rows, with and without a mask, on ``[B, S]`` advantages and ``[B]``
    scores: AReaL's ``Normalization`` to float32's rounding (equal in every bit in all but the
    leave-one-out means with a batch std)."""
    _, data, cli_args = modules
    differing = []
    for mean, std, loo, unbiased, mask, size in itertools.product(LEVELS, LEVELS, (False, True), (True, False),
                                                                  (None, torch.float32, torch.bool), (1, 4)):
        if (loo and mean is None) or (not unbiased and std is None) or (size == 1 and "group" not in (mean, std)):
            continue  # an option the levels do not read: a case already run
        x, m = _inputs(8, 37, size, mask)
        config = cli_args.NormConfig(mean_level=mean, std_level=std, mean_leave1out=loo, std_unbiased=unbiased,
                                     group_size=size, eps=1e-5)
        want = data.Normalization(config)(x, m)
        got = areal.normalize(x.to(path.device), None if m is None else m.to(path.device), mean_level=mean,
                              std_level=std, mean_leave1out=loo, std_unbiased=unbiased, group_size=size).cpu()
        assert_rounding(got, want)
        if not torch.equal(got, want):
            differing.append((mean, std, loo))
        if m is None:  # the scores, one per row
            assert_rounding(areal.normalize(x[:, 0].to(path.device), mean_level=mean, std_level=std,
                                            mean_leave1out=loo, std_unbiased=unbiased, group_size=size).cpu(),
                            data.Normalization(config)(x[:, 0]))
    assert {d for d in differing if not (d[2] and d[0] == "group" and d[1] == "batch")} == set()


def test_a_mask_that_keeps_nothing_returns_x(modules):
    _, data, cli_args = modules
    x = torch.randn(4, 6)
    want = data.Normalization(cli_args.NormConfig(mean_level="group", group_size=2))(x, torch.zeros(4, 6))
    assert torch.equal(areal.normalize(x, torch.zeros(4, 6), mean_level="group", group_size=2), want)


def test_groups_must_divide_the_batch():
    """AReaL leaves the last rows of an uneven batch with a mean of 0 and a std of 0 (x/eps);
    rlscan refuses."""
    with pytest.raises(ValueError, match=r"group_size \(3\) must divide the batch's 8 rows"):
        areal.normalize(torch.randn(8, 4), mean_level="group", std_level="group", group_size=3)


# ----------------------------------------------------------------------------- across ranks


RANK_CASES = (("batch", "batch", False), ("group", "batch", False), ("batch", "group", True), (None, "batch", False))


def _on_rank(rank, world, case):
    """Each rank normalises its shard; the batch level takes every rank's tokens with one
    all-reduce, and equals the single batch's (``case`` carries it, from AReaL's code)."""
    import torch.distributed as dist

    (mean, std, loo), x, m, want = case
    log = []
    originals = rank_processes.counting(dist, log)
    try:
        got = areal.normalize(x[rank], m[rank], mean_level=mean, std_level=std, mean_leave1out=loo, group_size=2)
        empty = areal.normalize(x[rank], torch.zeros_like(m[rank]) if rank == 1 else m[rank], mean_level=mean,
                                std_level=std, mean_leave1out=loo, group_size=2)
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    assert [name for name, _ in log] == ["all_reduce", "all_reduce"], log
    assert_rounding(got, want[rank])
    if rank == 1:  # a rank whose mask keeps nothing takes part and returns its x
        assert torch.equal(empty, x[rank])
    bad = m[rank] * (2 if rank == 0 else 1)
    with pytest.raises(ValueError, match="on this rank or another"):
        areal.normalize(x[rank], bad, mean_level=mean, std_level=std, group_size=2)


def test_batch_level_across_ranks(modules, tmp_path):
    """Two gloo ranks against AReaL's ``Normalization`` on the two shards as one batch (what
    its all-reduces compute): one all-reduce of three scalars per call, a rank that keeps
    nothing, and a mask of other values on one rank raising on both."""
    _, data, cli_args = modules
    cases = []
    for mean, std, loo in RANK_CASES:
        x, m = _inputs(8, 20, 7, torch.float32)
        config = cli_args.NormConfig(mean_level=mean, std_level=std, mean_leave1out=loo, group_size=2)
        want = data.Normalization(config)(x, m)
        cases.append(((mean, std, loo), x.view(2, 4, 20), m.view(2, 4, 20), want.view(2, 4, 20)))
    rank_processes.run(_on_rank, 2, tuple(cases), tmp_path)


def test_release_range():
    areal.check_release("1.0.4")
    for version in ("1.0.3", "1.0.5", "1.1.0", "0.5.2"):
        with pytest.raises(ImportError, match=r"follows AReaL ==1.0.4; the installed release is"):
            areal.check_release(version)
