"""RLlib's GAE learner connector against rlscan's (``rlscan.adapters.rllib.RLScanGAE``), on the
same batch of episodes.

What it measures, for each batch (8 episodes of 500 steps = 4000 timesteps, and 64 episodes
of 2048 steps), laid out as PPO's learner pipeline hands it to the GAE piece (every episode
lengthened by its bootstrap step, half of them terminated and half truncated), on one device:

1. checks rlscan's outputs: ``exact=True`` bit for bit RLlib's, ``exact=False`` within 1e-6
   of RLlib's, and the value targets against rlscan's float64 reference (it raises on a
   mismatch);
2. times one connector call for RLlib's piece and rlscan's exact and fast pieces, both the
   whole call (PPO's default value network's forward pass included, as in training) and
   its GAE part alone (the values computed once beforehand), as the median of
   back-to-back calls with a synchronise each, all in this one run.

When to run it: after changing the RLlib adapter or upgrading ray, on a CPU or a GPU, to
refresh the RLlib figures of docs/adapters/rllib.md::

    python tools/rllib_timing.py [--device cuda|cpu] [--reps 20] [--threads N]

What it prints: per batch the errors and the value function's forward time, then a table
of milliseconds per call (whole call and GAE part) and RLlib's time over each variant's.
It writes no file. Needs ``ray[rllib]`` (``pip install 'rlscan[rllib]'``). On a CPU the
rlscan pieces run rlscan's compiled CPU loop (numba); on CUDA its Triton kernels.
"""
from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.connectors.learner import GeneralAdvantageEstimation
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

import rlscan
import rlscan.reference
from rlscan.adapters.rllib import RLScanGAE

MODULE = "default_policy"
GAMMA, LAMBDA = 0.99, 0.95
OBS_DIM = 8


def module(device):
    """PPO's default module (two 256-unit layers) for an 8-dimensional observation, on ``device``."""
    spec = RLModuleSpec(
        module_class=DefaultPPOTorchRLModule,
        observation_space=gym.spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32),
        action_space=gym.spaces.Discrete(4),
        model_config=DefaultModelConfig(),
    )
    modules = MultiRLModuleSpec(rl_module_specs={MODULE: spec}).build()
    modules[MODULE].to(device)
    return modules


class _CachedValues(ValueFunctionAPI):
    """A module whose value function returns values computed once: the connector's GAE part alone."""

    def __init__(self, values, wrapped):
        self.values, self.wrapped = values, wrapped

    def is_stateful(self):
        return False

    @property
    def model_config(self):
        return self.wrapped.model_config

    def compute_values(self, batch, embeddings=None):
        return self.values


class OneModule:
    """A stand-in for a MultiRLModule around one module (id ``MODULE``): the calls the GAE
    connectors make (``integration_tests/test_rllib.py`` uses it too)."""

    framework = "torch"

    def __init__(self, module):
        self.module = module

    def foreach_module(self, func, return_dict=False):
        return {MODULE: func(MODULE, self.module)}

    def __getitem__(self, module_id):
        return self.module


def episodes_and_batch(n_episodes, steps, device, seed=0):
    """``n_episodes`` episodes of ``steps`` steps plus their bootstrap step, and the learner batch of them."""
    g = np.random.default_rng(seed)
    length = steps + 1
    episodes = [SingleAgentEpisode(observations=[0] * (length + 1), actions=[0] * length, rewards=[0.0] * length,
                                   len_lookback_buffer=0) for _ in range(n_episodes)]
    total = n_episodes * length
    rewards = g.standard_normal(total).astype(np.float32)
    terminateds, truncateds = np.zeros(total, bool), np.zeros(total, bool)
    for i in range(n_episodes):
        last = i * length + steps - 1  # the last real step; the bootstrap step follows it
        rewards[last + 1] = 0.0
        (terminateds if i % 2 == 0 else truncateds)[last] = True
    batch = {MODULE: {
        Columns.OBS: torch.from_numpy(g.uniform(-1, 1, (total, OBS_DIM)).astype(np.float32)).to(device),
        Columns.REWARDS: torch.from_numpy(rewards).to(device),
        Columns.TERMINATEDS: torch.from_numpy(terminateds).to(device),
        Columns.TRUNCATEDS: torch.from_numpy(truncateds).to(device),
    }}
    return episodes, batch


