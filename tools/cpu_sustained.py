"""One CPU op called back to back for a while, as a training loop does: how long each call
takes as the run goes on, and how many calls ran the loop's parallel version.

A large CPU call may run the loop serially or on numba's threads; its runner times both and
runs the faster (``rlscan._cpu._Versions``). A rule read from the load average instead had
counted the caller's own calls as other work: after some seconds of back-to-back calls on a
2-CPU machine, every call ran serially. This shows which version runs over time, on an idle
machine and with ``--busy N`` processes spinning on other CPUs beside it (where the serial
loop is the faster one).

When to run it: after changing how the CPU path picks its loop version::

    python tools/cpu_sustained.py [--op linear_scan] [--shape 4096x2048] [--seconds 30] [--busy 0]

What it prints: every ``--every`` seconds the one-minute load average, the median call time
in that interval, and the share of its calls that ran the parallel loop. It writes no file.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

import rlscan
from rlscan.bench.host import _loop_versions_run


def _call_of(op: str, T: int, N: int):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(T, N, generator=gen)
    y = torch.rand(T, N, generator=gen)
    dones = torch.rand(T, N, generator=gen) < 0.01
    out = torch.empty(T, N)
    calls = {
        "linear_scan": lambda: rlscan.linear_scan(x, y, reverse=True, out=out),
        "episodic_cumsum": lambda: rlscan.episodic_cumsum(x, dones=dones, out=out),
        "td_lambda": lambda: rlscan.td_lambda(x, y, bootstrap_value=y[0], terminated=dones, out=out),
    }
    return calls[op]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--op", default="linear_scan", choices=["linear_scan", "episodic_cumsum", "td_lambda"])
    parser.add_argument("--shape", default="4096x2048", help="T x N")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=3.0, help="seconds per printed interval")
    parser.add_argument("--busy", type=int, default=0, help="processes spinning beside the run")
    args = parser.parse_args()
    T, N = (int(n) for n in args.shape.lower().split("x"))
    fn = _call_of(args.op, T, N)
    fn()  # compiles
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        print(f"{args.op} at {T} x {N} into out=, {args.busy} busy processes beside it")
        print(f"{'s':>6} {'load':>6} {'ms/call':>8} {'parallel':>9}")
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            times, before, begun = [], _loop_versions_run(args.op)[1], time.perf_counter()
            while time.perf_counter() - begun < args.every:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            share = (_loop_versions_run(args.op)[1] - before) / len(times)
            print(f"{time.perf_counter() - start:6.1f} {os.getloadavg()[0]:6.2f} "
                  f"{statistics.median(times) * 1e3:8.2f} {share:9.0%}", flush=True)
    finally:
        for p in spinners:
            p.kill()


if __name__ == "__main__":
    main()
