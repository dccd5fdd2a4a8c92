"""Bit-exactness: the CPU path and ``exact=True`` on the Triton kernels evaluate GAE one
step at a time in the loop's order, so they give the very bits of the plain float32 loops
of Stable-Baselines3 and CleanRL."""
import numpy as np
import pytest
import torch

import rlscan
from rlscan_testing import OP_NAMES, VALUE_OPS, bitwise_equal, make_problem, path_for


def sb3_gae(rewards, values, dones, last_values, gamma, gae_lambda):
    """Stable-Baselines3's ``RolloutBuffer.compute_returns_and_advantage``, on float32 numpy
    arrays: ``dones[t]`` marks the end of an episode at step ``t`` (SB3 stores it as
    ``episode_starts[t + 1]``)."""
    T = rewards.shape[0]
    episode_starts = np.concatenate([np.zeros_like(dones[:1]), dones[:-1]]).astype(np.float32)
    advantages = np.zeros_like(rewards)
    last_gae_lam = 0
    for step in reversed(range(T)):
        if step == T - 1:
            next_non_terminal = 1.0 - dones[-1].astype(np.float32)
            next_values = last_values
        else:
            next_non_terminal = 1.0 - episode_starts[step + 1]
            next_values = values[step + 1]
        delta = rewards[step] + gamma * next_values * next_non_terminal - values[step]
        last_gae_lam = delta + gamma * gae_lambda * next_non_terminal * last_gae_lam
        advantages[step] = last_gae_lam
    return advantages, advantages + values


def cleanrl_gae(rewards, values, dones, next_value, gamma, gae_lambda):
    """CleanRL's ppo.py loop on float32 torch tensors; ``dones[t]`` there means that step
    ``t`` starts a new episode, so the end flags are shifted by one."""
    T = rewards.shape[0]
    starts = torch.cat([torch.zeros_like(dones[:1]), dones[:-1]])
    next_done = dones[-1]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(T)):
        if t == T - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - starts[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def _rollout(T=64, N=4, seed=0):
    gen = np.random.default_rng(seed)
    rewards = gen.standard_normal((T, N)).astype(np.float32)
    values = gen.standard_normal((T, N)).astype(np.float32)
    dones = gen.random((T, N)) < 0.1
    last_values = gen.standard_normal(N).astype(np.float32)
    return rewards, values, dones, last_values


@pytest.mark.parametrize("gamma, lmbda", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0), (0.997, 0.9)])
def test_cpu_gae_is_sb3_loop_bitwise(gamma, lmbda):
    rewards, values, dones, last_values = _rollout(seed=int(gamma * 1000))
    expected = sb3_gae(rewards, values, dones, last_values, gamma, lmbda)
    with rlscan.use_backend("cpu"):
        got = rlscan.gae(rewards, values, bootstrap_value=last_values, terminated=dones, gamma=gamma, lmbda=lmbda)
    assert bitwise_equal(got.advantages, expected[0])
    assert bitwise_equal(got.returns, expected[1])


def test_cpu_gae_is_cleanrl_loop_bitwise():
    rewards, values, dones, last_values = (torch.from_numpy(a) for a in _rollout(seed=1))
    expected = cleanrl_gae(rewards, values, dones.float(), last_values, 0.99, 0.95)
    with rlscan.use_backend("cpu"):
        got = rlscan.gae(rewards, values, bootstrap_value=last_values, terminated=dones, gamma=0.99, lmbda=0.95)
    assert bitwise_equal(got.advantages, expected[0])
    assert bitwise_equal(got.returns, expected[1])


def test_exact_triton_gae_is_sb3_loop_bitwise():
    rewards, values, dones, last_values = _rollout(T=24, N=3, seed=2)
    expected = sb3_gae(rewards, values, dones, last_values, 0.99, 0.95)
    triton = path_for("triton")
    args = [torch.from_numpy(a).to(triton.device) for a in (rewards, values, dones, last_values)]
    with rlscan.use_backend("triton"):
        got = rlscan.gae(args[0], args[1], bootstrap_value=args[3], terminated=args[2], exact=True)
    assert bitwise_equal(got.advantages.cpu(), torch.from_numpy(expected[0]))
    assert bitwise_equal(got.returns.cpu(), torch.from_numpy(expected[1]))


GAE_CASES = {
    "bootstrap": dict(values="bootstrap", terminated="random"),
    "next-values": dict(values="next", terminated="random", truncated="random"),
    "same-step": dict(values="next", terminated="alternate", truncated="alternate"),
    "tensor-coefs": dict(values="bootstrap", gamma="tensor", lmbda="tensor"),
    "time-last": dict(shape=(3, 17), time_dim=1),
}


@pytest.mark.parametrize("case", GAE_CASES)
def test_exact_triton_gae_equals_cpu_bitwise(case):
    """The CPU loop and ``exact=True`` on the Triton kernels are the same loop."""
    _assert_paths_bitwise("gae", {"shape": (17, 3), "seed": 4, **GAE_CASES[case]})


EXP_OPS = ("vtrace", "retrace")


@pytest.mark.parametrize("op", [op for op in OP_NAMES if op != "gae"])
def test_exact_triton_equals_cpu_bitwise(op):
    """The same holds for every other op (both paths follow the reference loop's order).

    V-trace and Retrace take ``exp(log_rhos)``, which float32 math libraries round
    differently (numba's libm, numpy's SIMD exp in the interpreter, the GPU's); their
    ratios here are ``exp(0) = 1`` and ``exp(-inf) = 0``, exact everywhere."""
    kw = dict(shape=(17, 3), seed=5)
    if op in VALUE_OPS:
        kw.update(values="next", truncated="random")
    _assert_paths_bitwise(op, kw, exact_ratios=op in EXP_OPS)


def _assert_paths_bitwise(op, kw, exact_ratios=False):
    problem = make_problem(op, **kw)
    if exact_ratios:
        log_rhos = problem.arguments()["log_rhos"]
        problem = problem.replace(log_rhos=torch.where(log_rhos < -0.3, -torch.inf, 0.0).to(log_rhos.dtype))
    with rlscan.use_backend("cpu"):
        on_cpu = problem.run()
    triton = path_for("triton")
    on_device = problem.replace(**{k: v.to(triton.device) for k, v in problem.arguments().items()
                                   if isinstance(v, torch.Tensor)})
    with rlscan.use_backend("triton"):
        on_triton = on_device.run(exact=True)
    for i, (a, b) in enumerate(zip(on_cpu, on_triton)):
        assert bitwise_equal(a, b.cpu()), f"{op} output {i}: max difference {(a - b.cpu()).abs().max()}"


def test_cpu_exact_flag_changes_nothing():
    """The CPU path always is exact: ``exact=True`` gives the same bits."""
    p = make_problem("vtrace", (20, 3), seed=6)
    with rlscan.use_backend("cpu"):
        for a, b in zip(p.run(), p.run(exact=True)):
            assert bitwise_equal(a, b)
