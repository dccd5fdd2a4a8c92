"""Refresh the GPU record in one call: each GPU measurement of the record, in order of value,
each inside its share of a budget of seconds.

The steps, each its own command run in a subprocess (so a crash or a hang costs one step):

1. ``gpu_check``: 40 checks of ``tools/gpu_check.py`` at the ``[N, T]`` shapes of record,
   ordered to reach their settings classes first: the results are right on this GPU before
   anything is timed (the full check is a call of its own, below);
2. ``seed_compare``: ``tools/seed_compare.py seed retrace_tables seed_tn``: rlscan against
   rl-triton itself, the seed's library, at the ``[N, T]`` cells of record; Retrace from the
   tables against plain Retrace plus the tables; rl-triton's ``[T, N]`` forms. It needs
   rl-triton installed (below) and says so, and exits 3, where it is not;
3. ``verl_timing``: ``tools/verl_timing.py``: verl's estimators against the bandwidth floor;
4. ``leanrl``: ``tools/leanrl_timing.py``: LeanRL's compile + ``CudaGraphModule`` pattern;
5. ``bench_host``: ``rlscan bench --host --ops none --shapes 4096x128``: the host's share;
6. ``bench_quick``: ``rlscan bench --quick``: the main job, and how long it takes.

Each step gets a share of what is left, by its weight among the steps still to run (time an
earlier step leaves unused goes to the later ones): the tool is told the share less a margin
(its own ``--budget-s``, which it honours: no check, cell, shape or part starts past it, and
its JSON is written as it goes) and is killed at the share. A step whose share is under its
minimum is skipped. The child's output is printed as it comes, prefixed with the step's name.
Each step writes ``$OUT/<step>.json`` (``./bench-out`` without ``$OUT``): the command, exit
status, seconds, the tail of its output and the tool's own JSON, and ``$OUT/record.json`` holds
them all (less the outputs' tails): that file, saved as ``docs/record-<card>.json``, is a card's
record, which ``python tests/test_docs.py --write`` renders into docs/records.md (:func:`render`).
A table of the steps and their headline figures is printed last.

Run it where a GPU is lent, as one call of 540 s, after installing rl-triton there (the
device machine gets the checkout only, so carry rl-triton's folder in the git-ignored
``.device/``: ``cp -r /work/shared/rl-triton-0.1.3 .device/rl-triton`` here, name
``.device/rl-triton`` in the call's ``carry``)::

    python -m pip install --no-deps --no-build-isolation ./.device/rl-triton && python tools/gpu_record.py --budget-s 540
    python tools/gpu_record.py --steps seed_compare,leanrl --budget-s 300
    python tools/gpu_record.py --dry          # on the CPU: each step's command in its dry form

and the full correctness check as a second call of its own (it reaches every settings class
of the card's table first, then checks by breadth; exit 3: all that ran passed, the rest
did not fit, continue with the ``--start`` it prints)::

    python tools/gpu_check.py --budget-s 480

``--dry`` runs each step as a machine without a GPU can (tiny shapes under the interpreter,
or the tool's ``--help``), which checks the commands and the headline code; where there is
a GPU, its steps do not see it (``CUDA_VISIBLE_DEVICES`` empty), so the dry run is the same.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, NamedTuple

TOOLS = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
RLSCAN = [PY, "-m", "rlscan.cli"]


class Step(NamedTuple):
    name: str
    argv: list  # the command on a GPU
    weight: float  # its share of the time left, among the steps still to run (seconds of a 540 s run)
    margin_s: float  # the tool is told its share less this, and killed at the share
    min_s: float  # not started with a share under this
    budget_flag: str  # the tool's own budget option, which it honours
    dry_argv: list  # the command on a CPU (--dry)
    headline: Callable  # the tool's JSON -> one line


RESERVE_S = 10.0  # of --budget-s: this script's own start and its record.json


def _load(folder: str) -> dict:
    """The JSON files a tool wrote into ``folder``, by file name."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.json"), recursive=True)):
        try:
            with open(path) as f:
                out[os.path.relpath(path, folder)] = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:
            out[os.path.relpath(path, folder)] = {"unreadable": str(exc)}
    return out


