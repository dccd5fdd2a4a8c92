"""verl's advantage estimators on a GPU: verl's token loops against rlscan.adapters.verl
(``--cpu``: on the CPU, where verl's driver computes them; ``tools/verl_cpu_timing.py``).

What it measures, for each shape (``B x T`` = 256 x 4096 and 64 x 32768; float32 rewards,
bfloat16 values, an int64 response mask with EOS padding and, in every fourth row,
observation spans):

1. correctness first: rlscan's advantages and returns against verl's loop run in float64
   on the same inputs (the truth), and verl's own loop (bf16 carries) against it too;
2. the loop's wall clock per call (verl's own ``core_algos`` functions);
3. rlscan's wall clock per call (what the trainer pays, the count check's sync included)
   and device time (CUDA-graph replay, the count check left out), for GAE + whitening,
   for GAE's two-scan path (the next kept values, then GAE, then masked_whiten), for its
   one pass as two lanes of the scan engine where the row kernel would run, and for
   REINFORCE++;
4. the bandwidth floor: each input read once and each output written once, at the
   device's copy bandwidth (``rlscan.bench.floors``), for the device time.

When to run it: on a CUDA GPU, after changing the masked (step-skip) kernels, the
whitening or the verl adapter, to refresh the verl table of the benchmarks page; ``--dry``
checks the script itself on the CPU::

    python tools/verl_timing.py
    python tools/verl_timing.py --settings   # also the masked one pass under other launch settings
    python tools/verl_timing.py --rows       # GAE + whitening under row-kernel settings, more shapes
    python tools/verl_timing.py --budget-s 50   # no shape starts after 50 s (tools/gpu_record.py)
    TRITON_INTERPRET=1 python tools/verl_timing.py --dry   # tiny shapes on the CPU

What it prints: the copy bandwidth and launch floor, per shape the errors and a JSON line of
its rows, then a markdown table (loop ms, rlscan wall and device µs, floor, ratios). It
writes ``$OUT/verl_timing.json`` (``./bench-out/`` without ``$OUT``) and exits 1 if a result
was wrong.
"""
from __future__ import annotations

import json
import os
import sys
import time
import types

import torch

import rlscan
import rlscan.whiten
from rlscan.adapters import verl
from rlscan.bench import floors, timing
from rlscan._triton.policy import forced_policy

try:
    from verl.trainer.ppo import core_algos
except ImportError as error:
    raise SystemExit(f"tools/verl_timing.py times verl's own estimators: install verl ({error})")


def verl_gae(r, v, m, gamma, lam):
    return core_algos.compute_gae_advantage_return(r, v, m, gamma, lam)


def verl_rpp(r, m, gamma):
    return core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m, types.SimpleNamespace(gamma=gamma))


DRY = "--dry" in sys.argv
SETTINGS = "--settings" in sys.argv
# --budget-s N: no shape starts once N seconds have passed since the start (tools/gpu_record.py)
BUDGET_S = float(sys.argv[sys.argv.index("--budget-s") + 1]) if "--budget-s" in sys.argv else float("inf")
STARTED = time.monotonic()
dev = torch.device("cpu" if DRY else "cuda")
SHAPES = [(4, 64), (2, 256)] if DRY else [(256, 4096), (64, 32768)]
GAMMA, LAM = 1.0, 0.95  # verl's default gamma; lam below 1 exercises the general form
sync = timing.synchronizer(dev)
rows = []


