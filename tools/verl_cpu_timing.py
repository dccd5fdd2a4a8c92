"""verl's advantage estimators on the CPU, where verl's driver computes them: verl's own
functions (``verl.trainer.ppo.core_algos``) against rlscan.adapters.verl, with the copy
floor measured in the same run. Run through ``tools/verl_timing.py --cpu``::

    python tools/verl_timing.py --cpu                 # every shape (a few minutes)
    python tools/verl_timing.py --cpu --quick         # 256 x 4096, 64 x 32768 and the groups
    python tools/verl_timing.py --cpu --baselines     # only the token baselines and GDPO
    python tools/verl_timing.py --cpu --dry           # tiny shapes: checks the script

What it measures:

* the token estimators, GAE + whitening and REINFORCE++, at ``B x T`` = 256 x 4096,
  64 x 32768, 16 x 131072 and 256 x 131072 (float32 rewards with a KL-style term on every
  token and the score at EOS, bfloat16 values, an int64 response mask with EOS padding and
  observation spans in every fourth row, γ = 1, λ = 0.95). verl's loop costs the same for
  each token step, whatever the step, so beyond ``LOOP_T`` steps it is timed on the first
  ``LOOP_T`` (a batch of its own) and scaled by ``T / LOOP_T`` (the table says so);
* the outcome estimators (GRPO, pass@k, RLOO, OPO, GPG, REINFORCE++-baseline) at 8192
  responses x 2048 tokens in groups of 16 (uids as verl makes them, strings);
* the optimal token baselines (``optimal_token_baseline``, ``tir_optimal_token_baseline``,
  with ``rollout_is_weights``) and GDPO (on the token rewards) at 512 x 4096 and
  64 x 32768 in groups of 8 (``BASELINE_SHAPES``; float32 log-probabilities and
  ``sum_pi_squared``), verl's functions timed whole; the table gives the largest difference
  of rlscan's advantages from verl's (the returns must be equal). Their copy floor is a
  ``Tensor.copy_`` that moves the same bytes, timed in the same rounds as rlscan (its
  median), so that both see the same load;
* correctness first, on the batch (or its timed prefix): rlscan's returns against verl's
  (GAE's against verl's on the bf16 values widened to float32, which rlscan computes), and
  the advantages to float32's rounding; a wrong result is marked BAD and the exit code is 1;
* the copy floor: the bytes each call must move (each input read once, each output written
  once) over ``Tensor.copy_``'s rate on 256 MB (``rlscan.bench.floors``), measured before
  each shape's rounds;
* times: the median of ``CALLS`` calls after the first ones, rounds interleaved (verl, rlscan,
  verl, ...); verl's loops ``LOOP_CALLS`` calls. rlscan's p90 over its median says how
  steady it is. The machine's other work moves every figure: compare ratios from one run.

It prints a line per estimator and shape, then the markdown table, last.
"""
from __future__ import annotations

import statistics
import sys
import types
import uuid

import numpy as np
import torch

from rlscan import _cpu
from rlscan.adapters import verl
from rlscan.bench import floors
from timed_rounds import rounds

try:
    from verl.trainer.ppo import core_algos
except ImportError as error:  # pragma: no cover - the tool needs verl
    raise SystemExit(f"tools/verl_timing.py --cpu times verl's own estimators: install verl ({error})")

DRY = "--dry" in sys.argv
QUICK = "--quick" in sys.argv
SHAPES = [(4, 64), (2, 256)] if DRY else [(256, 4096), (64, 32768)] + ([] if QUICK else [(16, 131072), (256, 131072)])
GROUPS = (64, 32, 4) if DRY else (8192, 2048, 16)
BASELINES = "--baselines" in sys.argv
BASELINE_SHAPES = [(16, 64, 8), (4, 256, 2)] if DRY else [(512, 4096, 8), (64, 32768, 8)]
LOOP_T = 64 if DRY else 32768
CALLS, LOOP_CALLS = (3, 1) if DRY else (20, 3)
GAMMA, LAM = 1.0, 0.95
EPS32 = float(torch.finfo(torch.float32).eps)
WARM = 2 * (_cpu.RECENT + 1)


