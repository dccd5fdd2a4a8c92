"""PPO for discrete actions, written the way CleanRL's ppo.py is: one file, top to bottom.

The GAE step at the end of each rollout runs one of three ways (``--gae``):

* ``loop``: CleanRL's original loop over time;
* ``rlscan``: the same numbers in one line, ``rlscan.adapters.cleanrl.gae``
  (bit for bit with ``--exact``, the default);
* ``rlscan-truncation``: ``gae_with_truncation``, which bootstraps episodes cut by a
  time limit from their final observation (the loop treats them as terminated).

    python integration_tests/cleanrl_ppo.py --gae loop
    python integration_tests/cleanrl_ppo.py --gae rlscan
    python integration_tests/cleanrl_ppo.py --gae rlscan-truncation --max-episode-steps 100

Compared with CleanRL's script: argparse instead of tyro, no logging backends or video,
the vector env resets in the same step (``AutoresetMode.SAME_STEP``, the Gymnasium 0.29
behaviour CleanRL's loop assumes), and :func:`train` returns the agent and every
rollout's GAE inputs and outputs, so that tests can compare runs.
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass
from typing import NamedTuple, Optional

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions.categorical import Categorical

from rlscan.adapters import cleanrl


@dataclass
class Args:
    seed: int = 1
    env_id: str = "CartPole-v1"
    max_episode_steps: Optional[int] = None  # a shorter time limit than the env's own
    total_timesteps: int = 100_000
    learning_rate: float = 2.5e-4
    num_envs: int = 4
    num_steps: int = 128
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: Optional[float] = None
    gae: str = "loop"  # "loop", "rlscan" or "rlscan-truncation"
    exact: bool = True  # rlscan's exact mode
    verbose: bool = False


GAE_MODES = ("loop", "rlscan", "rlscan-truncation")


class Rollout(NamedTuple):
    """One rollout's GAE inputs (in CleanRL's layout and unshifted) and outputs."""

    rewards: torch.Tensor
    values: torch.Tensor
    dones: torch.Tensor
    next_value: torch.Tensor
    next_done: torch.Tensor
    terminations: torch.Tensor
    truncations: torch.Tensor
    final_values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


def make_env(env_id, max_episode_steps):
    def thunk():
        return gym.make(env_id, max_episode_steps=max_episode_steps)

    return thunk


def layer_init(layer, std=np.sqrt(2), bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs):
        super().__init__()
        obs_size = int(np.prod(envs.single_observation_space.shape))
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_size, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_size, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, 64)),
            nn.Tanh(),
            layer_init(nn.Linear(64, envs.single_action_space.n), std=0.01),
        )

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def train(args: Args):
    """Run PPO; returns ``(agent, rollouts)``, one :class:`Rollout` per iteration."""
    if args.gae not in GAE_MODES:
        raise ValueError(f"gae must be one of {GAE_MODES}, got {args.gae!r}")
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    num_iterations = args.total_timesteps // batch_size

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    envs = gym.vector.SyncVectorEnv(
        [make_env(args.env_id, args.max_episode_steps) for _ in range(args.num_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    agent = Agent(envs).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    # rollout storage
    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs) + envs.single_action_space.shape).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)
    # for the truncation-correct GAE: how each step ended, and V(final observation)
    terminations = torch.zeros((args.num_steps, args.num_envs)).to(device)
    truncations = torch.zeros((args.num_steps, args.num_envs)).to(device)
    final_values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    global_step = 0
    start_time = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    rollouts = []

    for iteration in range(1, num_iterations + 1):
        if args.anneal_lr:
            frac = 1.0 - (iteration - 1.0) / num_iterations
            optimizer.param_groups[0]["lr"] = frac * args.learning_rate

        for step in range(0, args.num_steps):
            global_step += args.num_envs
            obs[step] = next_obs
            dones[step] = next_done

            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs, reward, term, trunc, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(term, trunc)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            terminations[step] = torch.Tensor(term).to(device)
            truncations[step] = torch.Tensor(trunc).to(device)
            if args.gae == "rlscan-truncation" and trunc.any():
                # same-step autoreset: next_obs already starts the next episode
                final_obs = torch.Tensor(np.stack(infos["final_obs"][trunc])).to(device)
                with torch.no_grad():
                    final_values[step, torch.from_numpy(trunc)] = agent.get_value(final_obs).flatten()
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)

        # bootstrap value if not done
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            if args.gae == "loop":
                advantages = torch.zeros_like(rewards).to(device)
                lastgaelam = 0
                for t in reversed(range(args.num_steps)):
                    if t == args.num_steps - 1:
                        nextnonterminal = 1.0 - next_done
                        nextvalues = next_value
                    else:
                        nextnonterminal = 1.0 - dones[t + 1]
                        nextvalues = values[t + 1]
                    delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                    advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
                returns = advantages + values
            elif args.gae == "rlscan":
                advantages, returns = cleanrl.gae(
                    rewards, values, dones, next_value, next_done, args.gamma, args.gae_lambda, exact=args.exact
                )
            else:
                advantages, returns = cleanrl.gae_with_truncation(
                    rewards, values, terminations, truncations, next_value, final_values,
                    args.gamma, args.gae_lambda, exact=args.exact,
                )
        rollouts.append(Rollout(*(x.clone() for x in (
            rewards, values, dones, next_value, next_done, terminations, truncations, final_values,
            advantages, returns,
        ))))

        # flatten the batch
        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape((-1,) + envs.single_action_space.shape)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)

        # optimise the policy and value network
        b_inds = np.arange(batch_size)
        for epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                mb_inds = b_inds[start : start + minibatch_size]

                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb_inds], b_actions.long()[mb_inds]
                )
                logratio = newlogprob - b_logprobs[mb_inds]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()

                mb_advantages = b_advantages[mb_inds]
                if args.norm_adv:
                    mb_advantages = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)

                # policy loss
                pg_loss1 = -mb_advantages * ratio
                pg_loss2 = -mb_advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                pg_loss = torch.max(pg_loss1, pg_loss2).mean()

                # value loss
                newvalue = newvalue.view(-1)
                if args.clip_vloss:
                    v_loss_unclipped = (newvalue - b_returns[mb_inds]) ** 2
                    v_clipped = b_values[mb_inds] + torch.clamp(
                        newvalue - b_values[mb_inds], -args.clip_coef, args.clip_coef
                    )
                    v_loss_clipped = (v_clipped - b_returns[mb_inds]) ** 2
                    v_loss = 0.5 * torch.max(v_loss_unclipped, v_loss_clipped).mean()
                else:
                    v_loss = 0.5 * ((newvalue - b_returns[mb_inds]) ** 2).mean()

                loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

            if args.target_kl is not None and approx_kl > args.target_kl:
                break

        if args.verbose:
            sps = int(global_step / (time.time() - start_time))
            print(f"iteration {iteration}: step {global_step}, value loss {v_loss.item():.3f}, "
                  f"policy loss {pg_loss.item():.4f}, approx kl {approx_kl.item():.4f}, SPS {sps}")

    envs.close()
    return agent, rollouts


def parse_args(argv=None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for field in dataclasses.fields(Args):
        flag = "--" + field.name.replace("_", "-")
        if field.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=field.default)
        elif field.name == "gae":
            parser.add_argument(flag, choices=GAE_MODES, default=field.default)
        else:
            kind = {"int": int, "float": float, "str": str}[field.type.removeprefix("Optional[").rstrip("]")]
            parser.add_argument(flag, type=kind, default=field.default)
    return Args(**vars(parser.parse_args(argv)))


if __name__ == "__main__":
    args = parse_args()
    args.verbose = True
    train(args)
