"""SkyRL's advantage estimators on the CPU, where its trainer computes them: SkyRL's own
functions (``ppo_utils`` of the installed ``skyrl``, else ``skyrl-train``) against
rlscan.adapters.skyrl, with the copy floor measured in the same run::

    python tools/skyrl_cpu_timing.py              # 512 x 4096 and 64 x 32768, groups of 8
    python tools/skyrl_cpu_timing.py --threads 1  # torch's and numba's threads: one (a machine others share)
    python tools/skyrl_cpu_timing.py --dry        # tiny shapes: checks the script

What it measures, at each shape:

* the batch as SkyRL's trainer holds it: responses right-aligned (0.4's layout) at lengths
  from T/4 to T, float32 rewards (a KL-style term on every response token, the score at the
  last), float32 values, the int64 ``response_mask``, the prompts' uids as a list of strings
  in groups of 8, γ = 1 and λ = 0.95;
* gae and reinforce++ (SkyRL's numbers, and ``skip_masked=True``, which has no SkyRL loop to
  compare with), grpo, rloo and maxrl (skyrl 0.4);
* correctness first: the returns and the group estimators bit for bit against SkyRL's, the
  whitened advantages to float32's rounding; a wrong result is marked BAD and the exit
  code is 1;
* the copy floor: the bytes each call must move (each input read once, each output written
  once: a group estimator's one tensor, returned twice, once) over ``Tensor.copy_``'s rate
  on 256 MB (``rlscan.bench.floors``);
* times: medians of ``CALLS`` calls of rlscan's and ``LOOP_CALLS`` of SkyRL's, after untimed
  first calls, in rounds that take turns; rlscan's p90 over its median says how steady it
  is. The machine's other work moves every figure: compare ratios from one run.

It prints a line per estimator and shape, then the markdown table, last.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import skyrl_py311  # noqa: E402
from timed_rounds import rounds  # noqa: E402

from rlscan.adapters import skyrl  # noqa: E402

DRY = "--dry" in sys.argv
THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else None
SHAPES = [(16, 64), (4, 256)] if DRY else [(512, 4096), (64, 32768)]
GROUP = 8
CALLS, LOOP_CALLS, WARM = (3, 1, 2) if DRY else (20, 3, 10)
GAMMA, LAMBD = 1.0, 0.95
EPS32 = float(torch.finfo(torch.float32).eps)


def batch(B: int, T: int, seed: int = 0):
    """``(rewards, values, response_mask, uids)`` as the module docstring says."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] >= (T - lengths)[:, None]).long()
    rewards = -0.01 * torch.rand(B, T, generator=g) * mask
    rewards[:, -1] += torch.randn(B, generator=g)
    values = torch.randn(B, T, generator=g)
    uids = [f"{i // GROUP:08x}-uid" for i in range(B)]
    return rewards, values, mask, uids


def whitened_close(got, want) -> bool:
    scale = float(want.double().abs().max()) + 1.0
    return bool(((got.double() - want.double()).abs() <= 64 * EPS32 * scale).all())


def same(name: str, got, want) -> bool:
    if name.startswith(("gae", "reinforce++")):
        return torch.equal(got[1], want[1]) and whitened_close(got[0], want[0])
    return all(torch.equal(a, b) for a, b in zip(got, want))


def estimators(ppo_utils, r, v, m, uids) -> dict:
    """``{name: (rlscan's call, SkyRL's call or None)}``."""
    calls = {
        "gae": (lambda: skyrl.compute_gae_advantage_return(r, v, m, GAMMA, LAMBD),
                lambda: ppo_utils.compute_gae_advantage_return(r, v, m, GAMMA, LAMBD)),
        "reinforce++": (lambda: skyrl.compute_reinforce_plus_plus_outcome_advantage(r, m, GAMMA),
                        lambda: ppo_utils.compute_reinforce_plus_plus_outcome_advantage(r, m, GAMMA)),
        "gae, skip_masked": (lambda: skyrl.compute_gae_advantage_return(r, v, m, GAMMA, LAMBD, skip_masked=True),
                             None),
        "reinforce++, skip_masked": (lambda: skyrl.compute_reinforce_plus_plus_outcome_advantage(
            r, m, GAMMA, skip_masked=True), None),
    }
    for name in ("grpo", "rloo", "maxrl"):
        attr = skyrl._ESTIMATORS[name][0]
        if hasattr(ppo_utils, attr):
            calls[name] = (lambda attr=attr: getattr(skyrl, attr)(r, m, uids),
                           lambda attr=attr: getattr(ppo_utils, attr)(r, m, uids))
    return calls


