"""rlscan.adapters.cleanrl against CleanRL's own loop: in a real PPO run, and on random rollouts.

The loops below are the oracles: CleanRL's float32 GAE loop as its PPO scripts write it,
the intrinsic-reward loop of ppo_rnd_envpool.py (``nextnonterminal = 1.0``), and the same
loop made truncation-correct (bootstrapping from the final observation's value).
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

import rlscan
import rlscan.reference
from rlscan.adapters import cleanrl

import cleanrl_ppo

GAMMA, LAMBDA = 0.99, 0.95
PPO_RUN = dict(seed=3, num_envs=4, num_steps=128, total_timesteps=3 * 4 * 128)



def triton_device() -> str:
    """Where the Triton kernels run: the CPU through Triton's interpreter, else a GPU."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    pytest.skip("the Triton kernels need a GPU or TRITON_INTERPRET=1")


# ----------------------------------------------------------------------------- oracles


def cleanrl_loop(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """CleanRL's loop (ppo.py, ppo_atari.py, ppo_continuous_action.py)."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def rnd_intrinsic_loop(rewards, values, next_value, gamma, gae_lambda):
    """ppo_rnd_envpool.py's intrinsic stream: it never resets."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        nextnonterminal = 1.0
        nextvalues = next_value if t == num_steps - 1 else values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def truncation_loop(rewards, values, terminations, truncations, next_value, final_values, gamma, gae_lambda):
    """CleanRL's loop with unshifted flags, bootstrapping truncations from the final observation."""
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        after = next_value.reshape(-1) if t == num_steps - 1 else values[t + 1]
        cut = (truncations[t] != 0) & (terminations[t] == 0)
        nextvalues = torch.where(cut, final_values[t], after)
        nextnonterminal = 1.0 - terminations[t].float()
        nextnotdone = 1.0 - ((terminations[t] != 0) | (truncations[t] != 0)).float()
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnotdone * lastgaelam
    return advantages, advantages + values


# ----------------------------------------------------------------------------- data


def random_rollout(num_steps, num_envs, seed, dtype=torch.float32, p_end=0.15):
    """CleanRL-layout tensors, with episode starts at the first and last steps and in next_done."""
    g = torch.Generator().manual_seed(seed)
    rewards = (torch.randn(num_steps, num_envs, generator=g) * 3).to(dtype)
    values = (torch.randn(num_steps, num_envs, generator=g) * 10).to(dtype)
    dones = (torch.rand(num_steps, num_envs, generator=g) < p_end).float()
    dones[0, ::2] = 1.0
    dones[-1, 1::3] = 1.0
    next_value = (torch.randn(1, num_envs, generator=g) * 10).to(dtype)
    next_done = (torch.rand(num_envs, generator=g) < 0.5).float()
    next_done[0] = 1.0
    return rewards, values, dones, next_value, next_done


def random_ends(num_steps, num_envs, seed):
    """Unshifted terminations/truncations (some steps both) and final values, NaN where unread."""
    g = torch.Generator().manual_seed(seed + 1000)
    terminations = torch.rand(num_steps, num_envs, generator=g) < 0.1
    truncations = torch.rand(num_steps, num_envs, generator=g) < 0.1
    truncations[-1, 0] = True
    terminations[::7, -1] = truncations[::7, -1] = True
    final_values = torch.randn(num_steps, num_envs, generator=g) * 10
    final_values[~truncations | terminations] = math.nan
    return terminations, truncations, final_values


def as_flags(x, dtype):
    return (x != 0).to(dtype)


# ----------------------------------------------------------------------------- unit: gae


@pytest.mark.parametrize("num_steps,num_envs", [(1, 3), (2, 1), (17, 5), (128, 8)])
@pytest.mark.parametrize("flag_dtype", [torch.float32, torch.bool, torch.uint8])
@pytest.mark.parametrize("exact", [True, False])
def test_gae_is_the_loop_bit_for_bit(num_steps, num_envs, flag_dtype, exact):
    rewards, values, dones, next_value, next_done = random_rollout(num_steps, num_envs, seed=num_steps)
    expected = cleanrl_loop(rewards, values, dones, next_value, next_done, GAMMA, LAMBDA)
    got = cleanrl.gae(rewards, values, as_flags(dones, flag_dtype), next_value, as_flags(next_done, flag_dtype),
                      GAMMA, LAMBDA, exact=exact)  # the CPU path is exact in both modes
    assert torch.equal(got.advantages, expected[0])
    assert torch.equal(got.returns, expected[1])


def test_gae_float64_and_flat_next_value():
    rewards, values, dones, next_value, next_done = random_rollout(40, 6, seed=7, dtype=torch.float64)
    dones, next_done = dones.double(), next_done.double()  # a float64 script holds float64 flags
    expected = cleanrl_loop(rewards, values, dones, next_value, next_done, 0.997, 0.9)
    advantages, returns = cleanrl.gae(rewards, values, dones, next_value.reshape(-1), next_done, 0.997, 0.9)
    assert advantages.dtype == torch.float64
    assert torch.equal(advantages, expected[0]) and torch.equal(returns, expected[1])


def test_gae_ignores_dones_at_step_zero():
    rewards, values, dones, next_value, next_done = random_rollout(20, 4, seed=1)
    flipped = dones.clone()
    flipped[0] = 1.0 - flipped[0]
    a = cleanrl.gae(rewards, values, dones, next_value, next_done, GAMMA, LAMBDA)
    b = cleanrl.gae(rewards, values, flipped, next_value, next_done, GAMMA, LAMBDA)
    assert torch.equal(a.advantages, b.advantages)


def test_gae_matches_the_float64_reference():
    rewards, values, dones, next_value, next_done = random_rollout(50, 5, seed=2)
    got = cleanrl.gae(rewards, values, dones, next_value, next_done, GAMMA, LAMBDA)
    terminated = torch.cat([dones[1:], next_done[None]])
    ref = rlscan.reference.gae(rewards.double(), values.double(), bootstrap_value=next_value.double().reshape(-1),
                               terminated=terminated, gamma=GAMMA, lmbda=LAMBDA)
    torch.testing.assert_close(got.advantages.double(), torch.as_tensor(ref.advantages), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- unit: RND


def test_rnd_intrinsic_stream_never_resets():
    rewards, values, dones, next_value, next_done = random_rollout(64, 4, seed=5)
    int_gamma = 0.99
    expected = rnd_intrinsic_loop(rewards, values, next_value, int_gamma, LAMBDA)
    got = cleanrl.gae(rewards, values, None, next_value, None, int_gamma, LAMBDA, exact=True)
    assert torch.equal(got.advantages, expected[0]) and torch.equal(got.returns, expected[1])
    # the episodic (extrinsic) stream of the same rollout does reset
    episodic = cleanrl.gae(rewards, values, dones, next_value, next_done, int_gamma, LAMBDA)
    assert not torch.equal(episodic.advantages, got.advantages)


# ----------------------------------------------------------------------------- unit: truncation


@pytest.mark.parametrize("num_steps,num_envs", [(1, 2), (30, 5), (100, 3)])
def test_truncation_variant_matches_the_reference(num_steps, num_envs):
    rewards, values, _, next_value, _ = random_rollout(num_steps, num_envs, seed=num_steps)
    terminations, truncations, final_values = random_ends(num_steps, num_envs, seed=num_steps)
    got = cleanrl.gae_with_truncation(rewards, values, terminations, truncations, next_value, final_values,
                                      GAMMA, LAMBDA)
    assert torch.isfinite(got.advantages).all()  # the NaNs where no truncation happened are never read

    after = torch.cat([values[1:], next_value])
    next_values = torch.where(truncations & ~terminations, final_values, after)
    ref = rlscan.reference.gae(rewards.double(), values.double(), next_values=next_values.double(),
                               terminated=terminations, truncated=truncations, gamma=GAMMA, lmbda=LAMBDA)
    torch.testing.assert_close(got.advantages.double(), torch.as_tensor(ref.advantages), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.returns.double(), torch.as_tensor(ref.returns), rtol=1e-5, atol=1e-5)


def test_truncation_variant_is_its_loop_bit_for_bit():
    rewards, values, _, next_value, _ = random_rollout(64, 6, seed=11)
    terminations, truncations, final_values = random_ends(64, 6, seed=11)
    args = (rewards, values, terminations.float(), truncations.float(), next_value, final_values, GAMMA, LAMBDA)
    expected = truncation_loop(*args)
    got = cleanrl.gae_with_truncation(*args, exact=True)
    assert torch.equal(got.advantages, expected[0]) and torch.equal(got.returns, expected[1])


def test_truncation_variant_bootstraps_from_the_final_observation():
    # one env, one episode truncated after step 1 of 3; lambda = 0 leaves the TD errors
    rewards = torch.tensor([[1.0], [2.0], [4.0]])
    values = torch.tensor([[10.0], [20.0], [30.0]])
    truncations = torch.tensor([[0.0], [1.0], [0.0]])
    final_values = torch.tensor([[0.0], [50.0], [0.0]])
    advantages, _ = cleanrl.gae_with_truncation(rewards, values, torch.zeros_like(rewards), truncations,
                                                torch.tensor([[40.0]]), final_values, 0.5, 0.0)
    assert advantages.flatten().tolist() == [1 + 0.5 * 20 - 10, 2 + 0.5 * 50 - 20, 4 + 0.5 * 40 - 30]


# ----------------------------------------------------------------------------- unit: errors


def _gae_args(**changes):
    rewards, values, dones, next_value, next_done = random_rollout(6, 4, seed=0)
    args = dict(rewards=rewards, values=values, dones=dones, next_value=next_value, next_done=next_done,
                gamma=GAMMA, gae_lambda=LAMBDA)
    args.update(changes)
    return args


GAE_ERRORS = [
    (dict(rewards=np.zeros((6, 4), np.float32)), TypeError, r"rewards must be a torch.Tensor"),
    (dict(rewards=torch.zeros(6, 4, dtype=torch.int64)), TypeError, r"rewards must be a floating tensor"),
    (dict(rewards=torch.zeros(6)), ValueError, r"rewards must have shape \(num_steps, num_envs\)"),
    (dict(rewards=torch.zeros(0, 4)), ValueError, r"num_steps >= 1"),
    (dict(values=torch.zeros(6, 4, 1)), ValueError, r"values must have the shape of rewards"),
    (dict(values=torch.zeros(6, 4, dtype=torch.int32)), TypeError, r"values must be a floating tensor"),
    (dict(values=torch.zeros(6, 4, device="meta")), ValueError, r"values is on meta but rewards is on cpu"),
    (dict(dones=torch.zeros(5, 4)), ValueError, r"dones must have the shape of rewards"),
    (dict(dones=torch.zeros(6, 4, dtype=torch.int64)), TypeError, r"dones must be a bool, uint8 or floating"),
    (dict(dones=None), ValueError, r"dones is None but next_done is not"),
    (dict(next_done=None), ValueError, r"next_done is None but dones is not"),
    (dict(next_done=torch.zeros(1, 4)), ValueError, r"next_done must have shape \(num_envs,\) = \(4,\)"),
    (dict(next_done=[0, 0, 0, 0]), TypeError, r"next_done must be a torch.Tensor"),
    (dict(next_value=torch.zeros(4, 1)), ValueError, r"next_value must have shape .*reshape\(1, -1\)"),
    (dict(next_value=torch.zeros(1, 5)), ValueError, r"next_value must have shape \(1, num_envs\) = \(1, 4\)"),
    (dict(next_value=torch.zeros(1, 4, dtype=torch.int64)), TypeError, r"next_value must be a floating tensor"),
    (dict(gamma=1.5), ValueError, r"gamma must lie in \[0, 1\]"),
    (dict(gamma=math.nan), ValueError, r"gamma must lie in \[0, 1\]"),
    (dict(gae_lambda=-0.1), ValueError, r"gae_lambda must lie in \[0, 1\]"),
    (dict(gae_lambda="0.95"), TypeError, r"gae_lambda must be a float"),
    (dict(gamma=True), TypeError, r"gamma must be a float"),
]


@pytest.mark.parametrize("changes,error,message", GAE_ERRORS)
def test_gae_errors_name_the_argument(changes, error, message):
    with pytest.raises(error, match=message):
        cleanrl.gae(**_gae_args(**changes))


def test_exact_must_be_a_bool():
    with pytest.raises(TypeError, match="exact must be a bool"):
        cleanrl.gae(**_gae_args(), exact="yes")


def _truncation_args(**changes):
    rewards, values, _, next_value, _ = random_rollout(6, 4, seed=0)
    terminations, truncations, final_values = random_ends(6, 4, seed=0)
    args = dict(rewards=rewards, values=values, terminations=terminations, truncations=truncations,
                next_value=next_value, final_values=final_values, gamma=GAMMA, gae_lambda=LAMBDA)
    args.update(changes)
    return args


TRUNCATION_ERRORS = [
    (dict(terminations=torch.zeros(6, 3)), ValueError, r"terminations must have the shape of rewards"),
    (dict(truncations=torch.zeros(6, 4, dtype=torch.int64)), TypeError, r"truncations must be a bool, uint8"),
    (dict(truncations=None), TypeError, r"truncations must be a torch.Tensor"),
    (dict(final_values=torch.zeros(1, 4)), ValueError, r"final_values must have the shape of rewards"),
    (dict(final_values=torch.zeros(6, 4, dtype=torch.bool)), TypeError, r"final_values must be a floating"),
    (dict(next_value=torch.zeros(4, 1)), ValueError, r"reshape\(1, -1\)"),
    (dict(gae_lambda=2), ValueError, r"gae_lambda must lie in \[0, 1\]"),
]


@pytest.mark.parametrize("changes,error,message", TRUNCATION_ERRORS)
def test_truncation_errors_name_the_argument(changes, error, message):
    with pytest.raises(error, match=message):
        cleanrl.gae_with_truncation(**_truncation_args(**changes))


# ----------------------------------------------------------------------------- PPO runs


@pytest.fixture(scope="module")
def loop_run():
    return cleanrl_ppo.train(cleanrl_ppo.Args(**PPO_RUN, gae="loop"))


def test_one_line_trains_bit_for_bit_like_the_loop(loop_run):
    loop_agent, loop_rollouts = loop_run
    agent, rollouts = cleanrl_ppo.train(cleanrl_ppo.Args(**PPO_RUN, gae="rlscan", exact=True))

    assert len(rollouts) == len(loop_rollouts) == 3
    assert sum(r.dones.sum().item() for r in rollouts) > 0  # episodes ended inside the windows
    for ours, theirs in zip(rollouts, loop_rollouts):
        assert torch.equal(ours.advantages, theirs.advantages)
        assert torch.equal(ours.returns, theirs.returns)
    expected = loop_agent.state_dict()
    for name, tensor in agent.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


def test_script_flags_agree_with_cleanrls_dones(loop_run):
    """The unshifted flags the script stores end the same episodes as CleanRL's dones."""
    for r in loop_run[1]:
        ended = torch.maximum(r.terminations, r.truncations)
        assert torch.equal(torch.cat([r.dones[1:], r.next_done[None]]), ended)
        # treating every end as a termination, the truncation variant is CleanRL's GAE
        same = cleanrl.gae_with_truncation(r.rewards, r.values, ended, torch.zeros_like(ended), r.next_value,
                                           r.final_values, GAMMA, LAMBDA, exact=True)
        assert torch.equal(same.advantages, r.advantages)


def _on(device, rollout):
    return (x.to(device) for x in (rollout.rewards, rollout.values, rollout.dones, rollout.next_value,
                                   rollout.next_done))


def test_fast_mode_is_within_1e5_of_the_loop(loop_run):
    device = triton_device()
    with rlscan.use_backend("triton"):
        for r in loop_run[1]:
            advantages, returns = cleanrl.gae(*_on(device, r), GAMMA, LAMBDA, exact=False)
            assert (advantages.cpu() - r.advantages).abs().max().item() <= 1e-5
            assert (returns.cpu() - r.returns).abs().max().item() <= 1e-5


def test_exact_triton_kernel_is_the_loop_bit_for_bit(loop_run):
    device = triton_device()
    r = loop_run[1][0]
    with rlscan.use_backend("triton"):
        advantages, returns = cleanrl.gae(*_on(device, r), GAMMA, LAMBDA, exact=True)
    assert torch.equal(advantages.cpu(), r.advantages) and torch.equal(returns.cpu(), r.returns)


def test_truncation_variant_in_training():
    args = cleanrl_ppo.Args(**PPO_RUN, gae="rlscan-truncation", max_episode_steps=20)
    _, rollouts = cleanrl_ppo.train(args)
    truncated = sum(r.truncations.sum().item() for r in rollouts)
    terminated = sum(r.terminations.sum().item() for r in rollouts)
    assert truncated > 0 and terminated > 0

    for r in rollouts:
        cut = (r.truncations != 0) & (r.terminations == 0)
        after = torch.cat([r.values[1:], r.next_value])
        # same-step autoreset: the value after a truncation is not the next episode's first value
        assert not torch.equal(r.final_values[cut], after[cut])
        next_values = torch.where(cut, r.final_values, after)
        ref = rlscan.reference.gae(r.rewards.double(), r.values.double(), next_values=next_values.double(),
                                   terminated=r.terminations, truncated=r.truncations,
                                   gamma=GAMMA, lmbda=LAMBDA)
        torch.testing.assert_close(r.advantages.double(), torch.as_tensor(ref.advantages), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- autoreset modes


def _value_of(observation) -> torch.Tensor:
    """A fixed value function, evaluated one observation at a time (the same bits in any batch)."""
    weights = torch.tensor([0.5, -1.0, 20.0, 3.0])
    return (torch.as_tensor(observation, dtype=torch.float32) * weights).sum()


def _collect(autoreset_mode, num_steps):
    """One CartPole env under a fixed, jittery policy: the window's GAE inputs, unshifted flags."""
    import gymnasium as gym

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=14)],
                                    autoreset_mode=autoreset_mode)
    obs, _ = envs.reset(seed=4)
    columns = {k: [] for k in ("rewards", "values", "terminations", "truncations", "final_values")}
    for _ in range(num_steps):
        columns["values"].append(_value_of(obs[0]))
        obs, reward, term, trunc, infos = envs.step(np.array([int(abs(obs[0, 0]) * 1e4) % 2]))
        final = infos.get("final_obs", [None])[0]
        columns["final_values"].append(_value_of(final) if final is not None else torch.tensor(0.0))
        for name, x in (("rewards", reward), ("terminations", term), ("truncations", trunc)):
            columns[name].append(torch.tensor(float(x[0])))
    envs.close()
    rollout = {k: torch.stack(v)[:, None] for k, v in columns.items()}
    rollout["next_value"] = _value_of(obs[0]).reshape(1, 1)
    return rollout