# ----------------------------------------------------------------------------- headlines

def _gpu_check_line(result: dict) -> str:
    doc = result.get("gpu_check.json", {})
    rows = doc.get("rows", [])
    failed = sum(not r.get("ok") for r in rows)
    fallbacks = sum(bool(r.get("fallbacks")) for r in rows)
    return f"{len(rows)} checks, {failed} failed, {fallbacks} fallbacks, {len(doc.get('not_run', []))} not run"


LEGACY_TARGETS = {"whole-row stand-in": "stand-in: whole-row kernel (not rl-triton)",
                  "seed's design (row tile)": "stand-in: rlscan's kernel, a row per program (not rl-triton)"}


def seed_cells(rows: list) -> list:
    """``seed_compare``'s cells against rl-triton itself (its ``seed`` groups)."""
    return [r for r in rows if r.get("group", "").startswith("seed") and "missing" not in r]


def table_targets(rows: list) -> list:
    """``(shape, rlscan µs, target µs, target's label)`` for each shape of ``seed_compare``'s rows
    timed beside a target of rlscan's own: Retrace from the tables against plain Retrace plus
    one read of the tables; in records made before rl-triton was measured, the stand-ins of
    its design, labelled as such."""
    out = []
    rows = [r for r in rows if "label" in r]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        these = {r["label"]: r for r in rows if r["shape"] == shape}
        ours = these.get("heuristic")
        if ours is None:
            continue
        for label, name in LEGACY_TARGETS.items():
            if label in these:
                out.append((shape, ours["device_us"], these[label]["device_us"], name))
        plain = next((r for label, r in these.items() if label.startswith("plain retrace")), None)
        if plain is not None:
            out.append((shape, ours["device_us"], plain["device_us"] + plain.get("tables_us", 0.0),
                        "plain retrace + tables"))
    return out


def _won(cells: list, key: str = "won") -> str:
    return f"{sum(bool(c[key]) for c in cells)} of {len(cells)}"


def _seed_line(result: dict) -> str:
    rows = result.get("seed.json", [])
    missing = [r for r in rows if "missing" in r]
    cells = seed_cells(rows)
    nt = [c for c in cells if c["layout"] == "nt" and not c["truncations"]]
    parts = []
    if missing:
        parts.append("rl-triton not installed: " + ", ".join(r["group"] for r in missing) + " not run")
    if nt:
        lost = sorted((c for c in nt if not c["won"]), key=lambda c: -(c["ratio"] if c["ratio"] == c["ratio"] else 9))
        owned = [c for c in nt if c["won_own"] is not None]
        parts.append(f"rl-triton [N, T] cells won {_won(nt)}" + (f" (own form {_won(owned, 'won_own')} where it "
                                                                   "differs)" if owned else "")
                     + ("; lost: " + "; ".join(f"{c['shape']} {c['rlscan_us']:.1f}/{c['seed_us']:.1f}"
                                               for c in lost[:3]) if lost else ""))
    tn = [c for c in cells if c["layout"] == "tn"]
    if tn:
        parts.append(f"[T, N] won {_won(tn)}")
    targets = table_targets(rows)
    if targets:
        met = [t for t in targets if t[1] <= t[2] * 1.02]  # within the 2% that device times repeat to
        parts.append(f"retrace tables met {len(met)} of {len(targets)}")
    return "; ".join(parts) or f"{len(rows)} rows"


def _verl_line(result: dict) -> str:
    rows = result.get("verl_timing.json", {}).get("rows", [])
    parts = []
    for r in rows:
        device, floor = r.get("device_s"), r.get("floor_s")
        if device and floor and device == device:  # NaN where nothing ran on a device (--dry)
            parts.append(f"{r.get('estimator', '?')} {r.get('shape', '?')} {device / floor:.2f}x floor")
    return "; ".join(parts) or f"{len(rows)} rows"


