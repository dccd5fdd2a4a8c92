"""``rlscan bench``: the grid of ops × shapes × implementations, run and reported."""
from __future__ import annotations

import datetime
import json
import os
import platform
import time
from typing import NamedTuple, Optional

import torch

from . import alternatives as alts
from . import check, e2e, floors, report
from .cases import CASES, input_bytes, make_inputs, moved_bytes
from .measure import CompileLedger, Settings, measure

GPU_ENVS = (1, 8, 64, 512, 4096, 16384, 65536)
GPU_STEPS = (1, 8, 16, 128, 512, 2048, 8192, 65536, 262144)
GPU_EXTRA = ((1, 1_000_000),)
GPU_QUICK = ((4096, 128), (4096, 2048), (16, 262144), (16384, 16), (1, 1_000_000))
CPU_ENVS = (1, 8, 64, 512, 4096)
CPU_STEPS = (1, 16, 128, 2048, 16384)
CPU_EXTRA = ((1, 262144),)
CPU_QUICK = ((256, 128), (16, 2048), (1, 16384), (4096, 16))

MAX_INPUT_BYTES = {"cuda": 4e9, "cpu": 1e9}

# The default grid runs the expensive alternatives on a subset (--all-cells runs all of it):
LOOP_KEYS = ("loop_torch", "loop_numpy", "torchrl_loop", "sb3")
LOOP_ENVS = (1, 64, 4096, 16384)  # Python loops: their cost hardly depends on N on a GPU
# torch.compile compiles once per power-of-two bucket of T (and again for N = 1, which it specialises):
COMPILE_STEPS = (128, 2048, 65536, 1_000_000)


class Options(NamedTuple):
    ops: tuple
    shapes: Optional[tuple]  # ((N, T), ...) or None for the default grid
    layout: str = "tn"
    dtype: torch.dtype = torch.float32
    quick: bool = False
    e2e: bool = False
    out: str = "bench-out"
    repeat: Optional[int] = None
    cap_s: Optional[float] = None
    compile_budget_s: Optional[float] = None
    alternatives: Optional[tuple] = None
    all_cells: bool = False
    seed: int = 0
    host: bool = False
    host_large: tuple = (4096, 2048)  # (N, T) of the host section's CPU grid
    compile_jobs: Optional[int] = None  # processes that compile a GPU grid's Triton kernels first (None: default)
    budget_s: Optional[float] = None  # seconds for the run: no host section or cell starts after them


def settings_for(opts: Options, device: torch.device) -> Settings:
    cuda = device.type == "cuda"
    if opts.quick:
        base = dict(repeat=3, cap_s=1.0 if cuda else 0.3, long_call_s=0.3 if cuda else 0.2, target_s=0.01,
                    measure_budget_s=0.5 if cuda else 0.3, compile_budget_s=30.0)
    else:
        base = dict(repeat=5, cap_s=2.0, long_call_s=0.25, target_s=0.01, measure_budget_s=0.5,
                    compile_budget_s=30.0)
    if opts.repeat is not None:
        base["repeat"] = opts.repeat
    if opts.cap_s is not None:
        base["cap_s"] = opts.cap_s
    if opts.compile_budget_s is not None:
        base["compile_budget_s"] = opts.compile_budget_s
    return Settings(device=device, dtype=opts.dtype, tolerance=check.TOLERANCE[opts.dtype], graph_max_T=2048, **base)


def shapes_for(opts: Options, cuda: bool) -> tuple:
    if opts.shapes is not None:
        return opts.shapes
    if opts.quick:
        return GPU_QUICK if cuda else CPU_QUICK
    envs, steps, extra = (GPU_ENVS, GPU_STEPS, GPU_EXTRA) if cuda else (CPU_ENVS, CPU_STEPS, CPU_EXTRA)
    return tuple((n, t) for n in envs for t in steps) + extra


