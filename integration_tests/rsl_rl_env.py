"""A small rsl_rl world for the tests and the docs' examples: a vectorised torch environment
with terminations and time-outs, a training configuration, and the runner built from them.
Imports rsl_rl."""
from __future__ import annotations

import copy

import torch
from rsl_rl.env import VecEnv
from rsl_rl.runners import OnPolicyRunner
from tensordict import TensorDict

OBS, ACTIONS = 3, 2


class PointMass(VecEnv):
    """``num_envs`` point masses pushed towards the origin: ``s' = 0.9 s + 0.2 [a, 0] + noise``,
    reward ``−|s|² − 0.01 |a|²``; an episode terminates when ``|s|_∞ > 2`` and times out after
    ``max_episode_length`` steps. Its own generator makes the dynamics repeatable."""

    def __init__(self, num_envs: int = 8, max_episode_length: int = 7, seed: int = 0):
        self.num_envs, self.num_actions = num_envs, ACTIONS
        self.max_episode_length = max_episode_length
        self.device, self.cfg = "cpu", {}
        self.generator = torch.Generator().manual_seed(seed)
        self.state = self._fresh(num_envs)
        # staggered starts, so that time-outs fall on different steps
        self.episode_length_buf = torch.arange(num_envs) % max_episode_length

    def _fresh(self, n: int) -> torch.Tensor:
        return 1.5 * torch.randn(n, OBS, generator=self.generator)

    def get_observations(self) -> TensorDict:
        return TensorDict({"policy": self.state.clone()}, batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor):
        a = actions.clamp(-3, 3)
        push = torch.cat([a, torch.zeros(self.num_envs, OBS - ACTIONS)], dim=1)
        noise = 0.05 * torch.randn(self.num_envs, OBS, generator=self.generator)
        self.state = 0.9 * self.state + 0.2 * push + noise
        rewards = -(self.state**2).sum(1) - 0.01 * (a**2).sum(1)
        self.episode_length_buf += 1
        terminated = self.state.abs().amax(1) > 2.0
        time_outs = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        dones = terminated | time_outs
        self.state[dones] = self._fresh(int(dones.sum()))
        self.episode_length_buf[dones] = 0
        return self.get_observations(), rewards, dones.long(), {"time_outs": time_outs, "log": {}}


def train_cfg(model: str = "MLPModel", rnn_type: str = "lstm", **algorithm) -> dict:
    net = {"class_name": model, "hidden_dims": [16], "activation": "elu"}
    if model == "RNNModel":
        net.update(rnn_type=rnn_type, rnn_hidden_dim=8)
    return {
        "num_steps_per_env": 6,
        "save_interval": 1000,
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "algorithm": {
            "class_name": "PPO", "num_learning_epochs": 2, "num_mini_batches": 2, "gamma": 0.98, "lam": 0.9,
            "learning_rate": 3e-3, "schedule": "fixed", **algorithm,
        },
        "actor": {**net, "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
        "critic": net,
    }


def make_runner(cfg: dict, seed: int = 0, num_envs: int = 8) -> OnPolicyRunner:
    torch.manual_seed(seed)
    return OnPolicyRunner(PointMass(num_envs, seed=seed), copy.deepcopy(cfg), log_dir=None, device="cpu")