def make(B, T, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g, device=dev)
    t = torch.arange(T, device=dev)
    mask = (t[None] < lengths[:, None]).long()
    turns = (torch.arange(B, device=dev)[:, None] % 4 == 0) & ((t[None] // max(1, T // 16)) % 3 == 1)
    mask = mask * (~turns).long()  # multi-turn rows: observation spans inside the response
    rewards = torch.randn(B, T, device=dev, generator=g) * 0.01  # a KL penalty per token
    rewards[torch.arange(B, device=dev), lengths - 1] += torch.randn(B, device=dev, generator=g)  # the score at EOS
    values = torch.randn(B, T, device=dev, generator=g).to(torch.bfloat16)
    return rewards, values, mask


def error(got, truth):
    return float((got.double() - truth).abs().max() / truth.abs().max().clamp(min=1e-30))


def wall(fn, calls):
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def device(fn):
    """Device time per call; the count check (a sync, which a graph cannot hold) left out."""
    if DRY:
        return float("nan"), "dry run"
    check = rlscan.whiten._check_count
    rlscan.whiten._check_count = lambda n: None
    try:
        _, once = timing.timed_once(fn, sync)
        t = timing.device_time(fn, one_call_s=once, target_s=0.05, repeat=5)
        return t.seconds, t.method
    finally:
        rlscan.whiten._check_count = check


def _chained(b, t, w, **kw):
    return dict(kind="chained_scan", block_b=b, block_t=t, num_warps=w, **kw)


# the masked one pass's lanes come in pairs, so every block_b is even
VARIANTS = {"scan b2 t1024 w8": dict(kind="scan", block_b=2, block_t=1024, num_warps=8),
            "scan b2 t2048 w8": dict(kind="scan", block_b=2, block_t=2048, num_warps=8),
            "scan b2 t4096 w16": dict(kind="scan", block_b=2, block_t=4096, num_warps=16),
            "scan b4 t256 w4 c16": dict(kind="scan", block_b=4, block_t=256, num_warps=4, n_chunks=16),
            "chained_scan b2 t1024 w4": _chained(2, 1024, 4), "chained_scan b2 t2048 w8": _chained(2, 2048, 8),
            "chained_scan b2 t1024 w4 words": _chained(2, 1024, 4, link="words", lookback=8)}


def time_settings(r, v, m, truth_returns):
    """The masked one pass (GAE alone, bool and int64 masks) under each of ``VARIANTS``."""
    from rlscan import _cache
    from rlscan._triton import launch

    for label, forced in {"heuristic": None, **VARIANTS}.items():
        for mask in (m.bool(), m):
            _cache.clear()
            fn = lambda: rlscan.gae(r, v, mask=mask, gamma=GAMMA, lmbda=LAM, time_dim=1)  # noqa: E731
            with launch.forced_config(**(forced or {})):
                err = error(fn()[1], truth_returns)
                us = 1e6 * device(fn)[0] if err < 1e-5 else float("nan")
                ran = "; ".join(f"{p.cfg.kind} b{p.cfg.block_b} t{p.cfg.block_t} w{p.cfg.num_warps} c{p.cfg.n_chunks}"
                                for p in launch.plans())
            print(f"  {label:32s} {str(mask.dtype):12s} {us:7.1f} us  returns error {err:.1e}  ran {ran}", flush=True)


ROW_SHAPES = [(256, 4096), (64, 32768), (512, 2048), (1024, 1024), (128, 2048), (32, 1024), (64, 8192),
              (16, 32768), (8, 4096)]
# (BLOCK_T, warps, look-back): a look-back of 0 walks each row in one program (the table's gae_row_tiles)
ROW_VARIANTS = [(1024, 4, 0), (2048, 4, 0), (2048, 8, 0), (4096, 8, 0), (4096, 16, 0),
                (512, 2, 4), (512, 4, 4), (1024, 4, 1), (1024, 4, 4), (1024, 8, 4),
                (2048, 4, 4), (2048, 8, 2), (2048, 8, 8), (4096, 16, 4)]


def time_rows():
    """GAE + whitening (verl's estimator) under each of ``ROW_VARIANTS`` at ``ROW_SHAPES``,
    beside the shipped table and the two lanes; device µs and the ratio to the floor."""
    bw = floors.measure(dev, quick=True)
    print(f"copy bandwidth {bw.bandwidth / 1e9:.0f} GB/s", flush=True)
    results = {}
    for B, T in ROW_SHAPES if not DRY else [(4, 64)]:
        r, v, m = make(B, T)
        truth = verl_gae(r.double(), v.double(), m, GAMMA, LAM)[1]
        floor = B * T * (r.element_size() + v.element_size() + m.element_size() + 8) / bw.bandwidth
        fn = lambda: verl.compute_gae_advantage_return(r, v, m, GAMMA, LAM)  # noqa: E731
        settings = {"table": None, "lanes": ()}
        settings.update({f"{'chain' if lb else 'walk'} t{t} w{w}" + (f" lb{lb}" if lb else ""): ((1 << 30, t, w, lb),)
                         for t, w, lb in ROW_VARIANTS if t <= T or DRY})
        for label, tiles in settings.items():
            with forced_policy(**({} if tiles is None else dict(gae_row_tiles=tiles, gae_row_min_t=1))):
                err = error(fn()[1], truth)
                us = 1e6 * device(fn)[0] if err < 1e-5 else float("nan")
            results[(f"{B}x{T}", label)] = (us, us / (1e6 * floor))
            print(f"  {B}x{T} {label:22s} {us:7.1f} us  x{us / (1e6 * floor):.2f} floor  returns error {err:.1e}",
                  flush=True)
    labels = list(dict.fromkeys(label for _, label in results))
    shapes = list(dict.fromkeys(shape for shape, _ in results))
    print("\n| setting | " + " | ".join(shapes) + " |\n|---|" + "---|" * len(shapes))
    for label in labels:
        cells = [results.get((shape, label)) for shape in shapes]
        print(f"| {label} | " + " | ".join("-" if c is None else f"{c[0]:.1f} ({c[1]:.2f})" for c in cells) + " |")
    return 0


class lanes:
    """GAE's one pass as two lanes of the scan engine (the table's ``gae_row_tiles`` forced empty), the
    kernel that rows contiguous in time ran before the row kernel."""

    def __enter__(self):
        self.forced = forced_policy(gae_row_tiles=())
        self.forced.__enter__()

    def __exit__(self, *exc):
        self.forced.__exit__(*exc)


class two_scans:
    """GAE's masked path without the one pass: the next kept values, GAE, then masked_whiten."""

    def __enter__(self):
        self.forced = forced_policy(gae_lambda_min=2.0)
        self.forced.__enter__()

    def __exit__(self, *exc):
        self.forced.__exit__(*exc)


def write(bw, not_run=()):
    out = os.environ.get("OUT", "bench-out")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "verl_timing.json"), "w") as f:
        json.dump(dict(bandwidth_Bps=bw.bandwidth, launch_s=bw.launch_s, rows=rows, not_run=list(not_run),
                       device=str(torch.cuda.get_device_name() if dev.type == "cuda" else "cpu")), f, indent=1,
                  default=str)


