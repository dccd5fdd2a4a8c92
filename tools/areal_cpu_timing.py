"""AReaL's advantage code on the CPU: its own ``PPOActor._compute_advantages`` (whose GAE loop
walks every position in Python) and ``Normalization`` (whose group level loops over groups)
against rlscan.adapters.areal, with the copy floor measured in the same run::

    python tools/areal_cpu_timing.py          # 512 x 4096 in groups of 8, and 64 x 32768
    python tools/areal_cpu_timing.py --dry    # tiny shapes: checks the script

Inputs as AReaL's actor sees them: ``[B, S]`` sequences, a prompt of ``S / 8`` tokens and a
response of random length (some fill ``S``: no EOS), float32 log-probabilities, values and
scores, a float loss mask; γ = 1, λ = 0.95; groups of 8 consecutive sequences.

What it prints, per shape:

* ``gae``: AReaL's ``_compute_advantages`` (no normalisation) as it ships, and patched; its
  GAE loop's share is the difference of the two minus rlscan's GAE alone (the steps around
  the loop are the same code in both), and rlscan's GAE alone
  (:func:`rlscan.adapters.areal.compute_gae`), against the GAE's copy floor (rewards, values
  and mask read, advantages and returns written);
* ``grpo`` (group mean and std), ``rloo`` (group leave-one-out mean) and ``batch`` (the
  batch's mean and std, PPO's ``adv_norm``): AReaL's ``Normalization`` against
  :func:`rlscan.adapters.areal.normalize`, with its copy floor (advantages and mask read,
  the result written).

Results are checked first: the GAE's returns and advantages bit for bit, the normalisations
to float32's rounding; a mismatch is marked BAD and the exit code is 1. Times are medians of
``CALLS`` calls after warm-up ones (AReaL's code: ``LOOP_CALLS``). The copy floor is a
``Tensor.copy_`` of half the bytes a call must move (a copy reads and writes them), timed in
the same rounds as rlscan's calls, one after the other: on a shared machine the load moves
both alike. The machine's other work moves every figure: compare ratios from one run.

:func:`areal_modules` imports AReaL's actor and ``areal.utils.data`` from the installed wheel
(``pip install --no-deps areal==1.0.4``) where modules they import at the top but that these
functions never call are not installed (``STAND_INS``: web, logging and dataset clients):
those imports meet an empty module. The tests use it too.
"""
from __future__ import annotations

import statistics
import sys

import torch

from stand_ins import Empty, stand_ins
from timed_rounds import median_s, rounds

#: top-level modules AReaL's actor and data modules import but these functions never use
STAND_INS = ("tenacity", "flask", "lark", "uvloop", "hydra", "einops", "aiofiles", "openai", "datasets", "swanlab",
             "trackio", "wandb", "pybase64")
DRY = "--dry" in sys.argv
SHAPES = [(16, 64), (8, 256)] if DRY else [(512, 4096), (64, 32768)]
GROUP = 8
CALLS, LOOP_CALLS = (3, 1) if DRY else (15, 3)
GAMMA, LAMBDA = 1.0, 0.95


class _Permissive(Empty):
    """An empty module whose calls, items and unions are empty modules too: enough for
    decorators and annotations at import time as well. Nothing the adapter's functions run
    reaches one."""

    def __call__(self, *args, **kwargs):
        return _Permissive(f"{self.__name__}()")

    def __getitem__(self, key):
        return self

    def __or__(self, other):
        return self

    __ror__ = __or__


def areal_modules():
    """``(areal.trainer.ppo.actor, areal.utils.data, areal.api.cli_args)`` from the installed
    AReaL, the missing ``STAND_INS`` met by empty modules."""
    with stand_ins(STAND_INS, _Permissive):
        from areal.api import cli_args
        from areal.trainer.ppo import actor
        from areal.utils import data
    return actor, data, cli_args


