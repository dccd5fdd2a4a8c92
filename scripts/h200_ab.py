"""This checkout's rlscan against an earlier revision of it, side by side in one process, by
device time (CUDA-graph replay), alternating the two three times; each result is checked
against its float64 truth first. Prints a table last.

    git archive <rev> core | tar -x -C /tmp/base && mv /tmp/base/core /tmp/base/rlscan_base
    python scripts/h200_ab.py /tmp/base --ops vtrace,retrace --shapes 4096x2048,16384x512

The earlier revision is imported as the package ``rlscan_base`` from the given folder (its
modules import one another relatively, so the copy runs its own kernels).
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time

import torch

import rlscan
from rlscan.bench import cases, check, floors

from h200_explore import timed_device as device_us  # noqa: E402 - this folder is on sys.path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="folder holding the package rlscan_base")
    ap.add_argument("--ops", default=",".join(cases.CASES))
    ap.add_argument("--shapes", default="4096x2048,16384x512", help="N x T, comma-separated")
    ap.add_argument("--layout", default="tn", choices=("tn", "nt"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, args.base)
    base = importlib.import_module("rlscan_base")
    dev = torch.device("cuda")
    fl = floors.measure(dev, quick=True)
    rows = []
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        for op in args.ops.split(","):
            case = cases.CASES[op]
            inputs = cases.make_inputs(case, T, N, torch.float32, args.layout, dev)
            want, _ = check.truth(case, inputs, T, N)
            floor_us = cases.moved_bytes(inputs, len(want), T, N, torch.float32) / fl.bandwidth * 1e6
            calls = {"base": lambda: case.call(base, inputs), "now": lambda: case.call(rlscan, inputs)}
            errs = {k: check.relative_error(cases.outputs_of(fn()), want) for k, fn in calls.items()}
            times = {k: [] for k in calls}
            for _ in range(args.rounds):
                for k, fn in calls.items():
                    times[k].append(device_us(fn) if errs[k] < 1e-4 else float("nan"))
            b, n = (statistics.median(times[k]) for k in calls)
            rows.append((f"{op} {args.layout} {N}x{T}", b, n, b / floor_us, n / floor_us, errs["base"], errs["now"]))
            print(f"  {rows[-1][0]:32s} base {b:8.1f} us  now {n:8.1f} us  ×{b / n:.3f}  "
                  f"err {errs['base']:.1e} / {errs['now']:.1e}", flush=True)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}: "
          f"device time, median of {args.rounds} alternating rounds")
    print(f"  {'shape':32s} {'base us':>9s} {'now us':>9s} {'base/now':>9s} {'× floor':>15s}")
    for name, b, n, bf, nf, _, _ in rows:
        print(f"  {name:32s} {b:9.1f} {n:9.1f} {b / n:9.3f} {bf:6.2f} -> {nf:5.2f}")


if __name__ == "__main__":
    sys.exit(main())
