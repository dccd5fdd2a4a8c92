"""Where a chained kernel's time goes, on a GPU: each program's timeline and look-back walk.

    python scripts/h200_anatomy.py                 # light ops and V-trace at 4096 x 2048 and 16384 x 512
    python scripts/h200_anatomy.py --ops gae --shapes 4096x2048

For each op and shape this runs the settings the heuristic picks through instrumented copies
of ``chained_kernel`` (``anatomy_kernels.py``), which record, per program, the global timer
when it starts, when its block is scanned, when its carry is known and when its outputs are
issued, and how many positions its look-back composed in how many round trips. Modes:
``full`` (the shipped chain), ``patient`` (poll the predecessor's flag up to P times for its
outgoing state before walking back), ``publish`` (publish, look back at nothing) and
``nowait`` (no chain at all). The last two give wrong results on purpose: they bound what
the chain costs. A label's other words change the heuristic's settings: ``steps N``,
``look-back N``, ``64 wide`` (64 environments, pairs as words, one per round trip) and
``maxnreg N`` (Triton's register limit). Device time is by CUDA-graph replay, side by side
with the shipped call. Each program's timeline goes to ``STATS`` in a call of its own.
"""
from __future__ import annotations

import argparse
import time

import torch

import rlscan
from rlscan._triton import launch as L
from rlscan.bench import cases, check, floors

from anatomy_kernels import STATS_FIELDS, chained_timed  # noqa: E402 - this folder is on sys.path
from h200_explore import timed_device as device_us  # noqa: E402

LIGHT = ("full", "publish", "nowait", "patient 8", "patient 64", "full look-back 1", "full steps 8",
         "nowait steps 8", "full steps 32", "nowait steps 32", "full 64 wide")
REGISTERS = ("full", "nowait", "full maxnreg 192", "full maxnreg 168", "full maxnreg 128", "full 64 wide",
             "full 64 wide maxnreg 168", "full 64 wide maxnreg 128")
HEAVY = ("full", "publish", "nowait", "full maxnreg 192", "full maxnreg 168", "full maxnreg 128")
CHAIN = ("full", "publish", "nowait")


def _captured_plan(case, inputs):
    """Run the op once, returning the launch plan it ran and the plan's arguments."""
    seen = {}
    call = L.LaunchPlan.__call__

    def spy(plan, ins, outs, scalars):
        seen["plan"] = (plan, ins, outs, scalars)
        return call(plan, ins, outs, scalars)

    L._PLANS.clear()
    L.LaunchPlan.__call__ = spy
    try:
        case.call(rlscan, inputs)
    finally:
        L.LaunchPlan.__call__ = call
    return seen["plan"]


def _variant(base, T, label):
    """The mode, patience, register limit and settings of one variant (``base``, changed)."""
    words = label.split()
    value = {w: int(v) for w, v in zip(words, words[1:]) if v.isdigit()}
    cfg = base
    if "steps" in value:
        cfg = cfg._replace(steps=value["steps"])
    if "look-back" in value:
        cfg = cfg._replace(lookback=value["look-back"])
    if "wide" in words:
        cfg = cfg._replace(block_b=int(words[words.index("wide") - 1]), lookback=1, link="words")
    return words[0], value.get("patient", 0), value.get("maxnreg"), L._with_chunks(cfg, T, 1)


def _summary(stats: torch.Tensor) -> dict:
    s = stats.view(-1, STATS_FIELDS).double().cpu()
    start, scanned, carried, emitted = s[:, 2], s[:, 3], s[:, 4], s[:, 5]
    span = (emitted.max() - start.min()).item()
    busy = (emitted - start).sum().item()
    composed = s[1:, 6]
    return dict(scan=(scanned - start).mean().item() / 1e3, wait=(carried - scanned).mean().item() / 1e3,
                emit=(emitted - carried).mean().item() / 1e3, span=span / 1e3, resident=busy / span,
                composed=composed.mean().item(), composed_p90=composed.quantile(0.9).item(),
                trips=s[1:, 7].mean().item())


