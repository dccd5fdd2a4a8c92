"""How many ``[B, T]`` rows one thread of the CPU path walks side by side
(``rlscan._cpu.ROWS_TOGETHER``): each op, in rows contiguous in time, with 1, 2, 4 and 8
rows a block, on one thread, side by side in one run::

    python tools/cpu_rows_timing.py            # 256 x 4096 and 64 x 32768
    python tools/cpu_rows_timing.py --dry      # tiny shapes: checks the script

Each cell is the least of ``CALLS`` calls into ``out=`` buffers (the loop alone, no fresh
pages), in ms, after a first call that compiles; the results of every width are checked
against the first width's, bit for bit (each row's steps run in order whatever the width).
The machine's other work moves every figure: compare the columns of one run.
"""
from __future__ import annotations

import sys
import time

import torch

import rlscan
from rlscan import _cache, _cpu

DRY = "--dry" in sys.argv
SHAPES = [(64, 64)] if DRY else [(256, 4096), (64, 32768)]
WIDTHS = (1, 2, 4, 8)
CALLS = 3 if DRY else 15


def calls(B: int, T: int) -> dict:
    g = torch.Generator().manual_seed(0)
    r, v = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    done = torch.rand(B, T, generator=g) < 0.01
    last = torch.randn(B, generator=g)
    pair, one = (torch.empty(B, T), torch.empty(B, T)), torch.empty(B, T)
    return {
        "gae": (lambda: rlscan.gae(r, v, bootstrap_value=last, terminated=done, time_dim=-1, out=pair), pair),
        "td_lambda": (lambda: rlscan.td_lambda(r, v, bootstrap_value=last, terminated=done, time_dim=-1, out=one),
                      (one,)),
        "discounted_returns": (lambda: rlscan.discounted_returns(r, terminated=done, time_dim=-1, out=one), (one,)),
    }


def least_ms(fn) -> float:
    fn()
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main() -> int:
    _cpu.PARALLEL_MIN_ELEMENTS = 1 << 62  # one thread: the widths compared, not the threads
    rows, bad = [], False
    for B, T in SHAPES:
        for name, (fn, outs) in calls(B, T).items():
            cells, first = [], None
            for width in WIDTHS:
                _cpu.ROWS_TOGETHER = width
                _cache.clear()
                cells.append(least_ms(fn))
                got = [o.clone() for o in outs]
                first = first or got
                bad |= not all(torch.equal(a, b) for a, b in zip(first, got))
            rows.append((name, f"{B} × {T}", cells))
            print(f"{name} {B} x {T}: " + ", ".join(f"{w} rows {c:.2f} ms" for w, c in zip(WIDTHS, cells)), flush=True)
    print("\n| op | B × T | " + " | ".join(f"{w} rows a block" for w in WIDTHS) + " |")
    print("|---|---|" + "---|" * len(WIDTHS))
    for name, shape, cells in rows:
        print(f"| {name} | {shape} | " + " | ".join(f"{c:.2f} ms" for c in cells) + " |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