def _leanrl_line(result: dict) -> str:
    rows = result.get("leanrl.json", {}).get("rows", [])
    parts = []
    for r in rows:
        n, t = r["shape"]
        ours = r.get("rlscan", {}).get("wrapped_us")
        loop = r.get("loop", {}).get("wrapped_us")
        if ours and loop:
            parts.append(f"{n}x{t} {ours:.0f}/{loop:.0f} us")
        elif ours:
            parts.append(f"{n}x{t} rlscan {ours:.0f} us")
    return "rlscan/loop: " + ", ".join(parts) if parts else f"{len(rows)} shapes"


def _host_line(result: dict) -> str:
    host = result.get("bench.json", {}).get("host", {})
    compiled = host.get("compiled", {}).get("compiled_default", {})
    lean = host.get("leanrl", {})
    parts = []
    if "over_eager" in compiled:
        parts.append(f"compiled x{compiled['over_eager']:.2f} eager")
    if "loop_over_rlscan" in lean:
        parts.append(f"LeanRL loop/rlscan x{lean['loop_over_rlscan']:.2f}")
    return "; ".join(parts) or ("host section written" if host else "no host section")


def _quick_line(result: dict) -> str:
    doc = result.get("bench.json", {})
    cells = doc.get("cells", [])
    bad = [c for c in cells if c.get("impls", {}).get("rlscan", {}).get("status") in ("wrong", "failed")]
    elapsed = doc.get("elapsed_s")
    return (f"{len(cells)} cells, {len(bad)} rlscan failures" +
            (f", {elapsed:.0f} s" if elapsed is not None else ""))


RECORD_SHAPES = "4096x128,16384x16,512x2048,4096x2048"  # the [N, T] cells of record (seed_compare's)


def steps() -> list:
    tool = lambda name, *a: [PY, os.path.join(TOOLS, name), *a]  # noqa: E731
    return [
        Step("gpu_check", tool("gpu_check.py", "--shapes", RECORD_SHAPES, "--limit", "40"), 55, 15, 30, "--budget-s",
             tool("gpu_check.py", "--small", "--ops", "gae", "--limit", "3"), _gpu_check_line),
        Step("seed_compare", tool("seed_compare.py", "seed", "retrace_tables", "seed_tn"), 170, 20, 60, "--budget",
             tool("seed_compare.py", "--help"), _seed_line),
        Step("verl_timing", tool("verl_timing.py"), 50, 20, 25, "--budget-s", tool("verl_timing.py", "--dry"),
             _verl_line),
        Step("leanrl", tool("leanrl_timing.py"), 100, 15, 40, "--budget-s", tool("leanrl_timing.py", "--help"),
             _leanrl_line),
        Step("bench_host", RLSCAN + ["bench", "--host", "--ops", "none", "--shapes", "4096x128"], 65, 20, 30,
             "--budget-s",
             RLSCAN + ["bench", "--host", "--ops", "none", "--shapes", "8x16", "--host-large", "64x32", "--quick"],
             _host_line),
        Step("bench_quick", RLSCAN + ["bench", "--quick"], 90, 15, 40, "--budget-s",
             RLSCAN + ["bench", "--quick", "--ops", "gae", "--shapes", "8x16"], _quick_line),
    ]


def shares(chosen: list, left: float) -> list:
    """Each step's share of ``left`` seconds if every step before it used all of its own: by
    weight among the steps still to run (what :func:`main` gives them, from the time then left)."""
    out, rest = [], sum(s.weight for s in chosen)
    for step in chosen:
        share = left * step.weight / rest
        out.append(share)
        left, rest = left - share, rest - step.weight
    return out


# ----------------------------------------------------------------------------- running