def subset_note(opts: Options, impl, N: int, T: int) -> Optional[str]:
    """Why the default grid (or ``--quick``) leaves ``impl`` out of this cell, or None."""
    if opts.quick and impl.compiles:
        return ("--quick leaves torch.compile out: its first call compiles for seconds per op and shape, most of "
                "a quick run; the default grid times it")
    if opts.shapes is not None or opts.quick or opts.all_cells:
        return None
    if impl.key in LOOP_KEYS and N not in LOOP_ENVS:
        return f"not in the default grid's loop subset (N in {LOOP_ENVS}); --all-cells runs it"
    if impl.compiles and (T not in COMPILE_STEPS or (N == 1 and T != max(COMPILE_STEPS))):
        return (f"not in the default grid's compile subset (T in {COMPILE_STEPS}, N > 1 except at the longest T); "
                "--all-cells runs it")
    return None


# ----------------------------------------------------------------------------- the run


def run(opts: Options) -> int:
    """Run the benchmark; the exit status is 1 when any rlscan result fails its check."""
    started = time.perf_counter()
    deadline = started + (opts.budget_s if opts.budget_s is not None else float("inf"))
    cuda, device = _device()
    settings = settings_for(opts, device)
    shapes = shapes_for(opts, cuda)
    os.makedirs(opts.out, exist_ok=True)
    p = report.Printer()
    doc = _preamble(opts, device, settings, shapes)
    impls_by_op = {op: _impls_for(op, opts, cuda, doc["alternatives"]) for op in opts.ops}
    _print_preamble(p, doc, cuda)

    json_path = os.path.join(opts.out, "bench.json")
    if opts.host:
        from . import host

        host_shape = opts.shapes[0] if opts.shapes else (4096, 128)
        doc["host"] = host.run(p, device, host_shape, opts.host_large, settings.repeat, opts.quick, deadline)
        report.write_json(json_path, doc)
    if not opts.ops and not opts.e2e:
        return _finish_without_grid(p, doc, json_path, started)

    with p.status("measuring the floors…"):
        fl = floors.measure(device, opts.quick)
    doc["floors"] = dict(launch_us=None if fl.launch_s is None else fl.launch_s * 1e6,
                         copy_bandwidth_GBps=fl.bandwidth / 1e9, **fl.detail)
    p.line(f"floors: launch {report.fmt_time(doc['floors']['launch_us'])}, copy bandwidth "
           f"{fl.bandwidth / 1e9:.1f} GB/s  (an op's floor: max(launch, moved bytes / bandwidth))")

    if cuda:
        _warm_kernels(p, opts, shapes, impls_by_op, doc)
    cells, spent = [], {}
    doc["cells"] = cells  # empty under --ops none
    ledger = CompileLedger()
    total, done = len(opts.ops) * len(shapes), 0
    for op in opts.ops:
        impls = impls_by_op[op]
        report.op_header(p, op, impls)
        for N, T in shapes:
            done += 1
            if time.perf_counter() > deadline:
                doc.setdefault("not_run", []).append(dict(op=op, N=N, T=T))
                p.line(f"{op} {N}×{T}: not run, past --budget-s {opts.budget_s:g}", style="yellow")
                continue
            progress = f"[{done}/{total}] {_clock(time.perf_counter() - started)}"
            with p.status(f"{op} {N}×{T}…") as status:
                cell = _cell(CASES[op], N, T, impls, opts, settings, fl, ledger, spent, status)
            cells.append(cell)
            report.row(p, progress, cell, impls)
        doc["compile_s_by_op"] = dict(ledger.spent)
        doc["elapsed_s"] = time.perf_counter() - started
        report.write_json(json_path, doc)

    if opts.e2e:
        doc["e2e"] = _end_to_end(p, cuda, opts.quick)
    doc["measure_s_by_impl"] = spent
    doc["elapsed_s"] = time.perf_counter() - started
    return _finish(p, doc, impls_by_op, opts.out, cuda, ledger.spent)