def batch(B: int, S: int, seed: int = 0) -> dict:
    """AReaL's padded batch: ``input_ids``, ``attention_mask``, ``loss_mask`` (the response),
    ``logprobs``, ``values`` and a score per sequence (``rewards``)."""
    g = torch.Generator().manual_seed(seed)
    prompt = max(1, S // 8)
    lengths = torch.randint(prompt + 1, S + 1, (B,), generator=g)
    lengths[::5] = S  # no EOS: the sequence fills S
    t = torch.arange(S)
    attention = (t[None] < lengths[:, None]).long()
    loss_mask = attention * (t[None] >= prompt).long()
    return {"input_ids": torch.randint(0, 1000, (B, S), generator=g) * attention, "attention_mask": attention,
            "loss_mask": loss_mask, "logprobs": -torch.rand(B, S, generator=g) * loss_mask,
            "values": torch.randn(B, S, generator=g), "rewards": torch.randn(B, generator=g)}


def actor_of(actor, cli_args, **options):
    """A ``PPOActor`` with AReaL's defaults but γ = 1 and λ = 0.95 (unless ``options`` say
    otherwise), and no engine."""
    config = cli_args.PPOActorConfig(experiment_name="timing", trial_name="cpu", path="none",
                                     **{"discount": GAMMA, "gae_lambda": LAMBDA, **options})
    import logging

    logging.disable(logging.INFO)  # the actor logs its configuration
    try:
        return actor.PPOActor(config, None)
    finally:
        logging.disable(logging.NOTSET)


def _rounds(fns: dict, calls: int) -> dict:
    """``{name: median seconds}`` of ``fns`` called in turns, ``calls`` rounds."""
    return {name: statistics.median(t) for name, t in rounds(fns, calls, warm=0).items()}


def _copy_of(moved: int):
    """A ``Tensor.copy_`` that reads and writes ``moved`` bytes in all."""
    src = torch.randn(moved // 8)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _copy(d: dict) -> dict:
    return {k: v.clone() for k, v in d.items()}


def main() -> int:
    from rlscan.adapters import areal as adapter

    actor, data, cli_args = areal_modules()
    plain = actor_of(actor, cli_args)
    theirs = actor.PPOActor._compute_advantages
    rows, bad = [], False
    for B, S in SHAPES:
        d = batch(B, S)
        # ---- GAE: AReaL's method as it ships and patched (the same steps around the loop)
        want = theirs(plain, _copy(d))
        got = adapter.compute_advantages(plain, _copy(d))
        same = all(torch.equal(got[k], want[k]) for k in ("advantages", "returns", "tot_rewards"))
        bad |= not same
        rewards, loss_mask = want["tot_rewards"], want["loss_mask"]
        no_eos = d["attention_mask"].sum(-1) == S
        gae = lambda: adapter.compute_gae(rewards, d["values"], loss_mask, no_eos, GAMMA, LAMBDA)  # noqa: E731
        for _ in range(4):
            gae()
        inputs = [_copy(d) for _ in range(CALLS + LOOP_CALLS + 2)]
        areal_s = median_s(lambda: theirs(plain, inputs.pop()), LOOP_CALLS)
        patched_s = median_s(lambda: adapter.compute_advantages(plain, inputs.pop()), CALLS)
        timed = _rounds({"rlscan": gae, "copy": _copy_of(B * S * 4 * 5)}, CALLS)
        gae_s, floor_s = timed["rlscan"], timed["copy"]
        loop_s = areal_s - (patched_s - gae_s)
        rows.append(("gae", B, S, "ok" if same else "BAD", loop_s, gae_s, floor_s,
                     f"method: AReaL {areal_s * 1e3:,.1f} ms, patched {patched_s * 1e3:,.1f} ms"))
        print(f"gae {B} x {S}: AReaL's method {areal_s * 1e3:,.1f} ms (its loop {loop_s * 1e3:,.1f} ms), patched "
              f"{patched_s * 1e3:,.1f} ms, rlscan's GAE {gae_s * 1e3:,.2f} ms", flush=True)

        # ---- the normalisations of the advantages, in groups of GROUP sequences
        x = want["returns"] - d["values"]
        for name, levels in (("grpo", dict(mean_level="group", std_level="group")),
                             ("rloo", dict(mean_level="group", mean_leave1out=True, std_level=None)),
                             ("batch", dict(mean_level="batch", std_level="batch"))):
            norm = data.Normalization(cli_args.NormConfig(group_size=GROUP, **levels))
            ours = lambda: adapter.normalize(x, loss_mask, group_size=GROUP, **levels)  # noqa: E731
            want_n, got_n = norm(x, loss_mask), ours()
            scale = 1 + want_n.double().abs()
            close = bool(((got_n.double() - want_n.double()).abs() <= 4 * torch.finfo(torch.float32).eps * scale)
                         .all())
            bad |= not close
            for _ in range(4):
                ours()
            areal_n = median_s(lambda: norm(x, loss_mask), LOOP_CALLS)
            timed = _rounds({"rlscan": ours, "copy": _copy_of(B * S * 4 * 3)}, CALLS)
            ours_s = timed["rlscan"]
            rows.append((name, B, S, "ok" if close else "BAD", areal_n, ours_s, timed["copy"], ""))
            print(f"{name} {B} x {S}: AReaL {areal_n * 1e3:,.1f} ms, rlscan {ours_s * 1e3:,.2f} ms", flush=True)

    print("\n| code | B × S | same | AReaL | rlscan | × AReaL | copy floor | rlscan / floor |")
    print("|---|---|---|---|---|---|---|---|")
    for name, B, S, same, areal_s, ours_s, floor_s, _ in rows:
        label = {"gae": "GAE loop", "grpo": f"group mean and std (GRPO), groups of {GROUP}",
                 "rloo": f"group leave-one-out mean (RLOO), groups of {GROUP}",
                 "batch": "batch mean and std"}[name]
        print(f"| {label} | {B} × {S} | {same} | {areal_s * 1e3:,.1f} ms | {ours_s * 1e3:,.2f} ms | "
              f"{areal_s / ours_s:,.0f} | {floor_s * 1e3:,.2f} ms | {ours_s / floor_s:.2f} |")
    for name, B, S, *_, note in rows:
        if note:
            print(f"\n{B} × {S}, the whole _compute_advantages: {note}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