def _run(argv: list, env: dict, timeout: float, prefix: str) -> tuple:
    """``(exit status or 'timed out', output)``: the command in its own process group, its
    output printed as it comes (each line after ``prefix``), killed with its children past
    ``timeout``."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            text=True, errors="replace")
    lines = []

    def pump():
        for line in proc.stdout:
            lines.append(line)
            print(f"{prefix}{line}", end="" if line.endswith("\n") else "\n", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = "timed out"
    reader.join(timeout=5)
    return rc, "".join(lines)


def run_step(step: Step, seconds: float, out: str, dry: bool) -> dict:
    folder = tempfile.mkdtemp(prefix=f"rlscan-{step.name}-")
    argv = list(step.dry_argv if dry else step.argv)
    if not dry:
        argv += [step.budget_flag, f"{max(10.0, seconds - step.margin_s):.0f}"]  # room to start and write its JSON
    if step.name.startswith("bench"):
        argv += ["--out", folder]
    env = dict(os.environ, OUT=folder, PYTHONUNBUFFERED="1")
    if dry:  # on the CPU, where there is a GPU too: the interpreter, and no GPU in sight
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    start = time.monotonic()
    rc, output = _run(argv, env, seconds, f"  {step.name} | ")
    took = time.monotonic() - start
    result = _load(folder)
    for png in glob.glob(os.path.join(folder, "*.png")):
        shutil.copy(png, os.path.join(out, f"{step.name}.png"))
    shutil.rmtree(folder, ignore_errors=True)
    try:
        headline = step.headline(result)
    except Exception as exc:  # noqa: BLE001 - a tool's JSON in another shape: the record says so
        headline = f"(headline failed: {type(exc).__name__}: {exc})"
    doc = dict(step=step.name, command=" ".join(argv), rc=rc, seconds=round(took, 1), given_s=round(seconds, 1),
               headline=headline, output_tail=output[-6000:], result=result)
    with open(os.path.join(out, f"{step.name}.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    return doc


def main(argv=None) -> int:
    all_steps = steps()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=540.0, help="seconds for all the steps (default 540)")
    ap.add_argument("--steps", default=None,
                    help="comma-separated among " + ", ".join(s.name for s in all_steps) + " (default all, in order)")
    ap.add_argument("--dry", action="store_true", help="each step's dry form, on the CPU")
    ap.add_argument("--render", metavar="RECORD_JSON", help="run nothing: print a record.json as docs/records.md "
                                                            "shows it")
    args = ap.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)))
        return 0
    chosen = all_steps
    if args.steps:
        names = [n for n in args.steps.split(",") if n]
        unknown = set(names) - {s.name for s in all_steps}
        if unknown:
            ap.error(f"--steps: unknown {sorted(unknown)}")
        chosen = [s for s in all_steps if s.name in names]
    if not args.dry:
        import torch

        if not torch.cuda.is_available():
            print("tools/gpu_record.py needs a CUDA GPU (or --dry, which checks its commands on the CPU)",
                  file=sys.stderr)
            return 2
    out = os.environ.get("OUT", "bench-out")
    os.makedirs(out, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.budget_s - RESERVE_S
    docs = []
    for i, step in enumerate(chosen):
        left = deadline - time.monotonic()
        share = shares(chosen[i:], left)[0]
        if not args.dry and share < step.min_s:
            docs.append(dict(step=step.name, rc="skipped", seconds=0.0,
                             headline=f"skipped: a share of {share:.0f} s, it needs {step.min_s:.0f}"))
            with open(os.path.join(out, f"{step.name}.json"), "w") as f:
                json.dump(docs[-1], f, indent=1)
            continue
        seconds = 120.0 if args.dry else share
        print(f"# {step.name} ({time.monotonic() - started:.0f} s in): up to {seconds:.0f} s"
              + ("" if args.dry else f", its own budget {max(10.0, seconds - step.margin_s):.0f} s"), flush=True)
        docs.append(run_step(step, seconds, out, args.dry))
        print(f"  {docs[-1]['rc']}, {docs[-1]['seconds']:.0f} s: {docs[-1]['headline']}", flush=True)
    record = dict(tool="tools/gpu_record.py", date=time.strftime("%Y-%m-%d"), dry=args.dry, **_machine(args.dry),
                  steps={d["step"]: {k: v for k, v in d.items() if k != "output_tail"} for d in docs})
    with open(os.path.join(out, "record.json"), "w") as f:
        json.dump(record, f, indent=1, default=str)
    print("\n| step | exit | seconds | headline |\n|---|---|---|---|")
    for d in docs:
        print(f"| {d['step']} | {d['rc']} | {d['seconds']:.0f} | {d['headline']} |")
    return 0 if all(d["rc"] in (0, "skipped") for d in docs) else 1


def _machine(dry: bool) -> dict:
    import torch
    import triton

    cuda = torch.cuda.is_available() and not dry
    return dict(gpu=torch.cuda.get_device_name() if cuda else "cpu (--dry)",
                n_sm=torch.cuda.get_device_properties(0).multi_processor_count if cuda else None,
                torch=torch.__version__, triton=triton.__version__,
                settings_table=os.environ.get("RLSCAN_SETTINGS") or "the shipped table for this GPU")


# ----------------------------------------------------------------------------- the page

def render(record: dict) -> str:
    """A card's section of docs/records.md from its ``record.json``: the steps, rlscan against
    rl-triton and against its own targets, and LeanRL's pattern."""
    steps = record["steps"]
    lines = [f"{record['gpu']} ({record['n_sm']} SMs), torch {record['torch']}, Triton {record['triton']}, "
             f"{record['date']}, settings: {record['settings_table']}; each step's command is in the JSON.", "",
             "| step | exit | seconds | headline |", "|---|---|---|---|"]
    lines += [f"| {name} | {d['rc']} | {d['seconds']:.0f} | {d['headline']} |" for name, d in steps.items()]
    seed = steps.get("seed_compare", {}).get("result", {}).get("seed.json", [])
    cells = seed_cells(seed)
    if cells:
        lines += ["", "rlscan against rl-triton v0.1.3 itself, the seed's library: device µs (CUDA-graph replays) on "
                      "the same tensors, float32 in rl-triton's form (`tools/seed_ops.py` maps them to rlscan's call); "
                      "rl-triton's fastest function counts; bold: rlscan slower. *Own form*: rlscan on its own "
                      "arguments of the same problem, where the mapping runs arithmetic:", "",
                  "| op (rl-triton's function) | layout | N × T | rlscan | rl-triton | ratio | rlscan, own form |",
                  "|---|---|---|---|---|---|---|"]
        for c in cells:
            mark = "" if c["won"] else "**"
            own = "" if c["rlscan_own_us"] is None else f"{c['rlscan_own_us']:.1f}"
            lines.append(f"| {c['op']} ({c['seed_best']}) | {c['layout']}{' truncations' if c['truncations'] else ''}"
                         f" | {c['N']} × {c['T']} | {mark}{c['rlscan_us']:.1f}{mark} | {c['seed_us']:.1f} | "
                         f"{mark}{c['ratio']:.2f}{mark} | {own} |")
    targets = table_targets(seed)
    if targets:
        lines += ["", "Device µs, `[N, T]` float32, against targets of rlscan's own (bold: rlscan more than 2% "
                      "slower):", "", "| shape | rlscan | target | target's kind |", "|---|---|---|---|"]
        for shape, ours, target, label in targets:
            mark = "**" if ours > target * 1.02 else ""
            lines.append(f"| {shape} | {mark}{ours:.1f}{mark} | {target:.1f} | {label} |")
    lean = steps.get("leanrl", {}).get("result", {}).get("leanrl.json", {}).get("rows", [])
    if lean:
        lines += ["", "LeanRL's pattern (`CudaGraphModule` of the compiled function), µs per call, the graph's "
                      "device µs in brackets:", "", "| N × T | rlscan | LeanRL's loop | compile s, rlscan / loop |",
                  "|---|---|---|---|"]
        for r in lean:
            ours, loop = r.get("rlscan", {}), r.get("loop", {})
            cell = lambda x: f"{x['wrapped_us']:.1f} ({x['graph_device_us']:.1f})" if "wrapped_us" in x else "—"  # noqa
            compile_s = "/".join(f"{x['compile_s']:.1f}" if "compile_s" in x else "—" for x in (ours, loop))
            lines.append(f"| {r['shape'][0]} × {r['shape'][1]} | {cell(ours)} | {cell(loop)} | {compile_s} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
