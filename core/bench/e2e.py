"""End to end: the share of a PPO update spent on credit assignment, and what rlscan saves.

A synthetic PPO update written with plain torch (no framework): separate actor and
critic MLPs (tanh, two hidden layers), a discrete policy, random observations,
rewards and terminations. One update is GAE over the ``[T, N]`` rollout followed by
``epochs`` passes over shuffled minibatches (clipped surrogate, value loss, entropy
bonus, gradient clipping, Adam). The GAE is timed twice, as CleanRL's Python loop
(torch ops on the device) and as ``rlscan.gae``; the rest of the update once. Then

    share   = GAE / (GAE + rest)
    speedup = (GAE_loop + rest) / (GAE_rlscan + rest).

Stable-Baselines3's default PPO (on the CPU) is timed the same way through
``rlscan.bench.baselines`` when it is installed: ``compute_returns_and_advantage``
against the rest of ``train()``, and rlscan's GAE on the same buffer.
"""
from __future__ import annotations

import statistics
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from . import loops, timing
from .check import relative_error


class PPOConfig(NamedTuple):
    name: str
    envs: int
    steps: int
    hidden: int
    obs_dim: int = 64
    actions: int = 8
    epochs: int = 4
    minibatches: int = 8
    gamma: float = 0.99
    lmbda: float = 0.95


def configs(cuda: bool, quick: bool) -> list:
    """The policies timed: 64×64 and 1024×1024 MLPs at 4096 envs × 128 steps on a GPU;
    smaller batches on the CPU, where the large policy at full size takes minutes."""
    if cuda:
        return [PPOConfig("mlp 64x64", 4096, 128, 64), PPOConfig("mlp 1024x1024", 4096, 128, 1024)]
    if quick:
        return [PPOConfig("mlp 64x64", 256, 128, 64, epochs=1, minibatches=2),
                PPOConfig("mlp 1024x1024", 16, 128, 1024, epochs=1, minibatches=2)]
    return [PPOConfig("mlp 64x64", 1024, 128, 64), PPOConfig("mlp 1024x1024", 64, 128, 1024)]


def _mlp(sizes) -> nn.Sequential:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


class Policy(nn.Module):
    def __init__(self, cfg: PPOConfig):
        super().__init__()
        self.actor = _mlp([cfg.obs_dim, cfg.hidden, cfg.hidden, cfg.actions])
        self.critic = _mlp([cfg.obs_dim, cfg.hidden, cfg.hidden, 1])

    def evaluate(self, obs, actions):
        """``(log π(a|s), entropy, V(s))``."""
        logp_all = torch.log_softmax(self.actor(obs), dim=-1)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy, self.critic(obs).squeeze(-1)


def rollout(policy: Policy, cfg: PPOConfig, device) -> dict:
    """A synthetic rollout: random observations, the policy's actions, values and log-probs."""
    T, N = cfg.steps, cfg.envs
    obs = torch.randn(T * N, cfg.obs_dim, device=device)
    with torch.no_grad():
        logits = policy.actor(obs)
        actions = torch.distributions.Categorical(logits=logits).sample()
        logp, _, values = policy.evaluate(obs, actions)
        bootstrap = policy.critic(torch.randn(N, cfg.obs_dim, device=device)).squeeze(-1)
    return dict(obs=obs, actions=actions, logp=logp, values=values.reshape(T, N),
                rewards=torch.randn(T, N, device=device), terminated=torch.rand(T, N, device=device) < 0.01,
                bootstrap=bootstrap)


def train_epochs(policy: Policy, opt, batch: dict, adv: torch.Tensor, returns: torch.Tensor, cfg: PPOConfig):
    """The PPO update after the credit assignment: epochs over shuffled minibatches."""
    adv, returns = adv.reshape(-1), returns.reshape(-1)
    size = adv.numel()
    mb = size // cfg.minibatches
    for _ in range(cfg.epochs):
        order = torch.randperm(size, device=adv.device)
        for start in range(0, mb * cfg.minibatches, mb):
            idx = order[start:start + mb]
            logp, entropy, value = policy.evaluate(batch["obs"][idx], batch["actions"][idx])
            ratio = torch.exp(logp - batch["logp"][idx])
            a = adv[idx]
            a = (a - a.mean()) / (a.std() + 1e-8)
            pg_loss = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean()
            v_loss = 0.5 * ((value - returns[idx]) ** 2).mean()
            loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            opt.step()


