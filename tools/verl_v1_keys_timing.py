"""verl's v1 trainer around its GRPO estimator, on the CPU (``TaskRunnerV1``, where it runs):
does ``compute_advantage_for_multi_trajectories`` (``verl/trainer/ppo/v1/utils.py``) cost
more than the estimator it wraps? ::

    python tools/verl_v1_keys_timing.py          # B = 512 responses x 4096 tokens, groups of 8
    python tools/verl_v1_keys_timing.py --dry    # tiny shapes: checks the script

For GRPO (only there) the v1 trainer calls ``compute_advantage_for_multi_trajectories``: a
Python loop over the batch's keys (``"{uid}_{session}_{index}"``, one per response) that
finds each session's final output, ``DataProto.select_idxs`` of those rows, verl's
``compute_advantage`` (the estimator) on them, and a broadcast of each session's advantage
back over its rows. The script times verl's own function whole, and its parts by probes on
the calls it makes (the loop: from the call until ``select_idxs`` starts; the estimator:
inside ``compute_advantage``), with verl's GRPO and with rlscan's (``patch()``), medians
of ``CALLS`` calls. Sessions of one output each (the default agent loop's) and of 4.

The v1 module imports its trainer's packages (TransferQueue, Hydra, FastAPI, ...), which
the loop does not use: where they are missing, the import meets empty stand-ins.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import statistics
import sys
import time
import types
import uuid

import numpy as np
import torch

from stand_ins import Empty, stand_ins

from rlscan.adapters import verl as adapter

DRY = "--dry" in sys.argv
B, T, SIZE = (32, 64, 8) if DRY else (512, 4096, 8)
CALLS = 3 if DRY else 15
# what v1's modules import at the top and the loop never calls
TRAINER_ONLY = ("transfer_queue", "datasets", "hydra", "cachetools", "uvicorn", "fastapi")


class _TrainerOnly(Empty):
    why = "a stand-in: the v1 trainer's package is not installed here"


def v1_utils():
    """``verl.trainer.ppo.v1.utils`` from the installed wheel, without running the v1
    package's ``__init__`` (which imports the trainers and their agent loops)."""
    import verl.trainer.ppo as ppo  # verl's own modules do without TransferQueue

    # the stand-ins leave sys.modules after: the modules that imported them keep them, later imports do not
    with stand_ins(TRAINER_ONLY, _TrainerOnly, forget=True):
        if "verl.trainer.ppo.v1" not in sys.modules:
            package = types.ModuleType("verl.trainer.ppo.v1")
            package.__path__ = [os.path.join(os.path.dirname(ppo.__file__), "v1")]
            sys.modules["verl.trainer.ppo.v1"] = package
        return importlib.import_module("verl.trainer.ppo.v1.utils")


def batch(outputs_per_session: int):
    """``(data, keys)``: a DataProto as v1's ``_compute_advantage`` builds it (the token
    rewards with the score at EOS, an int64 response mask, ``uid``), and its keys."""
    from verl import DataProto

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    rewards = torch.zeros(B, T)
    rewards[torch.arange(B), lengths - 1] = torch.randn(B, generator=g)
    uids = [uuid.UUID(int=i).hex for i in range(B // SIZE)]
    uid = np.array([uids[i // SIZE] for i in range(B)], dtype=object)
    keys = [f"{uid[i]}_{(i % SIZE) // outputs_per_session}_{i % outputs_per_session}" for i in range(B)]
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uid})
    return data, keys


@contextlib.contextmanager
def probes(v1, marks: dict):
    """Note the time when ``select_idxs`` and ``compute_advantage`` start and end."""
    from verl import DataProto

    select, estimator = DataProto.select_idxs, v1.compute_advantage

    def timed_select(self, idxs):
        marks["select"] = time.perf_counter()
        return select(self, idxs)

    def timed_estimator(*args, **kwargs):
        marks["estimator"] = time.perf_counter()
        out = estimator(*args, **kwargs)
        marks["estimator_end"] = time.perf_counter()
        return out

    DataProto.select_idxs, v1.compute_advantage = timed_select, timed_estimator
    try:
        yield
    finally:
        DataProto.select_idxs, v1.compute_advantage = select, estimator


def measure(v1, outputs_per_session: int) -> dict:
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.core_algos import AdvantageEstimator

    config = AlgoConfig(adv_estimator="grpo")
    parts = {"loop over the keys": [], "select_idxs": [], "estimator (compute_advantage)": [],
             "broadcast back": [], "whole call": []}
    for _ in range(CALLS + 1):
        data, keys = batch(outputs_per_session)
        marks: dict = {}
        with probes(v1, marks):
            start = time.perf_counter()
            v1.compute_advantage_for_multi_trajectories(data, keys, AdvantageEstimator.GRPO, config=config)
            end = time.perf_counter()
        for name, seconds in (("loop over the keys", marks["select"] - start),
                              ("select_idxs", marks["estimator"] - marks["select"]),
                              ("estimator (compute_advantage)", marks["estimator_end"] - marks["estimator"]),
                              ("broadcast back", end - marks["estimator_end"]), ("whole call", end - start)):
            parts[name].append(seconds)
    return {name: statistics.median(times[1:]) for name, times in parts.items()}


def main() -> int:
    v1 = v1_utils()
    print(f"B = {B} responses x T = {T} tokens in groups of {SIZE}; torch threads {torch.get_num_threads()}; "
          f"medians of {CALLS} calls")
    rows = []
    for outputs in (1, 4):
        for estimator in ("verl", "rlscan"):
            if estimator == "rlscan":
                adapter.patch()
            try:
                got = measure(v1, outputs)
            finally:
                adapter.unpatch()
            rows.append((outputs, estimator, got))
            print(outputs, estimator, {k: f"{1e3 * v:.2f} ms" for k, v in got.items()}, flush=True)
    print()
    print("| outputs per session | GRPO | loop over the keys | select_idxs | estimator | broadcast back | whole call |")
    print("|---|---|---|---|---|---|---|")
    for outputs, estimator, got in rows:
        print(f"| {outputs} | {estimator}'s | " + " | ".join(f"{1e3 * got[k]:.2f} ms" for k in got) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
