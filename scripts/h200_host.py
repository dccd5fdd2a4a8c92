"""Where the host time of one call goes, on a CUDA machine: the launch floor, tensor
allocation, rlscan's Python checks, the launch plan, and the whole call, each timed as
back-to-back calls with one synchronize (median of 5 rounds); then a cProfile of the
whole call. Prints a table last.

    python scripts/h200_host.py [N T]
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time

import torch
import triton

import rlscan
from rlscan._triton import launch as L

from h200_checks import wall_time  # noqa: E402 - this folder is on sys.path


@triton.jit
def _empty(X):
    pass


def main():
    N, T = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (4096, 128)
    dev = torch.device("cuda")
    r, v = torch.randn(T, N, device=dev), torch.randn(T, N, device=dev)
    boot, term = torch.randn(N, device=dev), torch.rand(T, N, device=dev) < 0.01
    x = torch.empty(1, device=dev)
    from triton import knobs

    print("launch hooks:", knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    rows = {}
    rows["empty kernel, JITFunction.run"] = wall_time(lambda: _empty[(1,)](x))
    rows["torch.empty_like (CUDA)"] = wall_time(lambda: torch.empty_like(r))

    def gae():
        return rlscan.gae(r, v, bootstrap_value=boot, terminated=term, gamma=0.99, lmbda=0.95)

    rows["rlscan.gae, whole call"] = wall_time(gae)
    plan = next(p for p in L._PLANS.values())
    outs = gae()
    ins = (r, v, None, boot, term, None, None, None)
    scalars = (0.99, 0.95, 0.99 * 0.95)
    rows["launch plan alone"] = wall_time(lambda: plan(ins, tuple(outs), scalars))
    real = L.LaunchPlan.__call__
    L.LaunchPlan.__call__ = lambda self, ins, outs, scalars: None
    try:
        rows["rlscan.gae without the launch"] = wall_time(gae)
    finally:
        L.LaunchPlan.__call__ = real
    rv = r.clone().requires_grad_(), v.clone().requires_grad_()
    rows["rlscan.gae, inputs requiring grad"] = wall_time(
        lambda: rlscan.gae(*rv, bootstrap_value=boot, terminated=term), n=500)
    out = rlscan.gae(*rv, bootstrap_value=boot, terminated=term)
    grads = [torch.randn_like(o) for o in out]
    rows["its backward (autograd.grad)"] = wall_time(
        lambda: torch.autograd.grad(out, rv, grads, retain_graph=True), n=500)
    saved = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    knobs.runtime.launch_enter_hook = knobs.runtime.launch_exit_hook = None
    try:
        rows["empty kernel, no launch hooks"] = wall_time(lambda: _empty[(1,)](x))
        rows["rlscan.gae, no launch hooks"] = wall_time(gae)
    finally:
        knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook = saved
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3000):
        gae()
    torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue())
    print(f"\n{torch.cuda.get_device_name()}, N={N} T={T}, {time.strftime('%Y-%m-%d')}")
    for k, us in rows.items():
        print(f"  {k:40s} {us:8.2f} us")


if __name__ == "__main__":
    main()