def main():
    bw = floors.measure(dev, quick=True)
    print(f"copy bandwidth {bw.bandwidth / 1e9:.0f} GB/s; launch floor {1e6 * (bw.launch_s or 0):.1f} us", flush=True)
    not_run = []
    for B, T in SHAPES:
        if time.monotonic() - STARTED > BUDGET_S:
            not_run.append(f"{B}x{T}")
            print(f"{B}x{T}: not run (--budget-s {BUDGET_S:.0f})", flush=True)
            continue
        r, v, m = make(B, T)
        n = B * T
        # 1. correctness against the float64 loop
        truth = verl_gae(r.double(), v.double(), m, GAMMA, LAM)
        fused = verl.compute_gae_advantage_return(r, v, m, GAMMA, LAM)
        with two_scans():
            scans = verl.compute_gae_advantage_return(r, v, m, GAMMA, LAM)
        t0 = time.perf_counter()
        loop = verl_gae(r, v, m, GAMMA, LAM)
        sync()
        loop_once = time.perf_counter() - t0
        errs = {name: (error(out[0], truth[0]), error(out[1], truth[1]))
                for name, out in (("rlscan", fused), ("two scans", scans), ("verl loop", loop))}
        ok = errs["rlscan"][0] < 1e-4 and errs["rlscan"][1] < 1e-5 and errs["two scans"][0] < 1e-4
        print(f"{B}x{T} GAE max error / max |truth| (advantages, returns): {errs}", flush=True)
        rpp_truth = verl_rpp(r.double(), m, GAMMA)
        rpp = verl.compute_reinforce_plus_plus_outcome_advantage(r, m, {"gamma": GAMMA})
        rpp_err = (error(rpp[0], rpp_truth[0]), error(rpp[1], rpp_truth[1]))
        ok_rpp = rpp_err[0] < 1e-4 and rpp_err[1] < 1e-5
        # 2-4. timing, floors
        loop_s = min(loop_once, wall(lambda: verl_gae(r, v, m, GAMMA, LAM), 1 if T > 8192 else 3))
        rpp_loop_s = wall(lambda: verl_rpp(r, m, GAMMA), 1 if T > 8192 else 3)
        gae_fn = lambda: verl.compute_gae_advantage_return(r, v, m, GAMMA, LAM)  # noqa: E731
        rpp_fn = lambda: verl.compute_reinforce_plus_plus_outcome_advantage(r, m, {"gamma": GAMMA})  # noqa: E731
        gae_only = lambda: rlscan.gae(r, v, mask=m, gamma=GAMMA, lmbda=LAM, time_dim=1)  # noqa: E731
        gae_wall = wall(gae_fn, 20)
        gae_dev, method = device(gae_fn)
        only_dev, _ = device(gae_only)
        with two_scans():
            scans_dev, _ = device(gae_fn)
        with lanes():
            lanes_dev, _ = device(gae_fn)
        rpp_wall = wall(rpp_fn, 20)
        rpp_dev, _ = device(rpp_fn)
        moved = n * (r.element_size() + v.element_size() + m.element_size() + 2 * 4)
        floor = moved / bw.bandwidth  # device time against the bytes alone (bw.of adds the host's launch floor)
        rpp_floor = n * (r.element_size() + m.element_size() + 2 * 4) / bw.bandwidth
        rows.append(dict(shape=f"{B}x{T}", estimator="gae", ok=ok, errors=errs, loop_s=loop_s, wall_s=gae_wall,
                         device_s=gae_dev, gae_only_device_s=only_dev, two_scans_device_s=scans_dev,
                         lanes_device_s=lanes_dev, floor_s=floor, moved_bytes=moved, method=method))
        rows.append(dict(shape=f"{B}x{T}", estimator="reinforce_plus_plus", ok=ok_rpp, errors=rpp_err,
                         loop_s=rpp_loop_s, wall_s=rpp_wall, device_s=rpp_dev, floor_s=rpp_floor, method=method))
        print(json.dumps(rows[-2:], default=str), flush=True)
        write(bw)  # after every shape: a run stopped from outside keeps its rows
        if SETTINGS:
            time_settings(r, v, m, truth[1])

    write(bw, not_run)
    print()
    print("| shape | estimator | ok | verl loop ms | rlscan wall us | rlscan device us | floor us | x loop (wall) "
          "| device / floor | GAE alone us | two scans us | two lanes us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        us = lambda k: f"{1e6 * row[k]:.1f}" if k in row else "-"  # noqa: E731
        print(f"| {row['shape']} | {row['estimator']} | {'ok' if row['ok'] else 'BAD'} | {1e3 * row['loop_s']:.1f} "
              f"| {us('wall_s')} | {us('device_s')} | {us('floor_s')} | {row['loop_s'] / row['wall_s']:.0f} "
              f"| {row['device_s'] / row['floor_s']:.2f} | {us('gae_only_device_s')} | {us('two_scans_device_s')} "
              f"| {us('lanes_device_s')} |")
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    if "--cpu" in sys.argv:
        import verl_cpu_timing

        sys.exit(verl_cpu_timing.main())
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("tools/verl_timing.py times verl's estimators on a CUDA GPU, and torch sees none here "
                 "(TRITON_INTERPRET=1 python tools/verl_timing.py --dry checks the script on the CPU)")
    sys.exit(time_rows() if "--rows" in sys.argv else main())
