"""LeanRL's pattern on a GPU: GAE compiled with ``fullgraph=True`` and wrapped in tensordict's
``CudaGraphModule``, rlscan's one line against LeanRL's own loop, at LeanRL's shapes.

What it measures, per shape (``N`` environments × ``T`` steps, ``[T, N]`` float32, dones at 1%
of steps, LeanRL's semantics: ``dones[t]`` is set when ``obs[t]`` started an episode):

1. each function compiled and wrapped in ``CudaGraphModule(warmup=3)`` (the compile time
   includes the warm-up and the capture), its result checked against LeanRL's loop run in
   float64;
2. the wrapped call's wall clock (what LeanRL's training loop pays: the module's input
   copies, the replay and the outputs), the functions' rounds interleaved, best of ``--repeat``;
3. the device time of the compiled function alone, captured in a plain CUDA graph (the
   GPU's share of the wrapped call), and the CUDA kernels one compiled call launches
   (``torch.profiler``): where a wrapped call's time goes.

``twin`` is a torch function with the same inputs and outputs and two elementwise ops: what
the wrapper costs with next to nothing inside. The functions are ``rlscan.bench.host``'s, so
the numbers match ``rlscan bench --host``'s LeanRL line at 4096 × 128.

When to run it: on a CUDA GPU with tensordict installed, after changing the GAE call path or
the CleanRL adapter::

    python tools/leanrl_timing.py                       # 4096x128, 64x256, 1x512
    python tools/leanrl_timing.py --shapes 64x256 --impls rlscan,twin   # skip the loop's 30 s compiles
    python tools/leanrl_timing.py --budget-s 100        # what fits in 100 s (tools/gpu_record.py)

It prints one block per shape and a table last, and writes ``$OUT/leanrl.json``
(``./bench-out/`` without ``$OUT``) after every shape. ``--budget-s``: no function is compiled
once that many seconds have passed, nor the loop (whose compile alone takes 26-39 s when
Triton's and Inductor's caches are cold) with less than ``LOOP_COMPILE_S`` left; the shapes and
functions left out are listed in the JSON. Exit status 1 when a result is wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from rlscan.bench import host, timing

SHAPES = ((4096, 128), (64, 256), (1, 512))  # (N, T): LeanRL's PPO on Atari/MuJoCo-sized rollouts
IMPLS = {"rlscan": host._leanrl_rlscan, "loop": host._leanrl_loop, "twin": None}
#: seconds the loop's compile and capture may take with cold caches (26-39 s measured on an H100)
LOOP_COMPILE_S = 45.0
#: seconds any other function's compile, capture and timing may take
OTHER_S = 12.0


def _shape(text: str) -> tuple:
    n, t = text.lower().split("x")
    return int(n), int(t)


def _kernels(fn) -> tuple:
    """``(kernel launches, their summed device µs)`` of one call of ``fn``, by ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len(kernels), sum(e.device_time for e in kernels), sorted({e.name[:60] for e in kernels})[:8]


