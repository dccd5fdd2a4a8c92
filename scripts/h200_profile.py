"""Run each named op a few times at one shape, for a profiler to watch (CI has no GPU).

    ncu --clock-control none --kernel-name regex:'chained|scan|block' -c 8 \
        --section SpeedOfLight --section WarpStateStats ... \
        python scripts/h200_profile.py gae discounted_returns --shape 4096x2048 --layout tn

Every op's result is checked against its float64 truth before the profiled calls, so a
profile is never of a wrong kernel.
"""
from __future__ import annotations

import argparse

import torch

import rlscan
from rlscan.bench import cases, check


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ops", nargs="+", choices=sorted(cases.CASES))
    ap.add_argument("--shape", default="4096x2048", help="N x T")
    ap.add_argument("--layout", default="tn", choices=("tn", "nt"))
    ap.add_argument("--calls", type=int, default=2)
    args = ap.parse_args()
    N, T = map(int, args.shape.split("x"))
    dev = torch.device("cuda")
    for op in args.ops:
        case = cases.CASES[op]
        inputs = cases.make_inputs(case, T, N, torch.float32, args.layout, dev)
        want, _ = check.truth(case, inputs, T, N)
        err = check.relative_error(cases.outputs_of(case.call(rlscan, inputs)), want)
        print(f"{op} {args.layout} {N}x{T}: relative error {err:.1e}", flush=True)
        for _ in range(args.calls):
            case.call(rlscan, inputs)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