def make(B, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    t = torch.arange(T)
    mask = (t[None] < lengths[:, None]).long()
    turns = (torch.arange(B)[:, None] % 4 == 0) & ((t[None] // max(1, T // 16)) % 3 == 1)
    mask = mask * (~turns).long()
    rewards = torch.randn(B, T, generator=g) * 0.01 * mask
    rewards[torch.arange(B), lengths - 1] += torch.randn(B, generator=g)
    values = torch.randn(B, T, generator=g).to(torch.bfloat16)
    return rewards, values, mask


def close(got, want, scale) -> bool:
    return bool(((got.double() - want.double()).abs() <= 64 * EPS32 * (want.double().abs() + scale)).all())


def timed(fns: dict) -> dict:
    """Seconds per call of each function (verl's ``LOOP_CALLS``, the others ``CALLS``), in
    rounds that take turns, after untimed first calls (rlscan's first calls of a signature
    take turns between the loops' serial and parallel versions, to time both:
    ``_cpu._Versions``)."""
    return rounds(fns, {name: LOOP_CALLS if name.startswith("verl") else CALLS for name in fns},
                  warm={name: WARM if name.startswith("rlscan") else 1 for name in fns})


def copy_bandwidth() -> float:
    return floors.measure(torch.device("cpu"), quick=DRY).bandwidth


def token_rows(B, T) -> list:
    r, v, m = make(B, T)
    T_loop = min(T, LOOP_T)
    rl, vl, ml = (x[:, :T_loop].contiguous() for x in (r, v, m))  # verl's timed batch
    config = types.SimpleNamespace(gamma=GAMMA)
    ok = {}
    ours = verl.compute_gae_advantage_return(rl, vl, ml, GAMMA, LAM)
    theirs = core_algos.compute_gae_advantage_return(rl, vl.float(), ml, GAMMA, LAM)
    ok["gae"] = torch.equal(ours[1], theirs[1]) and close(ours[0], theirs[0], 1.0)
    ours = verl.compute_reinforce_plus_plus_outcome_advantage(rl, ml, config)
    theirs = core_algos.compute_reinforce_plus_plus_outcome_advantage(rl, ml, config)
    ok["reinforce_plus_plus"] = torch.equal(ours[1], theirs[1]) and close(ours[0], theirs[0], 1.0)
    bandwidth = copy_bandwidth()
    fns = {"verl gae": lambda: core_algos.compute_gae_advantage_return(rl, vl, ml, GAMMA, LAM),
           "rlscan gae": lambda: verl.compute_gae_advantage_return(r, v, m, GAMMA, LAM),
           "verl reinforce_plus_plus": lambda: core_algos.compute_reinforce_plus_plus_outcome_advantage(rl, ml, config),
           "rlscan reinforce_plus_plus": lambda: verl.compute_reinforce_plus_plus_outcome_advantage(r, m, config)}
    times = timed(fns)
    n = B * T
    moved = {"gae": n * (r.element_size() + v.element_size() + m.element_size() + 2 * 4),
             "reinforce_plus_plus": n * (r.element_size() + m.element_size() + 2 * 4)}
    rows = []
    for est in ("gae", "reinforce_plus_plus"):
        ours = times[f"rlscan {est}"]
        rows.append(dict(estimator=est, shape=f"{B} × {T}", ok=ok[est],
                         verl_s=statistics.median(times[f"verl {est}"]) * T / T_loop, scaled=T > T_loop,
                         rlscan_s=statistics.median(ours), p90=sorted(ours)[int(0.9 * (len(ours) - 1))],
                         floor_s=moved[est] / bandwidth, bandwidth=bandwidth))
    return rows


OUTCOME = ("grpo", "grpo_passk", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline")


def group_rows() -> list:
    B, T, size = GROUPS
    r, _, m = make(B, T, seed=1)
    uids = [str(uuid.UUID(int=i)) for i in range(B // size)]
    index = np.array([uids[i // size] for i in range(B)], dtype=object)
    config = {"norm_adv_by_std_in_grpo": True}
    bandwidth = copy_bandwidth()
    fns, ok = {}, {}
    for name in OUTCOME:
        attr = verl._ESTIMATORS[name.upper()][1]
        kwargs = dict(token_level_rewards=r, response_mask=m, index=index, config=config)
        if name == "grpo":
            kwargs.pop("config")
        ours, theirs = getattr(verl, attr), getattr(core_algos, attr)
        got, want = ours(**kwargs), theirs(**kwargs)
        ok[name] = close(got[0], want[0], float(want[0].abs().max()))
        fns[f"verl {name}"] = lambda theirs=theirs, kwargs=kwargs: theirs(**kwargs)
        fns[f"rlscan {name}"] = lambda ours=ours, kwargs=kwargs: ours(**kwargs)
    times = timed(fns)
    moved = B * T * (r.element_size() + m.element_size() + 4)
    rows = []
    for name in OUTCOME:
        ours = times[f"rlscan {name}"]
        rows.append(dict(estimator=name, shape=f"{B} × {T} (groups of {size})", ok=ok[name],
                         verl_s=statistics.median(times[f"verl {name}"]), scaled=False,
                         rlscan_s=statistics.median(ours), p90=sorted(ours)[int(0.9 * (len(ours) - 1))],
                         floor_s=moved / bandwidth, bandwidth=bandwidth))
    return rows


BASELINE_ESTIMATORS = {
    # name: (function name, floor bytes per token: inputs read once, outputs written once)
    "optimal_token_baseline": ("compute_optimal_token_baseline_advantage", 4 + 8 + 3 * 4 + 2 * 4),
    "tir_optimal_token_baseline": ("compute_multi_turn_optimal_token_baseline_advantage", 4 + 8 + 3 * 4 + 2 * 4),
    "gdpo": ("compute_gdpo_outcome_advantage", 4 + 8 + 4),  # one tensor, returned twice
}


def baseline_inputs(B, T, size):
    """:func:`make`'s responses, with the actor's float32 ``old_log_probs`` (of ``π``),
    ``sum_pi_squared`` (at least ``π²``) and truncated ``rollout_is_weights``."""
    r, _, m = make(B, T, seed=2)
    g = torch.Generator().manual_seed(3)
    lp = -torch.rand(B, T, generator=g) * 4
    pi = lp.exp()
    sp = pi * pi + (1 - pi) ** 2 * torch.rand(B, T, generator=g)
    iw = (1 + 0.2 * torch.randn(B, T, generator=g)).clamp(0, 2)
    uids = [str(uuid.UUID(int=i)) for i in range(B // size)]
    index = np.array([uids[i // size] for i in range(B)], dtype=object)
    return r, m, index, lp, sp, iw


def copy_of(nbytes: int):
    """A torch copy that moves ``nbytes`` (reads half, writes half): the floor of a call
    that moves them, timed in the same rounds as the call."""
    src = torch.rand(nbytes // 8)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def baseline_rows(B, T, size) -> list:
    r, m, index, lp, sp, iw = baseline_inputs(B, T, size)
    args = {"optimal_token_baseline": (r, m, index, lp, sp, iw), "tir_optimal_token_baseline": (r, m, index, lp, sp, iw),
            "gdpo": (r, m, index)}
    fns, ok, diff = {}, {}, {}
    for name, (_, per_token) in BASELINE_ESTIMATORS.items():
        fns[f"floor {name}"] = copy_of(B * T * per_token)
    for name, (attr, _) in BASELINE_ESTIMATORS.items():
        ours, theirs = getattr(verl, attr), getattr(core_algos, attr)
        got, want = ours(*args[name]), theirs(*args[name])
        diff[name] = float((got[0] - want[0]).abs().max())
        ok[name] = close(got[0], want[0], float(want[0].abs().max())) and (name == "gdpo" or torch.equal(got[1], want[1]))
        fns[f"verl {name}"] = lambda theirs=theirs, a=args[name]: theirs(*a)
        fns[f"rlscan {name}"] = lambda ours=ours, a=args[name]: ours(*a)
    times = timed(fns)
    rows = []
    for name, (_, per_token) in BASELINE_ESTIMATORS.items():
        ours, floor_s = times[f"rlscan {name}"], statistics.median(times[f"floor {name}"])
        rows.append(dict(estimator=name, shape=f"{B} × {T} (groups of {size})", ok=ok[name], max_diff=diff[name],
                         verl_s=statistics.median(times[f"verl {name}"]), scaled=False,
                         rlscan_s=statistics.median(ours), p90=sorted(ours)[int(0.9 * (len(ours) - 1))],
                         floor_s=floor_s, bandwidth=B * T * per_token / floor_s))
    return rows


def line(row) -> str:
    return (f"{row['estimator']:28s} {row['shape']:26s} {'ok' if row['ok'] else 'BAD'}  verl {1e3 * row['verl_s']:9.1f} ms"
            f"{' (scaled)' if row['scaled'] else ''}  rlscan {1e3 * row['rlscan_s']:7.2f} ms (p90 x"
            f"{row['p90'] / row['rlscan_s']:.2f})  x{row['verl_s'] / row['rlscan_s']:.0f} verl  floor "
            f"{1e3 * row['floor_s']:.2f} ms ({row['bandwidth'] / 1e9:.1f} GB/s), x{row['rlscan_s'] / row['floor_s']:.2f}"
            + (f"  max |adv - verl's| {row['max_diff']:.3g}" if "max_diff" in row else ""))


def verdict(row) -> str:
    return ("ok" if row["ok"] else "BAD") + (f" (max \\|Δ\\| {row['max_diff']:.2g})" if "max_diff" in row else "")


def main() -> int:
    print(f"torch threads {torch.get_num_threads()}, rlscan CPU threads {_cpu.cpu_threads()}",
          flush=True)
    rows = []
    for B, T in [] if BASELINES else SHAPES:
        for row in token_rows(B, T):
            rows.append(row)
            print(line(row), flush=True)
    for row in [] if BASELINES else group_rows():
        rows.append(row)
        print(line(row), flush=True)
    for B, T, size in BASELINE_SHAPES:
        for row in baseline_rows(B, T, size):
            rows.append(row)
            print(line(row), flush=True)
    print()
    print("| estimator | B × T | ok | verl | rlscan (median) | p90 / median | × verl | copy floor | rlscan / floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        verl_ms = f"{1e3 * row['verl_s']:,.1f} ms" + (" *" if row["scaled"] else "")
        print(f"| {row['estimator']} | {row['shape']} | {verdict(row)} | {verl_ms} "
              f"| {1e3 * row['rlscan_s']:.2f} ms | {row['p90'] / row['rlscan_s']:.2f} "
              f"| {row['verl_s'] / row['rlscan_s']:,.0f} | {1e3 * row['floor_s']:.2f} ms "
              f"| {row['rlscan_s'] / row['floor_s']:.2f} |")
    if any(row["scaled"] for row in rows):
        print(f"\n\\* verl's loop timed on the first {LOOP_T} tokens of each response and scaled to T.")
    return 0 if all(row["ok"] for row in rows) else 1