def run_shape(N: int, T: int, impls: list, repeat: int, deadline: float = float("inf")) -> dict:
    from tensordict.nn import CudaGraphModule

    dev = torch.device("cuda")
    sync = timing.synchronizer(dev)
    r, v, dones, next_value = host._inputs(N, T, dev)
    next_done = torch.rand(N, device=dev) < 0.01
    args = (r, v, dones, next_value, next_done)
    truth = host._leanrl_loop(*(x.double() if x.is_floating_point() else x for x in args))
    out, wrapped = {"shape": [N, T]}, {}
    for name in impls:
        fn, fn_args = (IMPLS[name], args) if IMPLS[name] else (host._torch_twin, (r, v, dones, next_value))
        row = out[name] = {}
        need = LOOP_COMPILE_S if name == "loop" else OTHER_S
        if deadline - time.monotonic() < need:
            row["status"] = f"not run: under {need:.0f} s of the budget left"
            print(f"  {name}: {row['status']}", flush=True)
            continue
        start = time.perf_counter()
        try:
            compiled = torch.compile(fn, fullgraph=True)
            graphed = CudaGraphModule(compiled, warmup=3)
            for _ in range(5):
                got = tuple(x.clone() for x in graphed(*fn_args))
            sync()
        except Exception as ex:  # noqa: BLE001 - a function that fails is reported, the run goes on
            row["status"] = f"failed: {type(ex).__name__}: {str(ex)[:200]}"
            print(f"  {name}: {row['status']}", flush=True)
            continue
        row.update(status="ok", compile_s=time.perf_counter() - start)
        if IMPLS[name]:
            err = max(float((a.double() - b).norm() / b.norm().clamp_min(1e-30)) for a, b in zip(got, truth))
            row.update(rel_err=err, status="ok" if err < 1e-4 else "WRONG")
        wrapped[name] = lambda g=graphed, a=fn_args: g(*a)
        call = lambda c=compiled, a=fn_args: c(*a)  # noqa: E731
        _, once = timing.timed_once(call, sync)
        row["graph_device_us"] = 1e6 * timing.device_time(call, one_call_s=once, target_s=0.005, repeat=5,
                                                             max_calls=20).seconds
        row["kernels"], row["kernels_us"], row["kernel_names"] = _kernels(call)
    for name, seconds in host._time_together(wrapped, sync, repeat).items():
        out[name]["wrapped_us"] = seconds * 1e6
    for name in impls:
        row = out[name]
        if "wrapped_us" in row:
            print(f"  {name:6s} CudaGraphModule {row['wrapped_us']:7.1f} µs/call, its graph on the device "
                  f"{row['graph_device_us']:7.1f} µs, {row['kernels']} kernels ({row['kernels_us']:.1f} µs), "
                  f"compile {row['compile_s']:.1f} s" + (f", rel err {row['rel_err']:.1e}" if "rel_err" in row else ""),
                  flush=True)
    if all(out.get(k, {}).get("status") == "ok" for k in ("rlscan", "loop")):
        out["rlscan_over_loop"] = out["rlscan"]["wrapped_us"] / out["loop"]["wrapped_us"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", type=lambda s: tuple(_shape(x) for x in s.split(",")), default=SHAPES,
                    help="comma-separated NxT (default 4096x128,64x256,1x512)")
    ap.add_argument("--impls", default="rlscan,loop,twin", help="comma-separated among rlscan, loop, twin")
    ap.add_argument("--repeat", type=int, default=9, help="rounds of the wrapped calls; the best counts")
    ap.add_argument("--budget-s", type=float, default=float("inf"),
                    help="seconds from the start; functions whose compile would not fit are left out")
    args = ap.parse_args(argv)
    started = time.monotonic()
    deadline = started + args.budget_s
    if not torch.cuda.is_available():
        print("tools/leanrl_timing.py needs a CUDA GPU: it times CUDA graphs", file=sys.stderr)
        return 2
    try:
        import tensordict  # noqa: F401
    except ImportError:
        print("tools/leanrl_timing.py needs tensordict (pip install tensordict): LeanRL's CudaGraphModule",
              file=sys.stderr)
        return 2
    impls = [i for i in args.impls.split(",") if i]
    unknown = set(impls) - set(IMPLS)
    if unknown:
        ap.error(f"--impls: unknown {sorted(unknown)}; choose among {sorted(IMPLS)}")
    rows, not_run = [], []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    out = os.environ.get("OUT", "bench-out")
    os.makedirs(out, exist_ok=True)
    for N, T in args.shapes:
        if deadline - time.monotonic() < OTHER_S:
            not_run.append([N, T])
            print(f"# {N} x {T}: not run (budget)", flush=True)
            continue
        print(f"# {N} x {T} ({time.monotonic() - started:.0f} s in)", flush=True)
        rows.append(run_shape(N, T, impls, args.repeat, deadline))
        with open(os.path.join(out, "leanrl.json"), "w") as f:  # after every shape: a run stopped keeps them
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows,
                           not_run=not_run), f, indent=1)
    with open(os.path.join(out, "leanrl.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows, not_run=not_run), f,
                  indent=1)
    print("\n| N × T | " + " | ".join(f"{i} wrapped µs (graph µs, kernels)" for i in impls) + " | rlscan / loop |")
    print("|---" * (len(impls) + 2) + "|")
    for row in rows:
        cells = []
        for i in impls:
            x = row.get(i, {})
            cells.append(f"{x['wrapped_us']:.1f} ({x['graph_device_us']:.1f}, {x['kernels']})" if "wrapped_us" in x
                         else x.get("status", "—"))
        ratio = f"{row['rlscan_over_loop']:.2f}" if "rlscan_over_loop" in row else "—"
        print(f"| {row['shape'][0]} × {row['shape'][1]} | " + " | ".join(cells) + f" | {ratio} |")
    return 1 if any(row.get(i, {}).get("status") == "WRONG" for row in rows for i in impls) else 0


if __name__ == "__main__":
    sys.exit(main())