def merge(paths, out: str) -> int:
    """``rlscan bench --merge``: one report from several runs of the same grid settings on one
    machine, e.g. the ops of a grid run in separate calls. Cells, the end-to-end part and the
    seconds spent are taken from every file (a later file's cell of the same op and shape
    wins); the summary is recomputed and the plot redrawn."""
    docs = []
    for path in paths:
        with open(path) as f:
            docs.append(json.load(f))
    first = docs[0]
    for path, doc in zip(paths[1:], docs[1:]):
        for key in ("device", "versions", "settings"):
            if doc.get(key) != first.get(key):
                raise ValueError(f"--merge: {path} has another {key!r} than {paths[0]}: "
                                 f"{doc.get(key)!r} vs {first.get(key)!r}")
        for key in ("layout", "dtype"):
            if doc["options"][key] != first["options"][key]:
                raise ValueError(f"--merge: {path} has another options.{key} than {paths[0]}")
    cells, spent = {}, {}
    merged = dict(first, merged_from=[os.path.basename(os.path.dirname(os.path.abspath(p))) + "/" +
                                      os.path.basename(p) for p in paths])
    for doc in docs:
        cells.update({(c["op"], c["N"], c["T"]): c for c in doc.get("cells", [])})
        for k, v in doc.get("measure_s_by_impl", {}).items():
            spent[k] = spent.get(k, 0.0) + v
        merged["compile_s_by_op"] = {**merged.get("compile_s_by_op", {}), **doc.get("compile_s_by_op", {})}
        if "e2e" in doc:
            merged["e2e"] = doc["e2e"]
    merged["cells"] = list(cells.values())
    merged["shapes"] = sorted({tuple(s) for d in docs for s in d.get("shapes", [])}, key=lambda s: (s[0], s[1]))
    merged["options"] = dict(first["options"], ops=list(dict.fromkeys(c["op"] for c in merged["cells"])))
    merged["measure_s_by_impl"] = spent
    merged["elapsed_s"] = sum(d.get("elapsed_s", 0.0) for d in docs)
    by_key = {i.key: i for i in (alts.RLSCAN,) + alts.ALTERNATIVES}
    impls_by_op = {}
    for c in merged["cells"]:
        keys = impls_by_op.setdefault(c["op"], ["rlscan"])
        keys += [k for k in c.get("impls", {}) if k in by_key and k not in keys]
    impls_by_op = {op: [by_key[k] for k in keys] for op, keys in impls_by_op.items()}
    os.makedirs(out, exist_ok=True)
    cuda = first["settings"]["device"].startswith("cuda")
    return _finish(report.Printer(), merged, impls_by_op, out, cuda, merged["compile_s_by_op"])


