"""The GPU correctness check: every op on a real GPU, across the input space, against the
float64 references, with any launch setting that fell back reported as a failure.

What it checks: every public op at shapes that reach each branch of the launch heuristic,
in ``[T, N]`` and ``[N, T]``; every layout (``[T, N]``, ``[N, T]``, ``[B, T, 1]``, strided
rows) and flag dtype (bool, uint8, float) at a few hundred environments (whole rows, chained
windows) and where blocks are chained; fp16, bf16 and fp64 at two shapes; the fused backward
kernels at every shape.
Forward results are compared with ``rlscan.reference`` (float64 loops), gradients with the
CPU path's float64 gradients of the same op, as ``max|out - ref| <= tol * max(1, max|ref|)``.

When to run it: before a release, and after any change to a kernel, the launch settings or
the Triton/torch pin, on a CUDA GPU (it was written for an H200)::

    python tools/gpu_check.py                    # on a CUDA machine
    python tools/gpu_check.py --start 248        # continue a run that stopped at its budget
    python tools/gpu_check.py --ops vtrace,gae   # the checks of some ops only
    python tools/gpu_check.py --shapes 512x2048  # the checks at some N x T only
    TRITON_INTERPRET=1 python tools/gpu_check.py --small   # the same checks, tiny shapes, on the CPU

What it prints: a header (torch, Triton, GPU), then one line per check (ok/FAIL, op,
direction, shape, layout, dtype, flag dtype, error, seconds, the launch setting that ran as
``tools/op_cases.setting_name`` writes it, and any fallback warning), then a table of
checks, failures and fallbacks per shape and a last line of totals. With ``$OUT`` set it
writes every row to ``$OUT/gpu_check.json``. It exits 1 if any check failed or was not run.
retrace_from_q's chained and block kernels take minutes to compile, so that op runs at the
shapes of those kernels only with ``--all``. ``--budget-s`` stops starting new checks after
that many seconds (those left are reported as not run).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
import zlib

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlscan  # noqa: E402
from op_cases import DTYPES, FUSED_BACKWARD, LAYOUTS, OPS, backward, make_case, setting_name  # noqa: E402
from rlscan._triton import launch as L  # noqa: E402

SHAPES = ((4096, 128), (16384, 16), (512, 2048), (4096, 2048), (16, 262144), (1, 1000000), (65536, 8), (1, 8),
          (8, 16), (256, 4096))
SMALL_SHAPES = ((3, 9), (1, 5), (2, 17))
SLOW_TO_COMPILE = {"retrace_from_q": ((4096, 2048), (16384, 16), (16, 262144), (65536, 8))}
TOL = {torch.float64: 1e-9, torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}


def plan_cases(small: bool, everything: bool) -> list:
    """``(op, layout, N, T, dtype, flag, backward)`` for every check: every op at every shape in
    ``[T, N]`` and ``[N, T]``; every layout and flag dtype at 512 x 2048 (whole rows;
    chained windows in ``[T, N]``) and where blocks are chained (4096 x 2048); each dtype
    there; the fused backward kernels at every shape (at one long sequence, GAE's and
    V-trace's only)."""
    shapes = SMALL_SHAPES if small else SHAPES
    wide = shapes[2:0:-1] if small else ((512, 2048), (4096, 2048))
    one_long = (1, 1000000)
    flag_ops = ("gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "retrace_from_q")
    out = []

    def add(op, layout, N, T, dtype="fp32", flag="bool", grad=False):
        if everything or (N, T) not in SLOW_TO_COMPILE.get(op, ()) or layout in ("NT", "BT1", "strided"):
            out.append((op, layout, N, T, dtype, flag, grad))

    for N, T in shapes:
        for op in OPS:
            for layout in ("TN", "NT") if (N, T) != one_long else ("TN",):
                add(op, layout, N, T)
    for N, T in wide:
        for op in flag_ops:
            for layout, flag in (("NT", "uint8"), ("BT1", "bool"), ("BT1", "uint8"), ("strided", "float"),
                                 ("TN", "uint8"), ("TN", "float")):
                add(op, layout, N, T, flag=flag)
    for dtype in ("fp16", "bf16", "fp64"):
        for op in ("gae", "vtrace", "retrace", "linear_scan"):
            add(op, "NT", *wide[0], dtype, "uint8")
            add(op, "TN", *wide[1], dtype, "bool")
    for N, T in shapes:
        for op in FUSED_BACKWARD if (N, T) != one_long else ("gae", "vtrace"):
            add(op, "TN", N, T, grad=True)
    for N, T in wide:
        for op in FUSED_BACKWARD:
            add(op, "NT", N, T, flag="uint8", grad=True)
        add("gae", "BT1", N, T, flag="float", grad=True)
        add("gae", "strided", N, T, "fp64", grad=True)
    return out


def _canonical(x: torch.Tensor, layout: str) -> torch.Tensor:
    """An output as float64 ``[N, T]`` on the CPU."""
    x = x.detach().to("cpu", torch.float64)
    if layout == "TN":
        return x.transpose(0, 1)
    if layout == "BT1":
        return x.squeeze(2)
    return x


def _error(out, ref) -> float:
    ref = ref.to(torch.float64)
    scale = max(1.0, float(ref.abs().max()) if ref.numel() else 0.0)
    both_nan = torch.isnan(out) & torch.isnan(ref)
    diff = torch.where(both_nan, torch.zeros_like(ref), (out.to(torch.float64) - ref).abs())
    return float(torch.nan_to_num(diff, nan=float("inf")).max()) / scale


def _on_cpu64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.float64) if x.is_floating_point() else x.detach().cpu()
    return x


@contextlib.contextmanager
def recording(settings: list):
    """Append the setting each launch plan ran (``"CPU"`` where it fell back to the CPU path)."""
    real = L.LaunchPlan.__call__

    def call(plan, ins, outs, scalars):
        real(plan, ins, outs, scalars)
        settings.append("CPU" if plan.on_cpu else setting_name(plan.cfg))

    L.LaunchPlan.__call__ = call
    try:
        yield settings
    finally:
        L.LaunchPlan.__call__ = real


def check(spec, device) -> dict:
    op, layout, N, T, dtype, flag, grad = spec
    case = make_case(op, layout, N, T, DTYPES[dtype], flag, device=device, seed=zlib.crc32(f"{op} {N} {T}".encode()) % 1000)
    row = dict(op=op, layout=layout, shape=f"{N}x{T}", dtype=dtype, flag=flag, direction="backward" if grad else "forward")
    with warnings.catch_warnings(record=True) as caught, recording([]) as settings:
        warnings.simplefilter("always", L.CompileFallbackWarning)
        if grad:
            weights = None
            outs = case()
            outs = outs if isinstance(outs, tuple) else (outs,)
            weights = [torch.linspace(0.5, 1.5, o.numel(), device=o.device, dtype=o.dtype).reshape(o.shape) for o in outs]
            _, got = backward(case, weights)
            cpu = case._replace(args=tuple(map(_on_cpu64, case.args)),
                                kwargs={k: _on_cpu64(v) for k, v in case.kwargs.items()})
            with rlscan.use_backend("cpu"):
                _, want = backward(cpu, [w.detach().cpu().to(torch.float64) for w in weights])
            pairs = [(g.detach().cpu(), w) for g, w in zip(got, want) if w is not None]
            tol = TOL[torch.float64 if DTYPES[dtype] == torch.float64 else torch.float32]
        else:
            outs = case()
            outs = outs if isinstance(outs, tuple) else (outs,)
            refs = case.reference(*map(_on_cpu64, case.args), **{k: _on_cpu64(v) for k, v in case.kwargs.items()})
            refs = refs if isinstance(refs, tuple) else (refs,)
            pairs = [(_canonical(o, layout), _canonical(r, layout)) for o, r in zip(outs, refs)]
            tol = TOL[DTYPES[dtype]]
    if device == "cuda":
        torch.cuda.synchronize()
    err = max((_error(a.to(torch.float64), b) for a, b in pairs), default=0.0)
    row.update(setting=sorted(set(settings)), error=err, tol=tol, ok=err <= tol,
               fallbacks=[str(w.message)[:300] for w in caught if issubclass(w.category, L.CompileFallbackWarning)])
    row["ok"] = row["ok"] and not row["fallbacks"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny shapes (for the CPU, under TRITON_INTERPRET=1)")
    parser.add_argument("--all", action="store_true", help="also the calls whose kernels take minutes to compile")
    parser.add_argument("--budget-s", type=float, default=230.0)
    parser.add_argument("--limit", type=int, default=0, help="run only the first N checks")
    parser.add_argument("--start", type=int, default=0, help="skip the first N checks (a run continued)")
    parser.add_argument("--ops", help="comma-separated op names: only their checks (before --start and --limit)")
    parser.add_argument("--shapes", help="comma-separated N x T, as 512x2048: only the checks at those shapes")
    opts = parser.parse_args(argv)
    specs = plan_cases(opts.small, opts.all)
    if opts.ops:
        wanted = set(opts.ops.split(","))
        unknown = wanted - {spec[0] for spec in specs}
        if unknown:
            parser.error(f"--ops: no checks for {', '.join(sorted(unknown))}")
        specs = [spec for spec in specs if spec[0] in wanted]
    if opts.shapes:
        try:
            wanted = {tuple(int(n) for n in shape.split("x")) for shape in opts.shapes.split(",")}
        except ValueError:
            parser.error(f"--shapes: expected N x T as 512x2048, comma-separated, got {opts.shapes!r}")
        specs = [spec for spec in specs if (spec[2], spec[3]) in wanted]
        if not specs:
            parser.error(f"--shapes: no checks at {opts.shapes}")
    if torch.cuda.is_available():
        device = "cuda"
    else:
        if not os.environ.get("TRITON_INTERPRET"):
            parser.error("no GPU: run with TRITON_INTERPRET=1 (and --small)")
        device = "cpu"
        rlscan.set_backend("triton")
    specs = specs[opts.start:]
    if opts.limit:
        specs = specs[:opts.limit]
    import triton

    header = dict(torch=torch.__version__, triton=triton.__version__,
                  gpu=torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)")
    print(header, flush=True)
    rows, skipped, start = [], [], time.perf_counter()
    for spec in specs:
        if time.perf_counter() - start > opts.budget_s:
            skipped.append(spec)
            continue
        t0 = time.perf_counter()
        try:
            row = check(spec, device)
        except Exception as exc:  # noqa: BLE001 - a failure is a row of the table
            op, layout, N, T, dtype, flag, grad = spec
            row = dict(op=op, layout=layout, shape=f"{N}x{T}", dtype=dtype, flag=flag,
                       direction="backward" if grad else "forward", setting=[], error=None, ok=False,
                       fallbacks=[], exception=f"{type(exc).__name__}: {str(exc)[:300]}")
        row["seconds"] = round(time.perf_counter() - t0, 3)
        rows.append(row)
        err = "-" if row["error"] is None else f"{row['error']:.1e}"
        print(f"{'ok  ' if row['ok'] else 'FAIL'} {row['op']:<20} {row['direction']:<8} {row['shape']:>12} "
              f"{row['layout']:<7} {row['dtype']} {row['flag']:<5} err {err:>7} {row['seconds']:6.2f} s "
              f"{'; '.join(row['setting'])}{' ' + row.get('exception', '') if 'exception' in row else ''}"
              f"{' FALLBACK ' + row['fallbacks'][0] if row['fallbacks'] else ''}", flush=True)
    failed = [r for r in rows if not r["ok"]]
    print(f"\n{'shape':>12} {'checks':>7} {'failed':>7} {'fallbacks':>10}")
    for shape in dict.fromkeys(r["shape"] for r in rows):
        these = [r for r in rows if r["shape"] == shape]
        print(f"{shape:>12} {len(these):>7} {sum(not r['ok'] for r in these):>7} "
              f"{sum(bool(r['fallbacks']) for r in these):>10}")
    print(f"{len(rows)} checks, {len(failed)} failed, {sum(bool(r['fallbacks']) for r in rows)} with a fallback, "
          f"{len(skipped)} not run (budget), {time.perf_counter() - start:.0f} s")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_check.json"), "w") as f:
            json.dump(dict(header, rows=rows, not_run=[list(s) for s in skipped]), f, indent=1)
    return 1 if failed or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
