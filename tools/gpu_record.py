"""Refresh the GPU record in one call: each GPU measurement of the record, in order of value,
within a budget of seconds.

The steps, each its own command run in a subprocess (so a crash or a hang costs one step):

1. ``gpu_check``: a slice of ``tools/gpu_check.py`` (the shapes of record, forward and the
   fused backward): the results are right on this GPU before anything is timed;
2. ``seed_compare``: ``tools/seed_compare.py record``: rlscan against the seed's design;
3. ``verl_timing``: ``tools/verl_timing.py``: verl's estimators against the bandwidth floor;
4. ``leanrl``: ``tools/leanrl_timing.py``: LeanRL's compile + ``CudaGraphModule`` pattern;
5. ``bench_host``: ``rlscan bench --host --ops none --shapes 4096x128``: the host's share;
6. ``bench_quick``: ``rlscan bench --quick``: the main job, and how long it takes.

A step starts only if its minimum time is left; it runs at most its cap or what is left, and
the tools that take a budget get theirs. Each writes ``$OUT/<step>.json`` (``./bench-out``
without ``$OUT``): the command, exit status, seconds, the tail of its output and the tool's
own JSON, and ``$OUT/record.json`` holds them all (less the outputs' tails): that file, saved
as ``docs/record-<card>.json``, is a card's record, which ``python tests/test_docs.py --write``
renders into docs/records.md (:func:`render`). A table of the steps and their headline
figures is printed last.

Run it where a GPU is lent, as one call::

    python tools/gpu_record.py --budget-s 540
    python tools/gpu_record.py --steps seed_compare,leanrl --budget-s 300
    python tools/gpu_record.py --dry          # on the CPU: each step's command in its dry form

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
import time
from typing import Callable, NamedTuple

TOOLS = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
RLSCAN = [PY, "-m", "rlscan.cli"]


class Step(NamedTuple):
    name: str
    argv: list  # the command on a GPU
    min_s: float  # not started with less than this left
    cap_s: float  # never given more than this
    budget_flag: str  # the tool's own budget option ("" where it has none)
    dry_argv: list  # the command on a CPU (--dry)
    headline: Callable  # the tool's JSON -> one line


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


def seed_targets(rows: list) -> list:
    """``(shape, rlscan µs, target µs, target's label)`` for each shape of ``seed_compare``'s rows
    that has a target: the whole-row stand-in (GAE, discounted returns), the seed's design
    through rlscan's kernel (a whole-row tile per program, the other ops), or plain Retrace
    plus one read of the action tables for Retrace from the tables."""
    out = []
    for shape in dict.fromkeys(r["shape"] for r in rows):
        these = {r["label"]: r for r in rows if r["shape"] == shape}
        ours = these.get("heuristic")
        if ours is None:
            continue
        for label in ("whole-row stand-in", "seed's design (row tile)"):
            if label in these:
                out.append((shape, ours["device_us"], these[label]["device_us"], label))
        plain = next((r for label, r in these.items() if label.startswith("plain retrace")), None)
        if plain is not None:
            out.append((shape, ours["device_us"], plain["device_us"] + plain.get("tables_us", 0.0),
                        "plain retrace + tables"))
    return out


def _seed_line(result: dict) -> str:
    rows = result.get("seed.json", [])
    targets = seed_targets(rows)
    met = [t for t in targets if t[1] <= t[2] * 1.02]  # within the 2% that device times repeat to
    lost = sorted((t for t in targets if t not in met), key=lambda t: -t[1] / t[2])
    worst = "; ".join(f"{s} {a:.1f}/{b:.1f}" for s, a, b, _ in lost[:3])
    return f"{len(rows)} rows; targets met {len(met)} of {len(targets)}" + (f"; lost: {worst}" if worst else "")


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


def steps() -> list:
    tool = lambda name, *a: [PY, os.path.join(TOOLS, name), *a]  # noqa: E731
    return [
        Step("gpu_check", tool("gpu_check.py", "--shapes", "4096x128,512x2048,4096x2048,16x262144"),
             30, 80, "--budget-s", tool("gpu_check.py", "--small", "--limit", "3"), _gpu_check_line),
        Step("seed_compare", tool("seed_compare.py", "record"), 60, 170, "--budget",
             tool("seed_compare.py", "--help"), _seed_line),
        Step("verl_timing", tool("verl_timing.py"), 30, 70, "", tool("verl_timing.py", "--dry"), _verl_line),
        Step("leanrl", tool("leanrl_timing.py"), 60, 130, "", tool("leanrl_timing.py", "--help"), _leanrl_line),
        Step("bench_host", RLSCAN + ["bench", "--host", "--ops", "none", "--shapes", "4096x128"], 40, 90, "",
             RLSCAN + ["bench", "--host", "--ops", "none", "--shapes", "8x16", "--host-large", "64x32", "--quick"],
             _host_line),
        Step("bench_quick", RLSCAN + ["bench", "--quick"], 60, 150, "",
             RLSCAN + ["bench", "--quick", "--ops", "gae", "--shapes", "8x16"], _quick_line),
    ]


# ----------------------------------------------------------------------------- running

def _run(argv: list, env: dict, timeout: float) -> tuple:
    """``(exit status or 'timed out', output)``: the command in its own process group, killed
    with its children past ``timeout``."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timed out"
        log.seek(0)
        return rc, log.read()


def run_step(step: Step, seconds: float, out: str, dry: bool) -> dict:
    folder = tempfile.mkdtemp(prefix=f"rlscan-{step.name}-")
    argv = list(step.dry_argv if dry else step.argv)
    if not dry and step.budget_flag:
        argv += [step.budget_flag, f"{max(10.0, seconds - 20):.0f}"]  # room to write its JSON
    if step.name.startswith("bench"):
        argv += ["--out", folder]
    env = dict(os.environ, OUT=folder, PYTHONUNBUFFERED="1")
    if dry:  # on the CPU, where there is a GPU too: the interpreter, and no GPU in sight
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    start = time.monotonic()
    rc, output = _run(argv, env, seconds)
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
    deadline = time.monotonic() + args.budget_s
    docs = []
    for step in chosen:
        left = deadline - time.monotonic()
        if not args.dry and left < step.min_s:
            docs.append(dict(step=step.name, rc="skipped", seconds=0.0,
                             headline=f"skipped: {left:.0f} s left, it needs {step.min_s:.0f}"))
            with open(os.path.join(out, f"{step.name}.json"), "w") as f:
                json.dump(docs[-1], f, indent=1)
            continue
        seconds = 120.0 if args.dry else min(step.cap_s, left)
        print(f"# {step.name}: up to {seconds:.0f} s", flush=True)
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
    """A card's section of docs/records.md from its ``record.json``: the steps, the seed's
    design against rlscan, and LeanRL's pattern."""
    steps = record["steps"]
    lines = [f"{record['gpu']} ({record['n_sm']} SMs), torch {record['torch']}, Triton {record['triton']}, "
             f"{record['date']}, settings: {record['settings_table']}; each step's command is in the JSON.", "",
             "| step | exit | seconds | headline |", "|---|---|---|---|"]
    lines += [f"| {name} | {d['rc']} | {d['seconds']:.0f} | {d['headline']} |" for name, d in steps.items()]
    seed = steps.get("seed_compare", {}).get("result", {}).get("seed.json", [])
    if seed:
        lines += ["", "Device µs, `[N, T]` float32; the target is the seed's design (bold: rlscan more than 2% "
                      "slower):", "", "| shape | rlscan | target | target's kind |", "|---|---|---|---|"]
        for shape, ours, target, label in seed_targets(seed):
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
