"""The GPU correctness check: every op on a real GPU, across the input space, against the
float64 references, with any launch setting that fell back reported as a failure.

What it checks: every public op at shapes that reach each branch of the launch heuristic,
in ``[T, N]`` and ``[N, T]``; every layout (``[T, N]``, ``[N, T]``, ``[B, T, 1]``, strided
rows; one environment's column of a wider ``[T, N]`` buffer) and flag dtype (bool, uint8, float) at a few hundred environments (whole rows, chained
windows) and where blocks are chained; fp16, bf16 and fp64 at two shapes; the fused backward
kernels at every shape; calls under ``torch.use_deterministic_algorithms`` where it changes
the layout; and every op's arguments passed as numpy arrays or CPU tensors beside CUDA
tensors, which must be refused, naming the argument (rlscan never moves data between devices;
on the CPU they run, as the tensors do).
Forward results are compared with ``rlscan.reference`` (float64 loops; past 2M elements or
16384 steps, whose loops take seconds to tens of seconds, with the CPU path's compiled loop on
float64 inputs, itself tested against the references), gradients with the CPU path's float64
gradients of the same op, as ``max|out - ref| <= tol * max(1, max|ref|)``.
Every check makes its call twice, from empty plan and replay caches: the first call is
checked and makes its launch plan, the second is replayed, and must give the first's bits
(where a chained kernel ran, whose look-back may change the last bits between runs,
docs/semantics.md, the check's tolerance). Each check notes the settings table's classes its
plans matched; the summary names the active table's classes that no check reached.

The order (``--order classes``, the default): before checking, each check's launch plans are
made without launching anything (seconds for all of them), and the checks that reach a
settings class no earlier check reaches run first, so that a run cut short by its budget has
reached every class of the card's table the checks reach (all of them, with the shipped
tables); the rest follow by breadth, one check of each (mode, op) in turn. ``--budget-s``
(480 by default: one device call of 540 s with room to start and end) counts from the start
and stops starting new checks past it; those left are reported as not run, with the
``--start`` that continues them.

When to run it: before a release, and after any change to a kernel, the launch settings or
the Triton/torch pin, on a CUDA GPU (it was written for an H200), as a device call of its own
(``tools/gpu_record.py`` runs 40 of the checks)::

    python tools/gpu_check.py --budget-s 480     # on a CUDA machine: every class first, then breadth
    python tools/gpu_check.py --start 248        # continue a run that stopped at its budget
    python tools/gpu_check.py --ops vtrace,gae   # the checks of some ops only
    python tools/gpu_check.py --shapes 512x2048  # the checks at some N x T only
    TRITON_INTERPRET=1 python tools/gpu_check.py --small   # the same checks, tiny shapes, on the CPU

What it prints: a header (torch, Triton, GPU) and how the checks were ordered, then one line
per check (its number and the seconds since the start, ok/FAIL, op,
mode, shape, layout, dtype, flag dtype, error, whether the repeat call gave the same bits,
seconds, the launch setting that ran as ``tools/op_cases.setting_name`` writes it, and any
fallback warning), then a table of checks, failures and fallbacks per shape, the settings
classes reached, and a last line of totals. With ``$OUT`` set it
writes every row to ``$OUT/gpu_check.json``, after every check. It exits 1 if any check failed,
3 if every check that ran passed but some were not run (the budget), else 0.
retrace_from_q's chained and block kernels take minutes to compile, so that op runs at the
shapes of those kernels only with ``--all``. ``--budget-s`` stops starting new checks after
that many seconds (those left are reported as not run).
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
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
from rlscan import _cache  # noqa: E402
from rlscan._triton import launch as L  # noqa: E402
from rlscan._triton import settings as S  # noqa: E402

SHAPES = ((4096, 128), (16384, 16), (512, 2048), (4096, 2048), (16, 262144), (1, 1000000), (65536, 8), (1, 8),
          (8, 16), (256, 4096))
SMALL_SHAPES = ((3, 9), (1, 5), (2, 17))
SLOW_TO_COMPILE = {"retrace_from_q": ((4096, 2048), (16384, 16), (16, 262144), (65536, 8))}
#: GAE's calls that reach the shipped settings classes no other check reaches (with an H200's or
#: H100's 132 SMs): ``(layout, N, T, mode)``. The summary names any class still unreached.
CLASS_CHECKS = (("TN", 1, 1000000, "deterministic"),  # one long sequence, not float32's layout
                ("TN", 64, 4, "forward"),  # [T, N], under 8 steps, under 128 environments
                ("TN", 65536, 32, "forward"),  # [T, N], environments enough for 3 programs per SM
                ("TN", 1024, 512, "forward"),  # [T, N], 129-1023 steps
                ("TN columns", 1, 4096, "forward"))  # one environment, not contiguous in time
TOL = {torch.float64: 1e-9, torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}
#: what a check does: the op's outputs, its inputs' gradients, its outputs under
#: ``torch.use_deterministic_algorithms``, or its arguments passed from the host
MODES = ("forward", "backward", "deterministic", "inputs")


def plan_cases(small: bool, everything: bool) -> list:
    """``(op, layout, N, T, dtype, flag, mode)`` for every check: every op at every shape in
    ``[T, N]`` and ``[N, T]``; every layout and flag dtype at 512 x 2048 (whole rows;
    chained windows in ``[T, N]``) and where blocks are chained (4096 x 2048); each dtype
    there; the fused backward kernels at every shape (at one long sequence, GAE's and
    V-trace's only); where blocks are chained, the deterministic layout's forward scans both
    ways in time; GAE where it reaches the settings classes the others miss
    (``CLASS_CHECKS``); every op's arguments from the host, at one small shape."""
    shapes = SMALL_SHAPES if small else SHAPES
    wide = shapes[2:0:-1] if small else ((512, 2048), (4096, 2048))
    one_long = (1, 1000000)
    flag_ops = ("gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "retrace_from_q")
    out = []

    def add(op, layout, N, T, dtype="fp32", flag="bool", mode="forward"):
        if everything or (N, T) not in SLOW_TO_COMPILE.get(op, ()) or layout in ("NT", "BT1", "strided"):
            out.append((op, layout, N, T, dtype, flag, mode))

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
            add(op, "TN", N, T, mode="backward")
    for N, T in wide:
        for op in FUSED_BACKWARD:
            add(op, "NT", N, T, flag="uint8", mode="backward")
        add("gae", "BT1", N, T, flag="float", mode="backward")
        add("gae", "strided", N, T, "fp64", mode="backward")
    for op in ("gae", "eligibility_traces"):  # backward and forward in time
        add(op, "TN", *wide[1], mode="deterministic")
    if not small:
        for layout, N, T, mode in CLASS_CHECKS:
            add("gae", layout, N, T, mode=mode)
    for op in OPS:
        add(op, "TN", *shapes[-1], flag="float", mode="inputs")
    return out


def _canonical(x: torch.Tensor, layout: str) -> torch.Tensor:
    """An output as float64 ``[N, T]`` on the CPU."""
    x = x.detach().to("cpu", torch.float64)
    if layout in ("TN", "TN columns"):
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


#: past these the float64 reference loops take seconds (a long sequence's, tens), and the truth
#: is rlscan's CPU path in float64 instead: compiled loops, tested against the references
REFERENCE_MAX_ELEMENTS, REFERENCE_MAX_T = 2_000_000, 16384


def forward_truth(case, N: int, T: int) -> tuple:
    """``(the float64 outputs, which truth)``: ``rlscan.reference`` (float64 loops over time)
    up to :data:`REFERENCE_MAX_ELEMENTS` elements and :data:`REFERENCE_MAX_T` steps, else
    rlscan's CPU path on float64 CPU inputs (the loop one step at a time, compiled)."""
    args = tuple(map(_on_cpu64, case.args))
    kwargs = {k: _on_cpu64(v) for k, v in case.kwargs.items()}
    if N * T <= REFERENCE_MAX_ELEMENTS and T <= REFERENCE_MAX_T:
        return _tuple(case.reference(*args, **kwargs)), "reference"
    with rlscan.use_backend("cpu"):
        return _tuple(case.fn(*args, **kwargs)), "cpu path (float64)"


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


@contextlib.contextmanager
def deterministic(on: bool):
    """``torch.use_deterministic_algorithms(on)`` inside the block."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(previous)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)))


def _tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def settings_classes(plans, device) -> list:
    """The names of the settings table's classes that ``plans`` (``L.recording_plans``) matched:
    the table and SM count of ``device``, or the shipped table and an H200's SMs on the CPU,
    where the interpreter runs other settings but the call is the same."""
    if device == "cuda":
        dev = torch.device("cuda", torch.cuda.current_device())
        table, n_sm = L._table(dev), L._sm_count(dev)
    else:
        table, n_sm = S.shipped(), S.DEFAULT_N_SM
    deterministic_now = torch.are_deterministic_algorithms_enabled()
    names = []
    for plan in plans:
        q = plan.query
        query = S.Query(q["T"], q["B"], q["time_contiguous"], n_sm, q["reverse"], deterministic_now, q["series"],
                        q["words"])
        names.append(S.match(query, table).name)
    return sorted(set(names))


@contextlib.contextmanager
def planning_only():
    """Inside the block every launch plan is made but launches nothing: a call's settings
    classes without compiling or running its kernels (its outputs are left unwritten)."""
    real = L.LaunchPlan.__call__
    L.LaunchPlan.__call__ = lambda plan, ins, outs, scalars: None
    try:
        yield
    finally:
        L.LaunchPlan.__call__ = real


def reached(spec, device) -> list:
    """The settings classes a check's calls match (:func:`settings_classes`), found by making
    their launch plans only (:func:`planning_only`); none for the host-argument checks, or
    where planning fails (the check itself then says why)."""
    op, layout, N, T, dtype, flag, mode = spec
    if mode == "inputs":
        return []
    try:
        case = make_case(op, layout, N, T, DTYPES[dtype], flag, device=device, random=False)
        _cache.clear()
        with planning_only(), L.recording_plans() as plans, deterministic(mode == "deterministic"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode == "backward":
                backward(case, None)
            else:
                case()
            return settings_classes(plans, device)
    except Exception:  # noqa: BLE001 - ordering only; the check reports the failure
        return []
    finally:
        _cache.clear()


def class_first(specs, device) -> tuple:
    """``(specs reordered, the classes they reach, how many lead)``: first, in plan order, each check that reaches
    a settings class no earlier one reaches (so a run cut short by its budget has still
    reached every class the plan reaches); then the rest by breadth, one check of each
    (mode, op) in turn."""
    first, rest, covered = [], [], set()
    for spec in specs:
        new = set(reached(spec, device)) - covered
        (first if new else rest).append(spec)
        covered |= new
    groups: dict = {}
    for spec in rest:
        groups.setdefault((spec[6], spec[0]), []).append(spec)
    breadth = []
    while any(groups.values()):
        for queue in groups.values():
            if queue:
                breadth.append(queue.pop(0))
    return first + breadth, covered, len(first)


def check(spec, device) -> dict:
    op, layout, N, T, dtype, flag, mode = spec
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "inputs":
        return check_inputs(spec, device)
    case = make_case(op, layout, N, T, DTYPES[dtype], flag, device=device, seed=zlib.crc32(f"{op} {N} {T}".encode()) % 1000)
    row = dict(op=op, layout=layout, shape=f"{N}x{T}", dtype=dtype, flag=flag, direction=mode)
    _cache.clear()  # the first call makes its plan and is recorded, the second is replayed
    with warnings.catch_warnings(record=True) as caught, recording([]) as settings, \
            L.recording_plans() as plans, deterministic(mode == "deterministic"):
        warnings.simplefilter("always", L.CompileFallbackWarning)
        if mode == "backward":
            weights = None
            outs = _tuple(case())
            weights = [torch.linspace(0.5, 1.5, o.numel(), device=o.device, dtype=o.dtype).reshape(o.shape) for o in outs]
            _, got = backward(case, weights)
            _, again = backward(case, weights)
            cpu = case._replace(args=tuple(map(_on_cpu64, case.args)),
                                kwargs={k: _on_cpu64(v) for k, v in case.kwargs.items()})
            with rlscan.use_backend("cpu"):
                _, want = backward(cpu, [w.detach().cpu().to(torch.float64) for w in weights])
            pairs = [(g.detach().cpu(), w) for g, w in zip(got, want) if w is not None]
            repeats = [(a.detach().cpu(), b.detach().cpu()) for a, b in zip(got, again) if a is not None]
            tol = TOL[torch.float64 if DTYPES[dtype] == torch.float64 else torch.float32]
        else:
            outs, again = _tuple(case()), _tuple(case())
            refs, row["truth"] = forward_truth(case, N, T)
            pairs = [(_canonical(o, layout), _canonical(r, layout)) for o, r in zip(outs, refs)]
            repeats = [(a.detach().cpu(), b.detach().cpu()) for a, b in zip(outs, again)]
            tol = TOL[DTYPES[dtype]]
        classes = settings_classes(plans, device)
    if device == "cuda":
        torch.cuda.synchronize()
    err = max((_error(a.to(torch.float64), b) for a, b in pairs), default=0.0)
    chained = any(name.split()[0] in L.CHAINED for name in settings)
    if all(_same_bits(a, b) for a, b in repeats):
        repeat = "bits"
    elif chained and max(_error(a.to(torch.float64), b.to(torch.float64)) for a, b in repeats) <= tol:
        repeat = "within tol (chained)"
    else:
        repeat = "DIFFERS"
    row.update(setting=sorted(set(settings)), classes=classes, error=err, tol=tol, repeat=repeat,
               ok=err <= tol and repeat != "DIFFERS",
               fallbacks=[str(w.message)[:300] for w in caught if issubclass(w.category, L.CompileFallbackWarning)])
    row["ok"] = row["ok"] and not row["fallbacks"]
    return row


def _argument_names(case) -> list:
    """The names of the case's positional arguments (its function's parameters)."""
    params = list(inspect.signature(case.fn).parameters)
    return params[:len(case.args)]


def _from_host(x, kind: str):
    return x.detach().cpu().numpy() if kind == "numpy" else x.detach().cpu()


def check_inputs(spec, device) -> dict:
    """Each tensor argument of the case, and ``out=``, passed as a numpy array or a CPU tensor
    beside the others on ``device``, twice: refused with a ValueError that names it on a GPU;
    on the CPU (the interpreter), the same bits as the tensors' call."""
    op, layout, N, T, dtype, flag, mode = spec
    case = make_case(op, layout, N, T, DTYPES[dtype], flag, device=device, seed=zlib.crc32(f"{op} {N} {T}".encode()) % 1000)
    row = dict(op=op, layout=layout, shape=f"{N}x{T}", dtype=dtype, flag=flag, direction=mode, setting=[], classes=[],
               error=0.0, tol=0.0, repeat="bits", fallbacks=[])
    named = dict(zip(_argument_names(case), case.args), **case.kwargs)
    want = _tuple(case())
    problems = []
    for name, x in list(named.items()) + [("out", None)]:
        if name != "out" and not isinstance(x, torch.Tensor):
            continue
        for kind in ("numpy", "cpu"):
            for call in (1, 2):
                args = {**named, name: _from_host(x, kind)} if name != "out" else dict(named)
                if name == "out":
                    args["out"] = tuple(_from_host(torch.empty_like(w), kind) for w in want)
                    args["out"] = args["out"][0] if len(want) == 1 else args["out"]
                positional = [args.pop(n) for n in _argument_names(case)]
                try:
                    got = _tuple(case.fn(*positional, **args))
                except ValueError as exc:
                    if device != "cuda" or not str(exc).startswith(name) and f"but {name} is on" not in str(exc):
                        problems.append(f"{name} as {kind}, call {call}: {exc}")
                    continue
                except Exception as exc:  # noqa: BLE001 - a wrong exception is a failed check
                    problems.append(f"{name} as {kind}, call {call}: {type(exc).__name__}: {exc}")
                    continue
                if device == "cuda":
                    problems.append(f"{name} as {kind}, call {call}: not refused beside {device} tensors")
                elif not all(_same_bits(torch.as_tensor(g), w) for g, w in zip(got, want)):
                    problems.append(f"{name} as {kind}, call {call}: other bits than the tensors' call")
    row.update(ok=not problems)
    if problems:
        row["exception"] = "; ".join(problems)[:600]
    return row


def main(argv=None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="tiny shapes (for the CPU, under TRITON_INTERPRET=1)")
    parser.add_argument("--all", action="store_true", help="also the calls whose kernels take minutes to compile")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="seconds from the start (ordering included) after which no check starts (default 480)")
    parser.add_argument("--limit", type=int, default=0, help="run only the first N checks (after the ordering)")
    parser.add_argument("--start", type=int, default=0, help="skip the first N checks (a run continued)")
    parser.add_argument("--ops", help="comma-separated op names: only their checks (before --start and --limit)")
    parser.add_argument("--shapes", help="comma-separated N x T, as 512x2048: only the checks at those shapes")
    parser.add_argument("--order", choices=("classes", "plan"), default="classes",
                        help="classes (default): the checks that reach a settings class first, then one of each "
                             "(mode, op) in turn; plan: as plan_cases lists them")
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
    import triton

    header = dict(torch=torch.__version__, triton=triton.__version__,
                  gpu=torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)")
    print(header, flush=True)
    if opts.order == "classes":
        specs, planned, leading = class_first(specs, device)
        print(f"ordered {len(specs)} checks in {time.perf_counter() - started:.0f} s: the first {leading} reach the "
              f"{len(planned)} settings classes that their launch plans match", flush=True)
    first = opts.start
    specs = specs[opts.start:]
    if opts.limit:
        specs = specs[:opts.limit]
    table = L._table(torch.device("cuda", torch.cuda.current_device())) if device == "cuda" else S.shipped()
    rows, skipped = [], []

    def write():
        if os.environ.get("OUT"):
            reached_now = {name for r in rows for name in r["classes"]}
            os.makedirs(os.environ["OUT"], exist_ok=True)
            with open(os.path.join(os.environ["OUT"], "gpu_check.json"), "w") as f:
                json.dump(dict(header, rows=rows, not_run=[list(s) for s in skipped], first=first,
                               classes_not_reached=[c.name for c in table.classes if c.name not in reached_now]),
                          f, indent=1)

    for i, spec in enumerate(specs):
        if time.perf_counter() - started > opts.budget_s:
            skipped = list(specs[i:])
            break
        t0 = time.perf_counter()
        try:
            row = check(spec, device)
        except Exception as exc:  # noqa: BLE001 - a failure is a row of the table
            op, layout, N, T, dtype, flag, mode = spec
            row = dict(op=op, layout=layout, shape=f"{N}x{T}", dtype=dtype, flag=flag, direction=mode, setting=[],
                       classes=[], error=None, repeat="-", ok=False, fallbacks=[],
                       exception=f"{type(exc).__name__}: {str(exc)[:300]}")
        row["seconds"] = round(time.perf_counter() - t0, 3)
        rows.append(row)
        write()  # after every check: a run stopped from outside keeps its rows
        err = "-" if row["error"] is None else f"{row['error']:.1e}"
        print(f"[{first + i + 1}/{first + len(specs)} {time.perf_counter() - started:4.0f} s] "
              f"{'ok  ' if row['ok'] else 'FAIL'} {row['op']:<20} {row['direction']:<13} {row['shape']:>12} "
              f"{row['layout']:<7} {row['dtype']} {row['flag']:<5} err {err:>7} repeat {row['repeat']:<5} "
              f"{row['seconds']:6.2f} s "
              f"{'; '.join(row['setting'])}{' ' + row.get('exception', '') if 'exception' in row else ''}"
              f"{' FALLBACK ' + row['fallbacks'][0] if row['fallbacks'] else ''}", flush=True)
    write()
    failed = [r for r in rows if not r["ok"]]
    print(f"\n{'shape':>12} {'checks':>7} {'failed':>7} {'fallbacks':>10}")
    for shape in dict.fromkeys(r["shape"] for r in rows):
        these = [r for r in rows if r["shape"] == shape]
        print(f"{shape:>12} {len(these):>7} {sum(not r['ok'] for r in these):>7} "
              f"{sum(bool(r['fallbacks']) for r in these):>10}")
    reached_now = {name for r in rows for name in r["classes"]}
    unreached = [c.name for c in table.classes if c.name not in reached_now]
    print(f"\nsettings classes of {os.path.basename(table.path)} reached, each with a repeat call: "
          f"{len(table.classes) - len(unreached)} of {len(table.classes)}"
          + "".join(f"\n  not reached: {name}" for name in unreached))
    print(f"{len(rows)} checks, {len(failed)} failed, {sum(bool(r['fallbacks']) for r in rows)} with a fallback, "
          f"{len(skipped)} not run (budget), {time.perf_counter() - started:.0f} s"
          + (f"; continue with --start {first + len(rows)} (same options)" if skipped else ""))
    return 1 if failed else 3 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