def _finish(p, doc: dict, impls_by_op: dict, out: str, cuda: bool, compile_spent: dict) -> int:
    """The summary, bench.json and bench.png of a finished grid; exit status 1 when any rlscan
    result failed its check."""
    cells = doc["cells"]
    if cells:
        doc["summary"] = report.summary(p, cells, impls_by_op)
    json_path = os.path.join(out, "bench.json")
    report.write_json(json_path, doc)
    png = os.path.join(out, "bench.png")
    title = f"rlscan bench — {doc['device']['name']}, {doc['options']['dtype']}, layout {doc['options']['layout']}"
    preferred = ("loop_torch", "compile") if cuda else ("loop_numpy", "loop_torch")
    solid, dashed = report.lines_to_draw(cells, preferred + tuple(i.key for i in alts.ALTERNATIVES))
    wrote_png = solid is not None and report.plot(png, cells, solid, dashed, title)
    p.line()
    spent = doc.get("measure_s_by_impl", {})
    p.line("seconds spent per implementation (checks, probes and timing): "
           + ", ".join(f"{k} {v:.0f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1]))
           + (f"; of which compiling: {sum(compile_spent.values()):.0f}" if compile_spent else ""), style="dim")
    p.line(f"wrote {json_path}" + (f" and {png}" if wrote_png else "") + f" in {_clock(doc['elapsed_s'])}")
    bad = _rlscan_failures(cells)
    if bad:
        p.line(f"rlscan failed its check in {len(bad)} cell(s): " + ", ".join(bad[:8]), style="bold red")
    return 1 if bad else 0


def _finish_without_grid(p, doc: dict, json_path: str, started: float) -> int:
    """``--ops none --host``: the host section only."""
    doc["elapsed_s"] = time.perf_counter() - started
    report.write_json(json_path, doc)
    p.line(f"wrote {json_path} in {_clock(doc['elapsed_s'])}")
    return 0


def _device():
    """``(GPU run?, device)``: the current CUDA device when there is one."""
    if torch.cuda.is_available():
        return True, torch.device("cuda", torch.cuda.current_device())
    return False, torch.device("cpu")


def _cell(case, N, T, impls, opts: Options, s: Settings, fl, ledger, spent: dict, status) -> dict:
    cell = dict(op=case.name, N=N, T=T, layout=opts.layout, dtype=report_dtype(opts.dtype))
    nbytes = input_bytes(case, T, N, opts.dtype)
    limit = MAX_INPUT_BYTES[s.device.type]
    if nbytes > limit:
        cell["skipped"] = f"inputs {nbytes / 1e9:.1f} GB > {limit / 1e9:.0f} GB"
        return cell
    start = time.perf_counter()
    try:
        inputs = make_inputs(case, T, N, opts.dtype, opts.layout, s.device, seed=opts.seed)
        truth, how = check.truth(case, inputs, T, N)
    except Exception as ex:  # noqa: BLE001 - out of memory, say: the cell is reported, the run goes on
        if s.device.type == "cuda":
            torch.cuda.empty_cache()
        cell["skipped"] = f"inputs or truth failed: {type(ex).__name__}: {str(ex)[:120]}"
        return cell
    spent["(truth)"] = spent.get("(truth)", 0.0) + time.perf_counter() - start
    moved = moved_bytes(inputs, len(truth), T, N, opts.dtype)
    cell.update(check=how, input_bytes=nbytes, moved_bytes=moved, floor_us=fl.of(moved) * 1e6,
                bandwidth_floor_us=moved / fl.bandwidth * 1e6, impls={})
    for impl in impls:
        status.update(f"{case.name} {N}×{T}: {impl.label}…")
        note = subset_note(opts, impl, N, T)
        if note:
            cell["impls"][impl.key] = dict(status="skipped", note=note)
            continue
        start = time.perf_counter()
        res = measure(impl, case, inputs, truth, T, s, ledger)
        spent[impl.key] = spent.get(impl.key, 0.0) + time.perf_counter() - start
        if res["status"] == "ok":
            res["over_floor"] = res["full_us"] / cell["floor_us"]
            if res.get("device_us") is not None:
                res["device_over_bandwidth_floor"] = res["device_us"] / cell["bandwidth_floor_us"]
        cell["impls"][impl.key] = res
    rl = cell["impls"]["rlscan"]
    for key, res in cell["impls"].items():
        if key != "rlscan" and res["status"] == "ok" and rl["status"] == "ok":
            res["rlscan_speedup"] = res["full_us"] / rl["full_us"]
    del inputs, truth
    if s.device.type == "cuda" and nbytes > 2**28:
        torch.cuda.empty_cache()
    return cell


def _impls_for(op: str, opts: Options, cuda: bool, why_not: dict) -> list:
    chosen = [alts.RLSCAN]
    for impl in alts.ALTERNATIVES:
        if opts.alternatives is not None and impl.key not in opts.alternatives:
            continue
        if alts.applies(impl, op) and why_not[impl.key]["unavailable"] is None:
            chosen.append(impl)
    return chosen


def _warm_kernels(p: report.Printer, opts: Options, shapes, impls_by_op: dict, doc: dict) -> None:
    """Compile the grid's Triton kernels in parallel processes before it runs (:mod:`.warm`)."""
    from . import warm

    jobs = warm.default_jobs() if opts.compile_jobs is None else opts.compile_jobs
    cells = []
    for op, impls in impls_by_op.items():
        for N, T in shapes:
            keys = [i.key for i in impls if i.key in warm.TRITON_IMPLS and subset_note(opts, i, N, T) is None]
            if keys and input_bytes(CASES[op], T, N, opts.dtype) <= MAX_INPUT_BYTES["cuda"]:
                cells.append((op, N, T, keys))
    if jobs <= 1 or len(cells) < 2:
        return
    with p.status(f"compiling the kernels of {len(cells)} cells in {jobs} processes…"):
        try:
            ran, seconds = warm.warm(cells, opts.layout, opts.dtype, opts.seed, jobs)
        except Exception as ex:  # noqa: BLE001 - the grid compiles as it goes instead
            p.line(f"compiling ahead failed ({type(ex).__name__}: {str(ex)[:120]}); the grid compiles as it goes",
                   style="yellow")
            return
    doc["compiled_ahead"] = dict(cells=len(cells), runs=ran, jobs=jobs, seconds=seconds)
    p.line(f"compiled the Triton kernels of {len(cells)} cells ahead, in {jobs} processes: {seconds:.0f} s")


def _rlscan_failures(cells) -> list:
    bad = []
    for c in cells:
        for key in ("rlscan", "exact"):
            res = c.get("impls", {}).get(key)
            if res and res["status"] in ("wrong", "failed") and "memory" not in res["note"]:
                bad.append(f"{c['op']} {c['N']}×{c['T']} ({key}: {res['note']})")
    return bad


# ----------------------------------------------------------------------------- end to end


def _end_to_end(p: report.Printer, cuda: bool, quick: bool) -> dict:
    device = "cuda" if cuda else "cpu"
    out = {"synthetic_ppo": []}
    rows = []
    for cfg in e2e.configs(cuda, quick):
        with p.status(f"end to end: synthetic PPO, {cfg.name}…"):
            r = e2e.synthetic_ppo(cfg, device, repeat=1 if quick else 3)
        out["synthetic_ppo"].append(r)
        rows.append([f"synthetic PPO, {cfg.name}, {cfg.envs}×{cfg.steps}, {cfg.epochs} epochs × {cfg.minibatches} mb",
                     report.fmt_time(r["gae_loop_s"] * 1e6), report.fmt_time(r["gae_rlscan_s"] * 1e6),
                     report.fmt_time(r["rest_of_update_s"] * 1e6), f"{100 * r['share_loop']:.2f}%",
                     f"{100 * r['share_rlscan']:.3f}%", f"×{r['update_speedup']:.3f}"])
    from .baselines import available

    if available("sb3"):
        with p.status("end to end: Stable-Baselines3 PPO (CartPole-v1, CPU)…"):
            r = e2e.sb3_ppo(updates=2 if quick else 4)
        out["sb3_ppo"] = r
        c = r["config"]
        rows.append([f"SB3 PPO (defaults, CPU), {c['env']}, {c['n_envs']}×{c['n_steps']}",
                     report.fmt_time(r["compute_returns_and_advantage_s"] * 1e6),
                     report.fmt_time(r["rlscan_gae_s"] * 1e6), report.fmt_time(r["train_s"] * 1e6),
                     f"{100 * r['share_sb3']:.2f}%", f"{100 * r['share_rlscan']:.3f}%",
                     f"×{r['update_speedup']:.3f}"])
    else:
        out["sb3_ppo"] = "skipped: stable-baselines3 (or gymnasium) is not installed"
    p.line()
    p.table(f"end to end on {device}: credit assignment's share of one PPO update",
            ["update", "GAE loop", "GAE rlscan", "rest of update", "share (loop)", "share (rlscan)",
             "update speedup"], rows)
    if isinstance(out["sb3_ppo"], dict):
        p.line(f"rlscan's GAE on SB3's buffer is bit-for-bit SB3's: {out['sb3_ppo']['identical_to_sb3']}")
    return out


# ----------------------------------------------------------------------------- header


def report_dtype(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _versions() -> dict:
    import numpy

    from rlscan import __version__
    from .baselines import version

    v = dict(rlscan=__version__, torch=torch.__version__, numpy=numpy.__version__, python=platform.python_version(),
             torchrl=version("torchrl"), stable_baselines3=version("sb3"))
    for name in ("triton", "numba"):
        try:
            v[name] = __import__(name).__version__
        except ImportError:
            v[name] = None
    return v


def _device_info(device: torch.device) -> dict:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return dict(type="cuda", name=props.name, sm_count=props.multi_processor_count,
                    memory_GB=props.total_memory / 1e9, cuda=torch.version.cuda)
    return dict(type="cpu", name=_cpu_name(), threads=torch.get_num_threads())


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _preamble(opts: Options, device, s: Settings, shapes) -> dict:
    why_not = {}
    for impl in alts.ALTERNATIVES:
        why = alts.unavailable(impl, device.type == "cuda", opts.dtype)
        why_not[impl.key] = dict(about=impl.about, unavailable=why, ops=list(impl.ops) if impl.ops else "all",
                                 selected=opts.alternatives is None or impl.key in opts.alternatives)
    method = dict(
        full_call="wall clock of back-to-back calls with one device synchronize after the last, divided by the "
                  "number of calls; median of up to --repeat rounds of ~%g ms; a call that takes %g s or more "
                  "counts as one synchronized call (a warm one: a first call that may have compiled is timed "
                  "again)" % (s.target_s * 1e3, s.long_call_s),
        device=("CUDA graph of n calls replayed and timed with CUDA events, divided by n (median of rounds); "
                "'cuda events around eager calls' where capture failed; Python loops of launches only up to "
                f"T={s.graph_max_T}") if device.type == "cuda" else "not measured on the CPU",
        check=f"every result, before timing: max over outputs of ||got - truth||_2 / ||truth||_2 <= {s.tolerance:g}; "
              f"truth = {check.REFERENCE} where T*N <= {check.REFERENCE_MAX_ELEMENTS} and T <= "
              f"{check.REFERENCE_MAX_T}, else {check.EXACT_F64} (each cell says which)",
        cap=f"a sequential alternative runs first on a prefix of the window; one whose call would take more than "
            f"{s.cap_s:g} s is skipped, with its estimate",
        floor="max(launch floor, moved bytes / copy bandwidth); moved bytes: each input read once, each output "
              "written once (bool flags 1 byte)",
        speedup="full-call time of the alternative / full-call time of rlscan",
        inputs=f"[T, N] with time_dim=0, layout {opts.layout} ({'time-major' if opts.layout == 'tn' else 'env-major'} "
               f"in memory), {report_dtype(opts.dtype)}; terminations with probability 1% per step (bool flags); a "
               "bootstrap value after the window; gamma 0.99, lambda 0.95 (V-trace and Retrace lambda 1)",
    )
    return dict(
        tool="rlscan bench", date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        device=_device_info(device), versions=_versions(), options=_options_doc(opts), shapes=[list(x) for x in shapes],
        settings={k: (str(v) if isinstance(v, (torch.device, torch.dtype)) else v) for k, v in s._asdict().items()},
        method=method, alternatives=why_not,
        subsets=None if (opts.shapes is not None or opts.quick or opts.all_cells) else dict(
            loops=dict(impls=LOOP_KEYS, envs=LOOP_ENVS), compile=dict(steps=COMPILE_STEPS)),
    )


def _options_doc(opts: Options) -> dict:
    d = opts._asdict()
    d["dtype"] = report_dtype(opts.dtype)
    d["shapes"] = None if opts.shapes is None else [list(x) for x in opts.shapes]
    return d


def _print_preamble(p: report.Printer, doc: dict, cuda: bool) -> None:
    dev, v = doc["device"], doc["versions"]
    p.line(f"rlscan bench — {dev['name']}", style="bold")
    if not cuda:
        p.line("No CUDA GPU found: this run times rlscan's CPU path (the compiled numba loop) against the numpy "
               "and torch loops on the CPU. The GPU kernels, the exact kernel and torch.compile are not timed.",
               style="bold yellow")
    p.line(f"{doc['date']}  rlscan {v['rlscan']}, torch {v['torch']}, triton {v['triton']}, numba {v['numba']}, "
           f"numpy {v['numpy']}, torchrl {v['torchrl']}, stable-baselines3 {v['stable_baselines3']}")
    for key in ("inputs", "full_call", "device", "check", "cap", "floor", "speedup"):
        p.line(f"  {key}: {doc['method'][key]}", style="dim")
    for key, a in doc["alternatives"].items():
        state = f"  [not run: {a['unavailable']}]" if a["unavailable"] else "" if a["selected"] else "  [not selected]"
        p.line(f"  {key}: {a['about']}{state}", style="dim")
    if doc["subsets"]:
        p.line(f"  default grid: loops only at N in {LOOP_ENVS}; torch.compile only at T in {COMPILE_STEPS} with "
               "N > 1 (and at 1x1000000); --all-cells runs every cell", style="dim")
    p.line("  cells: time of the full call, then ×rlscan's speedup over it; 'skip ~Xs' = estimated call time "
           "over the cap; '·' = not in the default grid's subset", style="dim")


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"