def moved_bytes(name: str, r, v, m) -> int:
    n = r.numel()
    if name.startswith("gae"):
        return n * (r.element_size() + v.element_size() + m.element_size() + 2 * 4)
    if name.startswith("reinforce++"):
        return n * (r.element_size() + m.element_size() + 2 * 4)
    return n * (r.element_size() + m.element_size() + 4)


def main() -> int:
    from loguru import logger

    from rlscan.bench import floors

    logger.remove()  # SkyRL's RLOO logs each response alone in its group; these batches have none
    if THREADS is not None:
        import numba

        torch.set_num_threads(THREADS)
        numba.set_num_threads(THREADS)
    modules = skyrl_py311.ppo_utils()
    if not modules:
        raise SystemExit("tools/skyrl_cpu_timing.py times SkyRL's own estimators: install skyrl or skyrl-train")
    release = "skyrl" if "skyrl" in modules else "skyrl-train"
    ppo_utils = modules[release]
    version = skyrl_py311.installed()[release]
    rows, bad = [], False
    for B, T in SHAPES:
        r, v, m, uids = batch(B, T)
        calls = estimators(ppo_utils, r, v, m, uids)
        bandwidth = floors.measure(torch.device("cpu"), quick=DRY).bandwidth
        for name, (ours, theirs) in calls.items():
            ok = None if theirs is None else same(name, ours(), theirs())
            bad |= ok is False
            fns = {"rlscan": ours, **({} if theirs is None else {"skyrl": theirs})}
            # rlscan's first calls of a signature compile, and try the loops' serial and parallel versions
            times = rounds(fns, {"rlscan": CALLS, "skyrl": LOOP_CALLS}, warm={"rlscan": WARM, "skyrl": 1})
            mine = times["rlscan"]
            row = dict(name=name, shape=f"{B} × {T}", ok=ok, rlscan_s=statistics.median(mine),
                       p90=sorted(mine)[int(0.9 * (len(mine) - 1))] / statistics.median(mine),
                       skyrl_s=statistics.median(times["skyrl"]) if theirs is not None else None,
                       floor_s=moved_bytes(name, r, v, m) / bandwidth)
            rows.append(row)
            theirs_text = "" if theirs is None else f"SkyRL {row['skyrl_s'] * 1e3:,.1f} ms, "
            print(f"{name:26s} {B} x {T}: {theirs_text}rlscan {row['rlscan_s'] * 1e3:,.2f} ms, "
                  f"floor {row['floor_s'] * 1e3:,.2f} ms", flush=True)
    print(f"\n{release} {version}, torch {torch.__version__}, {torch.get_num_threads()} threads, medians of {CALLS} "
          f"calls (SkyRL's: {LOOP_CALLS})\n")
    print("| estimator | B × T | ok | SkyRL | rlscan (median) | p90 / median | × SkyRL | copy floor "
          "| rlscan / floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        skyrl_text = "–" if row["skyrl_s"] is None else f"{row['skyrl_s'] * 1e3:,.1f} ms"
        ratio = "–" if row["skyrl_s"] is None else f"{row['skyrl_s'] / row['rlscan_s']:,.0f}"
        ok = "–" if row["ok"] is None else "ok" if row["ok"] else "BAD"
        print(f"| {row['name']} | {row['shape']} | {ok} | {skyrl_text} | {row['rlscan_s'] * 1e3:,.2f} ms | "
              f"{row['p90']:.2f} | {ratio} | {row['floor_s'] * 1e3:,.2f} ms | "
              f"{row['rlscan_s'] / row['floor_s']:.2f} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