def synthetic_ppo(cfg: PPOConfig, device, repeat: int) -> dict:
    import rlscan

    torch.manual_seed(0)
    policy = Policy(cfg).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-4, eps=1e-5)
    batch = rollout(policy, cfg, device)
    sync = timing.synchronizer(torch.device(device))
    d = dict(rewards=batch["rewards"], values=batch["values"], terminated=batch["terminated"],
             bootstrap_value=batch["bootstrap"])
    params = dict(gamma=cfg.gamma, lmbda=cfg.lmbda)
    ways = {
        "loop": lambda: loops.gae(d, params, loops.TorchOps),
        "rlscan": lambda: tuple(rlscan.gae(d["rewards"], d["values"], bootstrap_value=d["bootstrap_value"],
                                           terminated=d["terminated"], **params)),
    }
    (adv, returns), _ = timing.timed_once(ways["loop"], sync)
    gae_s = {}
    for name, fn in ways.items():
        out, once = timing.timed_once(fn, sync)
        if name == "rlscan":
            err = relative_error(out, (adv.double(), returns.double()))
        gae_s[name] = timing.full_call(fn, sync, one_call_s=once, target_s=0.05, repeat=3).seconds
    rest = []
    for i in range(repeat + 1):  # the first update warms up
        _, seconds = timing.timed_once(lambda: train_epochs(policy, opt, batch, adv, returns, cfg), sync)
        if i:
            rest.append(seconds)
    rest_s = statistics.median(rest)
    return dict(config=cfg._asdict(), samples=cfg.envs * cfg.steps, gae_loop_s=gae_s["loop"],
                gae_rlscan_s=gae_s["rlscan"], rlscan_vs_loop_rel_err=err, rest_of_update_s=rest_s,
                share_loop=gae_s["loop"] / (gae_s["loop"] + rest_s),
                share_rlscan=gae_s["rlscan"] / (gae_s["rlscan"] + rest_s),
                update_speedup=(gae_s["loop"] + rest_s) / (gae_s["rlscan"] + rest_s), updates_timed=repeat)


def sb3_ppo(updates: int) -> dict:
    """SB3's default PPO on the CPU: its GAE loop, the rest of ``train()``, and rlscan's GAE
    on the same buffer (checked for equality with SB3's advantages)."""
    import rlscan
    from .baselines import sb3_ppo_breakdown

    bd = sb3_ppo_breakdown(updates=updates)
    buf = bd["buffer"]
    gamma, lmbda = bd["config"]["gamma"], bd["config"]["gae_lambda"]

    def with_rlscan():
        # SB3 marks a termination at step t by episode_starts[t+1], and at the last step by dones.
        term = np.concatenate([buf["episode_starts"][1:], buf["dones"][None].astype(np.float32)]) != 0
        return rlscan.gae(buf["rewards"], buf["values"], bootstrap_value=buf["last_values"], terminated=term,
                          gamma=gamma, lmbda=lmbda)

    sync = timing.synchronizer(torch.device("cpu"))
    out, once = timing.timed_once(with_rlscan, sync)
    rlscan_s = timing.full_call(with_rlscan, sync, one_call_s=once, target_s=0.05, repeat=5).seconds
    sb3_s = statistics.median(bd["seconds"]["compute_returns_and_advantage"])
    train_s = statistics.median(bd["seconds"]["train"])
    return dict(config=bd["config"], compute_returns_and_advantage_s=sb3_s, train_s=train_s, rlscan_gae_s=rlscan_s,
                identical_to_sb3=bool(np.array_equal(out.advantages, buf["advantages"])),
                max_abs_diff=float(np.max(np.abs(out.advantages - buf["advantages"]))),
                share_sb3=sb3_s / (sb3_s + train_s), share_rlscan=rlscan_s / (rlscan_s + train_s),
                update_speedup=(sb3_s + train_s) / (rlscan_s + train_s), learn_s=bd["learn_seconds"])
