"""The ``rlscan`` command line.

    rlscan bench [--ops gae,vtrace] [--shapes 4096x128,16x262144] [--layout tn|nt]
                 [--dtype float32] [--quick] [--e2e] [--host] [--out DIR] [--repeat K]
    rlscan plan OP --shape NxT [--layout tn|nt] [--dtype float32] [--device-sm N]
    rlscan tune [--ops gae,vtrace] [--budget-s S] [--out PATH]

See ``rlscan bench --help`` and the method in :mod:`rlscan.bench`; ``plan`` and ``tune``
read and write the launch settings table (docs/tuning.md).
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Optional, Sequence

DTYPES = {"float32": "float32", "fp32": "float32", "f32": "float32", "float16": "float16", "fp16": "float16",
          "f16": "float16", "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16", "float64": "float64",
          "fp64": "float64", "f64": "float64", "double": "float64"}


def _ops(text: str) -> tuple:
    from .bench.cases import CASES

    if text.strip().lower() == "none":
        return ()
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [n for n in names if n not in CASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown op(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(CASES)} (or 'none')")
    return names


def _shape(text: str) -> tuple:
    parts = text.lower().replace("×", "x").split("x")
    try:
        n, t = (int(float(p)) if float(p).is_integer() else None for p in parts)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"a shape is NxT with N environments and T steps, got {text!r}") from None
    if n is None or t is None or n < 1 or t < 1:
        raise argparse.ArgumentTypeError(f"a shape needs positive whole N and T, got {text!r}")
    return n, t


def _shapes(text: str) -> tuple:
    shapes = tuple(_shape(s.strip()) for s in text.split(",") if s.strip())
    if not shapes:
        raise argparse.ArgumentTypeError("--shapes needs at least one NxT")
    return shapes


def _dtype(text: str) -> str:
    try:
        return DTYPES[text.strip().lower()]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"dtype must be one of float32, float16, bfloat16, float64, got {text!r}") from None


def _alternatives(text: str) -> tuple:
    from .bench.alternatives import ALTERNATIVES

    keys = tuple(s.strip() for s in text.split(",") if s.strip())
    known = [a.key for a in ALTERNATIVES]
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown alternative(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return keys


def _positive(kind):
    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if not x > 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return x

    return parse


def _add_ops(sub: argparse.ArgumentParser, cases, what: str = "", more: str = "") -> None:
    """``--ops`` as ``bench`` and ``tune`` take it: comma-separated names of ``cases`` (parsed
    by ``_ops``), all of them by default; ``what`` and ``more`` complete its help."""
    sub.add_argument("--ops", type=_ops, default=tuple(cases),
                     help=f"comma-separated ops{what} (default: all of {','.join(cases)}){more}")


def parser() -> argparse.ArgumentParser:
    from .bench.cases import CASES

    top = argparse.ArgumentParser(prog="rlscan", description="rlscan: RL credit assignment as fused scans.")
    top.add_argument("--version", action="store_true", help="print the version and exit")
    sub = top.add_subparsers(dest="command")
    b = sub.add_parser(
        "bench", help="time every op against the alternatives users would pick",
        description="Time every op against the alternatives a user would otherwise pick (Python loops, "
                    "torch.compile of a doubling scan, TorchRL, SB3, the exact sequential kernel), after checking "
                    "each result against a float64 truth. Prints a table as it goes; writes bench.json and "
                    "bench.png to --out.")
    _add_ops(b, CASES, more="; 'none' runs only --e2e")
    b.add_argument("--shapes", type=_shapes, default=None,
                   help="comma-separated NxT shapes, N environments x T steps (e.g. 4096x128,16x262144); "
                        "default: the full grid, or the quick set with --quick")
    b.add_argument("--layout", choices=("tn", "nt"), default="tn",
                   help="memory layout: tn = [T, N] time-major (default), nt = [N, T] contiguous along time")
    b.add_argument("--dtype", type=_dtype, default="float32", help="float32 (default), float16, bfloat16, float64")
    b.add_argument("--quick", action="store_true",
                   help="a handful of shapes and shorter timing, without torch.compile (what CI runs)")
    b.add_argument("--e2e", action="store_true",
                   help="also time credit assignment's share of a PPO update (synthetic PPO; SB3 PPO if installed)")
    b.add_argument("--out", default="bench-out", help="directory for bench.json and bench.png (default ./bench-out)")
    b.add_argument("--repeat", type=_positive(int), default=None,
                   help="timing rounds per measurement; the median counts (default 5, 3 with --quick)")
    b.add_argument("--cap", type=_positive(float), default=None, dest="cap_s",
                   help="seconds one call of a sequential alternative may take before it is skipped with its "
                        "estimate (default 2, 1 with --quick on a GPU, 0.3 on a CPU)")
    b.add_argument("--compile-budget", type=_positive(float), default=None, dest="compile_budget_s",
                   help="seconds of torch.compile time per op, after which compile cells are skipped "
                        "(default 30; --quick leaves torch.compile out)")
    b.add_argument("--alternatives", type=_alternatives, default=None,
                   help="comma-separated subset of the alternatives to time (rlscan is always timed)")
    b.add_argument("--all-cells", action="store_true",
                   help="run the loops and torch.compile at every cell of the default grid, not only its subset")
    b.add_argument("--host", action="store_true",
                   help="also time the host's share of a call: eager vs torch.compile (and reduce-overhead, "
                        "CudaGraphModule on CUDA), autograd vs torch.cumsum, and the CPU path (per-call cost, SB3's "
                        "buffer, every op at --host-large against the numpy loop and the copy floor); the compiled "
                        "and autograd parts run at the first --shapes (default 4096x128)")
    b.add_argument("--host-large", type=_shape, default=(4096, 2048), dest="host_large",
                   help="the shape of --host's CPU grid, NxT (default 4096x2048)")
    b.add_argument("--compile-jobs", type=int, default=None, dest="compile_jobs",
                   help="on a GPU, processes that compile the grid's Triton kernels before it runs (default: half "
                        "the CPUs, at most 8; 1: each compiles at its first call)")
    b.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    b.add_argument("--budget-s", type=_positive(float), default=None, dest="budget_s",
                   help="seconds for the whole run: no section of --host and no cell starts after them; those left "
                        "out are listed in bench.json (not_run)")
    b.add_argument("--merge", nargs="+", metavar="BENCH_JSON", default=None,
                   help="run nothing: merge the bench.json files of several runs of one grid on one machine (e.g. "
                        "its ops run in separate calls) into --out's bench.json, with the summary and bench.png")
    p = sub.add_parser(
        "plan", help="print the launch settings a call would take, and why",
        description="Print the shape class of the launch settings table a call matches, its settings in the order "
                    "a launch plan tries them, each one's reason and measured ratio, and which table file was read. "
                    "Works without a GPU (an H200's 132 SMs are assumed unless a GPU is present or --device-sm).")
    p.add_argument("op", choices=tuple(CASES), help="the op")
    p.add_argument("--shape", type=_shape, required=True, help="NxT: N environments x T steps (e.g. 4096x2048)")
    p.add_argument("--layout", choices=("tn", "nt"), default="tn",
                   help="tn = [T, N] time-major (default), nt = [N, T] contiguous along time")
    p.add_argument("--dtype", type=_dtype, default="float32", help="float32 (default), float16, bfloat16, float64")
    p.add_argument("--device-sm", type=_positive(int), default=None, dest="device_sm",
                   help="SMs of the GPU to plan for (default: this GPU's, else 132)")
    p.add_argument("--deterministic", action="store_true",
                   help="as under torch.use_deterministic_algorithms(True)")
    p.add_argument("--gpu", default=None, metavar="NAME",
                   help='plan as on the GPU of this name, e.g. "NVIDIA H100 80GB HBM3": the table rlscan would read '
                        "there (default: this GPU's, else the H200's)")
    t = sub.add_parser(
        "tune", help="re-measure the launch settings table on this GPU and write it",
        description="For each shape class of the launch settings table, at its representative shape, time the "
                    "class's settings and the alternatives of the same kernel family by CUDA-graph device time "
                    "(each result checked against the float64 truth first), reorder them by measured time, then "
                    "re-measure the candidates of the table's policy choices (without --classes), and write the "
                    "table. rlscan reads it on this GPU from then on (docs/tuning.md).")
    _add_ops(t, CASES, what=" to time")
    t.add_argument("--budget-s", type=_positive(float), default=1800.0, dest="budget_s",
                   help="seconds to spend (default 1800); classes not reached keep their shipped order")
    t.add_argument("--out", default=None,
                   help="where to write the table (default ~/.cache/rlscan/settings/<GPU name>.json)")
    t.add_argument("--jobs", type=_positive(int), default=None,
                   help="processes that compile the candidates first, in parallel (default: half the CPUs, "
                        "at most 8); 1 compiles each as it is timed")
    t.add_argument("--classes", default=None,
                   help="comma-separated class numbers to tune (as `rlscan plan` prints them; default all)")
    return top


def _plan(args) -> int:
    import torch

    from .bench.explain import report

    n, t = args.shape
    print(report(args.op, n, t, args.layout, getattr(torch, args.dtype), n_sm=args.device_sm,
                 deterministic=args.deterministic, gpu=args.gpu))
    return 0


def _tune(args) -> int:
    import torch

    from ._triton import settings
    from .bench.tune import device_clock, tune, write
    from .bench.tune_policy import tune_policy
    from .bench.warm import default_jobs

    if not torch.cuda.is_available():
        print("rlscan tune needs a CUDA GPU: it times the launch settings on the GPU they are for", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    n_sm = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    table = settings.active_table(name, n_sm)
    try:
        classes = None if args.classes is None else [int(x) for x in args.classes.split(",") if x.strip()]
    except ValueError:
        print(f"rlscan tune: --classes takes class numbers, got {args.classes!r}", file=sys.stderr)
        return 2
    if classes is not None and not all(0 <= i < len(table.classes) for i in classes):
        print(f"rlscan tune: --classes must be among 0..{len(table.classes) - 1}", file=sys.stderr)
        return 2
    print(f"rlscan tune: {name} ({n_sm} SMs), starting from {table.path}, budget {args.budget_s:.0f} s", flush=True)
    start = time.monotonic()
    progress = lambda line: print(line, flush=True)  # noqa: E731
    raw = tune(table, ops=args.ops, device=torch.device("cuda"), gpu=name, n_sm=n_sm, budget_s=args.budget_s,
               classes=classes, progress=progress, jobs=args.jobs or default_jobs())
    if classes is None:  # the policy's choices too, in the budget left
        raw = tune_policy(table, raw, device=torch.device("cuda"), gpu=name, clock=device_clock, progress=progress,
                          budget_s=max(0.0, args.budget_s - (time.monotonic() - start)))
    path = write(raw, args.out or settings.cache_path(name))
    print(f"wrote {path}; `rlscan plan OP --shape NxT` shows what it chooses")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.version:
        from . import __version__

        print(f"rlscan {__version__}")
        return 0
    if args.command == "plan":
        return _plan(args)
    if args.command == "tune":
        return _tune(args)
    if args.command != "bench":
        parser().print_help()
        return 2
    if args.merge:
        from .bench.runner import merge

        try:
            return merge(args.merge, args.out)
        except (OSError, ValueError, KeyError) as exc:
            print(f"rlscan bench --merge: {exc}", file=sys.stderr)
            return 2
    import torch

    from .bench.runner import Options, run

    if not args.ops and not args.e2e and not args.host:
        print("rlscan bench: --ops none leaves nothing to run without --e2e or --host", file=sys.stderr)
        return 2
    opts = Options(ops=args.ops, shapes=args.shapes, layout=args.layout, dtype=getattr(torch, args.dtype),
                   quick=args.quick, e2e=args.e2e, out=args.out, repeat=args.repeat, cap_s=args.cap_s,
                   compile_budget_s=args.compile_budget_s, alternatives=args.alternatives, all_cells=args.all_cells,
                   seed=args.seed, host=args.host, host_large=args.host_large, compile_jobs=args.compile_jobs,
                   budget_s=args.budget_s)
    return run(opts)


if __name__ == "__main__":
    sys.exit(main())