def test_next_step_autoreset_recipe_matches_same_step():
    """docs/adapters/cleanrl.md: under Gymnasium's default NEXT_STEP autoreset the final
    observation is the next step's observation, and the step after each episode end is a
    dummy to mask. The real steps then get the SAME_STEP advantages, bit for bit."""
    from gymnasium.vector import AutoresetMode

    same = _collect(AutoresetMode.SAME_STEP, 60)
    ended = torch.maximum(same["terminations"], same["truncations"])[:-1]
    assert same["terminations"].sum() > 0 and same["truncations"].sum() > 0
    nxt = _collect(AutoresetMode.NEXT_STEP, 60 + int(ended.sum()))

    expected = cleanrl.gae_with_truncation(same["rewards"], same["values"], same["terminations"],
                                           same["truncations"], same["next_value"], same["final_values"],
                                           GAMMA, LAMBDA, exact=True)
    final_values = torch.cat([nxt["values"][1:], nxt["next_value"]])
    got = cleanrl.gae_with_truncation(nxt["rewards"], nxt["values"], nxt["terminations"], nxt["truncations"],
                                      nxt["next_value"], final_values, GAMMA, LAMBDA, exact=True)
    nxt_ended = torch.maximum(nxt["terminations"], nxt["truncations"])
    dummy = torch.cat([torch.zeros(1, 1), nxt_ended[:-1]]) != 0  # CleanRL's dones under NEXT_STEP
    assert torch.equal(got.advantages[~dummy], expected.advantages.flatten())
    assert torch.equal(got.returns[~dummy], expected.returns.flatten())