def call(piece, modules, episodes, batch):
    return piece(rl_module=modules, episodes=episodes, batch={m: dict(c) for m, c in batch.items()})[MODULE]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn, device, reps):
    fn()
    sync(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def check(modules, episodes, batch):
    """RLlib's outputs and rlscan's exact and fast ones; raises on any mismatch."""
    stock = call(GeneralAdvantageEstimation(gamma=GAMMA, lambda_=LAMBDA), modules, episodes, batch)
    exact = call(RLScanGAE(gamma=GAMMA, lambda_=LAMBDA, exact=True), modules, episodes, batch)
    fast = call(RLScanGAE(gamma=GAMMA, lambda_=LAMBDA, exact=False), modules, episodes, batch)
    worst = 0.0
    for key in ("advantages", "value_targets"):
        a, e, f = stock[key].cpu(), exact[key].cpu(), fast[key].cpu()
        if not torch.equal(a.view(torch.int32), e.view(torch.int32)):
            raise AssertionError(f"exact {key} differ from RLlib's")
        worst = max(worst, (f - a).abs().max().item() / max(1.0, a.abs().max().item()))
    if worst > 1e-6:
        raise AssertionError(f"fast outputs differ from RLlib's by {worst:.2e} (relative)")
    # the value targets against the float64 reference on the same flattened sequence
    cols = batch[MODULE]
    with torch.no_grad():
        values = modules[MODULE].compute_values(cols).double().cpu()
    nxt = torch.cat([values[1:], values.new_zeros(1)])
    ref = rlscan.reference.gae(cols[Columns.REWARDS].double().cpu(), values, next_values=nxt,
                               terminated=cols[Columns.TERMINATEDS].cpu(), truncated=cols[Columns.TRUNCATEDS].cpu(),
                               gamma=GAMMA, lmbda=LAMBDA).returns
    ref_err = ((fast["value_targets"].double().cpu() - ref).abs().max() / ref.abs().max().clamp_min(1)).item()
    if ref_err > 1e-6:
        raise AssertionError(f"value targets differ from the float64 reference by {ref_err:.2e}")
    return worst, ref_err


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    modules = module(device)
    rows = []
    for n_episodes, steps in ((8, 500), (64, 2048)):
        episodes, batch = episodes_and_batch(n_episodes, steps, device)
        worst, ref_err = check(modules, episodes, batch)
        forward = median_ms(lambda: modules[MODULE].compute_values(batch[MODULE]), device, args.reps)
        with torch.no_grad():
            cached = OneModule(_CachedValues(modules[MODULE].compute_values(batch[MODULE]), modules[MODULE]))
        times = {}
        for name, make in (("RLlib", lambda: GeneralAdvantageEstimation(gamma=GAMMA, lambda_=LAMBDA)),
                           ("rlscan exact", lambda: RLScanGAE(gamma=GAMMA, lambda_=LAMBDA, exact=True)),
                           ("rlscan fast", lambda: RLScanGAE(gamma=GAMMA, lambda_=LAMBDA, exact=False))):
            piece = make()  # built once, as a learner's pipeline holds it
            times[name] = (median_ms(lambda: call(piece, modules, episodes, batch), device, args.reps),
                           median_ms(lambda: call(piece, cached, episodes, batch), device, args.reps))
        label = f"{n_episodes} x {steps} ({n_episodes * (steps + 1)} rows)"
        print(f"{label}: fast vs RLlib {worst:.1e}, value targets vs float64 reference {ref_err:.1e}; "
              f"value function forward {forward:.2f} ms")
        for name, (ms, alone) in times.items():
            rows.append((label, name, ms, times["RLlib"][0] / ms, alone, times["RLlib"][1] / alone))
    print(f"\nGAE connector call on {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'}), "
          f"median of {args.reps}: the whole call (value function forward included), and its GAE part alone "
          "(values computed once)")
    print(f"{'batch':<24} {'connector':<13} {'whole ms':>9} {'RLlib/this':>10} {'GAE ms':>9} {'RLlib/this':>10}")
    for label, name, ms, ratio, alone, ratio_alone in rows:
        print(f"{label:<24} {name:<13} {ms:>9.2f} {ratio:>9.1f}x {alone:>9.2f} {ratio_alone:>9.1f}x")


if __name__ == "__main__":
    main()
