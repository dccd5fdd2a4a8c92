"""Framework code that ``rlscan bench`` compares against: TorchRL and Stable-Baselines3.

rlscan's core never imports a framework; the benchmark reaches them only through
this module, which imports each framework inside the function that needs it.

* :class:`TorchRLCredit`: TorchRL's functional GAE and TD(λ) estimators
  (``generalized_advantage_estimate``, ``vec_generalized_advantage_estimate``,
  ``td_lambda_return_estimate``, ``vec_td_lambda_return_estimate``), the loop and the
  vectorised versions, on inputs in TorchRL's own ``[N, T, 1]`` layout.
* :class:`SB3RolloutGAE`: ``RolloutBuffer.compute_returns_and_advantage``, the numpy
  loop that every Stable-Baselines3 PPO/A2C update runs.
* :func:`sb3_ppo_breakdown`: time the parts of SB3's default PPO on the CPU.

The benchmark's inputs are rlscan's ``[T, N]`` tensors (``time_dim=0``) with episodes
that end by termination and a bootstrap value after the window; each class converts
them once, outside the timed call, into what its framework keeps in its buffers.
"""
from __future__ import annotations

import importlib.util
import time


def available(framework: str) -> bool:
    """Whether ``"torchrl"`` or ``"sb3"`` can be imported (without importing it)."""
    modules = {"torchrl": ("torchrl",), "sb3": ("stable_baselines3", "gymnasium")}[framework]
    return all(importlib.util.find_spec(m) is not None for m in modules)


def version(framework: str):
    if not available(framework):
        return None
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version({"torchrl": "torchrl", "sb3": "stable-baselines3"}[framework])
    except PackageNotFoundError:
        return None


class TorchRLCredit:
    """One of TorchRL's functional estimators for ``op`` (``"gae"`` or ``"td_lambda"``).

    ``prepare`` builds TorchRL's inputs: ``[N, T, 1]`` contiguous tensors, the
    ``next_state_value`` (``V_{t+1}``, the bootstrap after the last step) and the
    ``done``/``terminated`` flags, as a TorchRL rollout holds them. Calling it returns
    the op's outputs as ``[T, N]`` views.
    """

    OPS = ("gae", "td_lambda")

    def __init__(self, op: str, vectorised: bool, gamma: float, lmbda: float):
        if op not in self.OPS:
            raise ValueError(f"op must be one of {self.OPS}, got {op!r}")
        from torchrl.objectives.value import functional as F

        self.op, self.gamma, self.lmbda = op, gamma, lmbda
        if op == "gae":
            self.fn = F.vec_generalized_advantage_estimate if vectorised else F.generalized_advantage_estimate
        else:
            self.fn = F.vec_td_lambda_return_estimate if vectorised else F.td_lambda_return_estimate

    @staticmethod
    def prepare(rewards, values, bootstrap_value, terminated) -> dict:
        import torch

        def native(x):
            return x.t().contiguous().unsqueeze(-1)

        next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)])
        done = native(terminated)
        return dict(reward=native(rewards), state_value=native(values), next_state_value=native(next_values),
                    done=done, terminated=done.clone())

    def __call__(self, d: dict) -> tuple:
        if self.op == "gae":
            adv, target = self.fn(self.gamma, self.lmbda, d["state_value"], d["next_state_value"], d["reward"],
                                  d["done"], d["terminated"])
            return adv.squeeze(-1).t(), target.squeeze(-1).t()
        ret = self.fn(self.gamma, self.lmbda, d["next_state_value"], d["reward"], d["done"], d["terminated"])
        return (ret.squeeze(-1).t(),)


class SB3RolloutGAE:
    """Stable-Baselines3's ``RolloutBuffer.compute_returns_and_advantage`` (float32 numpy).

    ``prepare`` fills a ``RolloutBuffer`` of ``T`` steps and ``N`` environments the way
    a rollout does: ``episode_starts[t+1]`` marks a termination at step ``t``, and the
    last step's flag and the bootstrap value go in as ``dones`` and ``last_values``.
    Calling it returns ``(advantages, returns)``, ``[T, N]`` arrays.
    """

    def __init__(self, gamma: float, lmbda: float):
        self.gamma, self.lmbda = gamma, lmbda

    def prepare(self, rewards, values, bootstrap_value, terminated):
        import numpy as np
        import torch
        from gymnasium import spaces
        from stable_baselines3.common.buffers import RolloutBuffer

        T, N = rewards.shape
        buffer = RolloutBuffer(T, spaces.Box(-1.0, 1.0, (1,), dtype=np.float32), spaces.Discrete(2), device="cpu",
                               gae_lambda=self.lmbda, gamma=self.gamma, n_envs=N)
        term = terminated.detach().cpu().numpy().astype(np.float32)
        buffer.rewards[:] = rewards.detach().cpu().float().numpy()
        buffer.values[:] = values.detach().cpu().float().numpy()
        buffer.episode_starts[1:] = term[:-1]
        last = (bootstrap_value.detach().cpu().float(), term[-1].copy())
        return buffer, last

    def __call__(self, prepared) -> tuple:
        buffer, (last_values, dones) = prepared
        buffer.compute_returns_and_advantage(last_values=last_values, dones=dones)
        return buffer.advantages, buffer.returns


def sb3_ppo_breakdown(updates: int = 2, env_id: str = "CartPole-v1", seed: int = 0) -> dict:
    """Run SB3's default PPO on the CPU and time, per update, the rollout collection,
    ``compute_returns_and_advantage`` and ``train()``.

    Returns the per-update seconds of each part and, from the last update, the buffer's
    inputs and SB3's advantages (``rewards``, ``values``, ``episode_starts``,
    ``last_values``, ``dones``, ``advantages``), so that another computation can be
    timed and checked on exactly the same data.
    """
    import numpy as np
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", env_id, device="cpu", seed=seed, verbose=0)
    buffer = model.rollout_buffer
    record = {"compute_returns_and_advantage": [], "train": [], "update": []}
    compute, train = buffer.compute_returns_and_advantage, model.train
    snapshot = {}

    def timed_compute(last_values, dones):
        start = time.perf_counter()
        compute(last_values=last_values, dones=dones)
        record["compute_returns_and_advantage"].append(time.perf_counter() - start)
        snapshot.update(rewards=buffer.rewards.copy(), values=buffer.values.copy(),
                        episode_starts=buffer.episode_starts.copy(),
                        last_values=last_values.detach().cpu().numpy().reshape(-1).astype(np.float32),
                        dones=np.asarray(dones).copy(), advantages=buffer.advantages.copy())

    def timed_train():
        start = time.perf_counter()
        train()
        record["train"].append(time.perf_counter() - start)

    buffer.compute_returns_and_advantage = timed_compute
    model.train = timed_train
    start = time.perf_counter()
    model.learn(total_timesteps=updates * model.n_steps * model.n_envs)
    total = time.perf_counter() - start
    config = dict(env=env_id, n_envs=model.n_envs, n_steps=model.n_steps, batch_size=model.batch_size,
                  n_epochs=model.n_epochs, gamma=model.gamma, gae_lambda=model.gae_lambda, updates=updates)
    return dict(config=config, seconds=record, learn_seconds=total, buffer=snapshot)