def measure(op: str, N: int, T: int, labels, fl) -> list:
    dev = torch.device("cuda")
    case = cases.CASES[op]
    inputs = cases.make_inputs(case, T, N, torch.float32, "tn", dev)
    n_outputs = len(cases.outputs_of(case.call(rlscan, inputs)))
    floor_us = cases.moved_bytes(inputs, n_outputs, T, N, torch.float32) / fl.bandwidth * 1e6
    shipped_us = device_us(lambda: case.call(rlscan, inputs))
    plan, ins, outs, scalars = _captured_plan(case, inputs)
    shipped = [o.clone() for o in outs if o is not None]
    base = plan.cfg
    print(f"# {op} {N}x{T}: shipped {shipped_us:.1f} us ({shipped_us / floor_us:.2f}x floor), "
          f"{base.kind} {base.block_b}x{base.stripes}x{base.steps} look-back {base.lookback} {base.link}", flush=True)
    rows = [(f"{op} {N}x{T}", "shipped", shipped_us, shipped_us / floor_us, None)]
    for label in labels:
        mode, patience, maxnreg, cfg = _variant(base, T, label)
        if cfg.kind != "chained" or (mode == "patient" and cfg.link != "flags"):
            continue
        plan._use(cfg)
        n_programs = plan.grid[0] * plan.grid[1]
        stats = torch.zeros(n_programs * STATS_FIELDS, dtype=torch.int64, device=dev)

        def fn():
            return chained_timed[plan.grid[:2]](*plan._args(ins, outs), STATS=stats, MODE=mode, PATIENCE=patience,
                                                **plan.constexprs, PHASE=0, **plan.options, maxnreg=maxnreg)

        try:
            kernel = fn()
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a setting the compiler refuses is a result too
            print(f"  {label:18s} failed: {repr(exc)[:300]}", flush=True)
            continue
        err = check.relative_error(tuple(o for o in outs if o is not None), tuple(shipped))
        if mode in ("full", "patient") and not err < 1e-4:
            print(f"  {label:18s} wrong: relative error {err:.1e}", flush=True)
            continue
        us = device_us(fn)
        fn()
        torch.cuda.synchronize()
        s = _summary(stats)
        print(f"  {label:18s} {us:7.1f} us {us / floor_us:5.2f}x  {kernel.n_regs} regs "
              f"{kernel.n_spills * 4} B local, scan {s['scan']:5.2f} wait {s['wait']:5.2f} emit {s['emit']:5.2f} "
              f"us/program, span {s['span']:6.1f} us, {s['resident']:6.1f} resident, "
              f"composed {s['composed']:5.1f} (p90 {s['composed_p90']:4.0f}) in {s['trips']:5.1f} trips", flush=True)
        rows.append((f"{op} {N}x{T}", label, us, us / floor_us, s))
    return rows


def _fills(dev) -> None:
    """Device time of the per-call scratch set-up alone: the flags' zeroing and the words' fill."""
    for what, n in (("zero 16 KB of flags", 4096), ("fill 4 MB of words", 2**20), ("fill 16 MB of words", 2**22)):
        scratch = torch.empty(n, dtype=torch.int32, device=dev)
        fill = (lambda: scratch.zero_()) if what.startswith("zero") else (lambda: scratch.fill_(-1))
        print(f"# {what}: {device_us(fill):.2f} us", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="discounted_returns,gae,linear_scan")
    ap.add_argument("--shapes", default="4096x2048,16384x512")
    ap.add_argument("--heavy", default="vtrace", help="ops run in the HEAVY variants only")
    ap.add_argument("--variants", default="LIGHT", choices=("LIGHT", "REGISTERS", "CHAIN"),
                    help="the light ops' variants")
    args = ap.parse_args()
    fl = floors.measure(torch.device("cuda"), quick=True)
    print(f"# copy bandwidth {fl.bandwidth / 1e12:.2f} TB/s", flush=True)
    _fills(torch.device("cuda"))
    rows = []
    for shape in args.shapes.split(","):
        N, T = map(int, shape.split("x"))
        for op in args.ops.split(","):
            rows += measure(op, N, T, globals()[args.variants], fl)
        for op in filter(None, args.heavy.split(",")):
            rows += measure(op, N, T, HEAVY, fl)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}: "
          "device time, x bandwidth floor, x the shipped call")
    for shape in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == shape]
        shipped = mine[0][2]
        print(f"  {shape}: " + ", ".join(f"{r[1]} {r[2]:.1f} ({r[3]:.2f}x, ×{shipped / r[2]:.2f})" for r in mine))


if __name__ == "__main__":
    main()
