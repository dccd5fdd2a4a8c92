"""rlscan against rl-triton, the seed's library, and rlscan's launch settings side by side, by
device time on a GPU.

What it measures: the ``seed`` groups time rl-triton v0.1.3 itself (``import rl_triton``)
beside rlscan on the same tensors in one process: for each of rl-triton's ops
(``compute_gae``, ``compute_vtrace`` and ``compute_vtrace_fused``, ``compute_retrace`` and
``compute_retrace_fused``, ``compute_discounted_returns`` with and without a bootstrap,
``compute_lambda_returns``, ``compute_eligibility_traces``, ``compute_episodic_prefix_sum``),
inputs in rl-triton's form (``[N, T]`` float32, float 0/1 flags at 1% of steps), rlscan's call
mapped from the same arguments with the same semantics (``tools/seed_ops.py``, argument by
argument; where the mapping runs arithmetic, such as V-trace's log-ratio, it runs inside the
timed call, and rlscan's own form of the problem is timed beside it). Before timing, every
call's outputs are checked against the float64 truth of the mapped call (``rlscan.reference``,
or rlscan's exact path in float64 past 2M elements): a wrong call (or a wrong mapping) is
reported and timed as NaN. rl-triton's fastest function is the yardstick; a cell is won where
rlscan's device time is at most 1.0x it. The other groups time rlscan alone: Retrace from the
action tables beside plain Retrace plus one read of the tables (``retrace_tables``), and launch
settings side by side (the rest), the table of record also by full call; backward variants
(``state_in``) by the device time of the backward call's kernels (``torch.profiler``, mean of
10). Their inputs: float32, terminations at 1% of steps as float flags, a bootstrap value, γ
0.99, λ 0.95, each variant checked against a float64 truth before it is timed. Device time is
a CUDA-graph replay of up to 20 calls, median of 10 (``rlscan.bench.timing``).

rl-triton is a yardstick, never a dependency: install it beside rlscan (``pip install --no-deps
/work/shared/rl-triton-0.1.3``). On a device machine the checkout travels without
``../shared``: copy the folder into the git-ignored ``.device/`` first (``cp -r
/work/shared/rl-triton-0.1.3 .device/rl-triton``), carry ``.device/rl-triton`` with the call,
and there run ``python -m pip install --no-deps --no-build-isolation ./.device/rl-triton``
(or, where pip cannot build it, put ``.device/rl-triton/src`` on ``PYTHONPATH``: it is pure
Python). Without it the ``seed`` groups print that rl-triton is not installed, the other
groups run, and the exit status is 3.

When to run it: on a CUDA GPU, after changing a kernel or a launch setting::

    python tools/seed_compare.py seed                    # rl-triton itself at the [N, T] cells of record
    python tools/seed_compare.py seed seed_tn retrace_tables --budget 150   # what tools/gpu_record.py runs
    python tools/seed_compare.py seed_truncated          # rl-triton's truncation forms
    python tools/seed_compare.py quick                   # a few shapes of Retrace from the tables and whole-row tiles
    python tools/seed_compare.py record --budget 120     # rlscan's table of record: every op at every shape
    python tools/seed_compare.py rows --budget 300       # [N, T] row tiles against the heuristic
    python tools/seed_compare.py mid_tn                  # [T, N] with 64-1000 environments: windows, blocks, tiles
    python tools/seed_compare.py mid_tn_backward         # their fused backward kernels
    python tools/seed_compare.py mid_tn_short            # the same batches with 256-512 steps
    python tools/seed_compare.py heavy_backward          # [T, N] backward kernels of 8+ series
    python tools/seed_compare.py light_windows           # [T, N] 512 x 2048, 256 x 4096: windows on more warps
    python tools/seed_compare.py heavy_backward --variants heuristic   # one variant of each group only
    python tools/seed_compare.py state_in                # how tiles take the state carried in, forward and backward
    python tools/seed_compare.py long_rows               # [N, T] rows of 4096+ steps: tiles chained, or split

What it prints: the copy bandwidth; per rl-triton cell one line (rlscan µs, rl-triton µs and
which function, the ratio and whether it is won, rlscan's own form, each call's error and
rl-triton's against rlscan's), and a table of those cells last with the count of ``[N, T]``
cells won; per shape of the other groups its bandwidth floor and one line per variant
(device µs, × floor, full-call µs, error, the settings the heuristic ran), then a summary of
the five fastest variants per shape. It writes every row to ``$OUT/seed.json``
(``./bench-out/seed.json`` without ``$OUT``) after every cell. ``--budget`` seconds: no cell
starts past it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from functools import partial

import torch
import triton

import rlscan
from rlscan import _cache
from rlscan.ops import REGISTRY
from rlscan import reference
from rlscan._triton import launch as L
from rlscan.bench import floors, timing, whole_row

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_ops  # noqa: E402

DEV = torch.device("cuda")
SHAPES = ((4096, 128), (16384, 16), (512, 2048), (4096, 2048), (16, 262144), (1, 1_000_000))
# the table of record's ops: every registered op with a fused backward (the linear scan is their
# engine), Retrace by its table form (the quick run times plain Retrace beside it)
OPS = tuple(op.name for op in REGISTRY if op.fused_backward and op.name != "retrace")
DEADLINE = [math.inf]


def problem(op, N, T, layout, A=4, seed=0):
    """``(function name, args, kwargs)`` of one call of the registered op ``op``, built from its
    arguments (``rlscan._spec.Arguments``); ``layout="nt"`` is ``[N, T]`` (time_dim=1)."""
    a = REGISTRY[op].arguments
    gen = torch.Generator(device=DEV).manual_seed(seed)
    shape = (N, T) if layout == "nt" else (T, N)
    randn = lambda *s: torch.randn(*s, generator=gen, device=DEV)  # noqa: E731
    rand = lambda *s: torch.rand(*s, generator=gen, device=DEV)  # noqa: E731
    kw = dict(time_dim=1 if layout == "nt" else 0)
    term = (rand(shape) < 0.01).float()
    boot = randn(N)
    args = {}
    for name in a.positional:
        if name in a.tables:
            args[name] = torch.softmax(randn(shape + (A,)), -1) if name == "target_probs" else randn(shape + (A,))
        elif name == a.actions:
            args[name] = torch.randint(0, A, shape, generator=gen, device=DEV)
        elif name == "behaviour_log_probs":
            pi_a = args["target_probs"].gather(-1, args[a.actions][..., None])[..., 0]
            args[name] = torch.log(pi_a) - 0.3 * randn(shape)
        elif name == "log_rhos":
            args[name] = 0.3 * randn(shape)
        else:
            args[name] = rand(shape) if name == a.multiplier else randn(shape)
    if a.value_after is not None:
        kw.update(bootstrap_value=boot, terminated=term)
    elif a.flags:
        kw[a.flags[0]] = term
    if a.initial:
        kw["initial"] = boot
    kw.update(zip(a.coefs, (0.99, 0.95)))
    return op, tuple(args.values()), kw


def moved_bytes(args, kwargs, n_out):
    tensors = [x for x in list(args) + list(kwargs.values()) if isinstance(x, torch.Tensor)]
    return sum(x.numel() * x.element_size() for x in tensors) + n_out * args[0].numel() * 4


def outputs(result):
    return tuple(result) if isinstance(result, tuple) else (result,)


def by_reference(args, kwargs):
    """Whether the float64 truth comes from the reference loop (else rlscan's exact kernel)."""
    return args[0].numel() <= 2_000_000 and args[0].shape[kwargs["time_dim"]] <= 16384


def truth(name, args, kwargs):
    if by_reference(args, kwargs):
        cpu = lambda x: x.cpu() if isinstance(x, torch.Tensor) else x  # noqa: E731
        want = getattr(reference, name)(*map(cpu, args), **{k: cpu(v) for k, v in kwargs.items()})
        return tuple(torch.as_tensor(w, dtype=torch.float64, device=DEV) for w in outputs(want))
    wide = lambda x: x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x  # noqa: E731
    return outputs(getattr(rlscan, name)(*map(wide, args), exact=True, **{k: wide(v) for k, v in kwargs.items()}))


def rel_err(got, want):
    worst = 0.0
    for g, w in zip(got, want):
        num = torch.linalg.vector_norm(g.double() - w).item()
        den = torch.linalg.vector_norm(w).item()
        e = num / den if den > 0 else num
        worst = max(worst, e if math.isfinite(e) else math.inf)
    return worst


def fresh():
    _cache.clear()


def time_variant(fn, want, full=False):
    """``(device µs, full-call µs or None, error)``; NaN times when the result is wrong."""
    err = rel_err(outputs(fn()), want)
    if not err < 1e-4:
        return math.nan, math.nan, err
    sync = timing.synchronizer(DEV)
    _, once = timing.timed_once(fn, sync)
    dev_us = 1e6 * timing.device_time(fn, one_call_s=once, target_s=0.02, repeat=10, max_calls=20).seconds
    if not full:
        return dev_us, None, err
    full_us = 1e6 * timing.full_call(fn, sync, one_call_s=once, target_s=0.05, repeat=5, max_calls=100).seconds
    return dev_us, full_us, err


def ran_settings():
    return "; ".join(f"{c.kind} b{c.block_b} t{c.block_t} {c.stripes}x{c.steps} w{c.num_warps} c{c.n_chunks} "
                     f"{c.link}" for c in (p.cfg for p in L.plans()))


ROWS = []


def emit(group, shape, label, dev_us, floor_us, err, full_us=None, ran=""):
    ROWS.append(dict(group=group, shape=shape, label=label, device_us=dev_us, full_us=full_us, floor_us=floor_us,
                     err=err, ran=ran))
    extra = f" full {full_us:8.1f}" if full_us is not None else ""
    print(f"  {label:30s} {dev_us:9.1f} us {dev_us / floor_us:5.2f}x floor{extra}  err {err:.1e} {ran}", flush=True)


def time_backward(name, args, kwargs, n_leaves, want):
    """``(device µs, error)`` of the backward call alone: the gradients of the first
    ``n_leaves`` inputs for fixed output gradients, its kernels' device time by
    ``torch.profiler`` (mean of 10 calls), checked against ``want`` (float64 gradients)."""
    from torch.profiler import ProfilerActivity, profile

    leaves = [a.detach().clone().requires_grad_() for a in args[:n_leaves]]
    outs = outputs(getattr(rlscan, name)(*leaves, *args[n_leaves:], **kwargs))
    gen = torch.Generator(device=DEV).manual_seed(1)
    grads = [torch.randn(o.shape, generator=gen, device=DEV) for o in outs]
    fn = lambda: torch.autograd.grad(outs, leaves, grads, retain_graph=True)  # noqa: E731
    err = rel_err(fn(), want(grads))
    if not err < 1e-4:
        return math.nan, err
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time for e in kernels) / 10, err


def grad_truth(name, args, kwargs, n_leaves):
    """The float64 gradients of the first ``n_leaves`` inputs on the CPU, for given output gradients."""
    cpu = lambda x: x.detach().cpu().double() if isinstance(x, torch.Tensor) and x.is_floating_point() else (  # noqa
        x.cpu() if isinstance(x, torch.Tensor) else x)
    leaves = [cpu(a).requires_grad_() for a in args[:n_leaves]]
    outs = outputs(getattr(rlscan, name)(*leaves, *map(cpu, args[n_leaves:]), **{k: cpu(v) for k, v in kwargs.items()}))

    def want(grads):
        got = torch.autograd.grad(outs, leaves, [g.cpu().double() for g in grads], retain_graph=True)
        return tuple(g.to(DEV) for g in got)
    return want


@contextlib.contextmanager
def variant(forced):
    """One variant's settings forced inside a ``with`` block (``None``: the heuristic), with
    no plan cached; a ``state_in`` entry sets ``launch.FORCE_STATE_IN``."""
    fresh()
    forced = dict(forced or {})
    L.FORCE_STATE_IN = forced.pop("state_in", None)
    try:
        with L.forced_config(**forced):
            yield
    finally:
        L.FORCE_STATE_IN = None


def run_backward_variants(group, op, N, T, layout, variants, A=4):
    """Each variant's backward call (the gradients of the floating inputs), timed alone."""
    name, args, kwargs = problem(op, N, T, layout, A)
    n_leaves = sum(1 for a in args if a.is_floating_point())
    want = grad_truth(name, args, kwargs, n_leaves)
    n_out = len(outputs(getattr(rlscan, name)(*args, **kwargs)))
    floor_us = (n_out + n_leaves) * args[0].numel() * 4 / BW[0] * 1e6
    shape = f"{op} backward {layout} {N}x{T}"
    print(f"# {shape} (floor {floor_us:.1f} us: the output gradients read, the input gradients written)", flush=True)
    for label, forced in variants.items():
        try:
            with variant(forced):
                dev_us, err = time_backward(name, args, kwargs, n_leaves, want)
                ran = ran_settings()
        except Exception as exc:  # noqa: BLE001 - a setting the compiler refuses is a result too
            print(f"  {label:30s} failed: {repr(exc)[:300]}", flush=True)
            continue
        emit(group, shape, label, dev_us, floor_us, err, None, ran)


def run_variants(group, op, N, T, layout, variants, A=4, full=False, backward=False):
    """Each variant: ``label -> forced settings`` (see :func:`variant`); with ``backward``,
    :func:`run_backward_variants`."""
    if time.monotonic() > DEADLINE[0]:
        print(f"# {op} {layout} {N}x{T}: skipped (out of time)", flush=True)
        return
    if backward:
        return run_backward_variants(group, op, N, T, layout, variants, A)
    name, args, kwargs = problem(op, N, T, layout, A)
    want = truth(name, args, kwargs)
    floor_us = moved_bytes(args, kwargs, len(want)) / BW[0] * 1e6
    shape = f"{op}{'' if op != 'retrace_from_q' else f' A={A}'} {layout} {N}x{T}"
    print(f"# {shape} (floor {floor_us:.1f} us)", flush=True)
    fn = lambda: getattr(rlscan, name)(*args, **kwargs)  # noqa: E731
    for label, forced in variants.items():
        chosen = not set(forced or {}) - {"state_in"}  # the heuristic chose the launch settings
        try:
            with variant(forced):
                dev_us, full_us, err = time_variant(fn, want, full and chosen)
                ran = ran_settings() if chosen else ""
        except Exception as exc:  # noqa: BLE001 - a setting the compiler refuses is a result too
            print(f"  {label:30s} failed: {repr(exc)[:300]}", flush=True)
            continue
        emit(group, shape, label, dev_us, floor_us, err, full_us, ran)
    if op == "retrace_from_q":  # plain Retrace on the same steps: the kernel the target adds the tables to
        q = args[1].gather(-1, args[2][..., None])[..., 0]
        e = (args[1] * args[3]).sum(-1)
        lr = torch.log(args[3].gather(-1, args[2][..., None])[..., 0]) - args[4]
        plain = (args[0], q, e, lr)
        fresh()
        p_fn = lambda: rlscan.retrace(*plain, **kwargs)  # noqa: E731
        p_want = truth("retrace", plain, kwargs)
        dev_us, full_us, err = time_variant(p_fn, p_want, full)
        tables_us = 2 * args[1].numel() * 4 / BW[0] * 1e6
        emit(group, shape, f"plain retrace (+tables {tables_us:.1f})", dev_us, floor_us, err, full_us)
        ROWS[-1]["tables_us"] = tables_us


BW = [0.0]


def _row_tile(T, warps=None, block_b=1):
    block_t = min(4096, triton.next_power_of_2(T))
    return dict(kind="scan", block_b=block_b, block_t=block_t, num_warps=warps or whole_row.warps_for(block_t),
                n_chunks=1)


HEURISTIC = {"heuristic": None}
ROW_TILE = "whole-row tile"  # rlscan's kernel with one row per program (no longer a target: rl-triton is)
ROW_1024 = dict(kind="scan", block_b=1, block_t=1024, num_warps=8, n_chunks=1)
OLD_MID = dict(kind="scan", block_b=4, block_t=256, num_warps=4, n_chunks=4)  # the earlier setting at 512 x 2048


def group_quick():
    """A short look: Retrace from the tables at three shapes (with full calls) and with 18
    actions, whole-row tiles beside the heuristic for GAE, V-trace and the episodic sum."""
    row = lambda T: {"heuristic": None, "row": _row_tile(T)}  # noqa: E731
    tasks = [("quick", "retrace_from_q", N, T, "nt", HEURISTIC, 4, True, False)
             for N, T in ((4096, 128), (512, 2048), (4096, 2048))]
    tasks.append(("quick", "retrace_from_q", 4096, 2048, "nt", HEURISTIC, 18, False, False))
    v = dict(row(2048), **{"b1 x1024 w8": ROW_1024})
    tasks.append(("quick", "gae", 512, 2048, "nt", v, 4, False))
    tasks.append(("quick", "vtrace", 4096, 2048, "nt", v, 4, False, False))
    tasks.append(("quick", "vtrace", 4096, 128, "nt", dict(row(128), **{"b2 row w4": _row_tile(128, 4, 2)}),
                  4, False, False))
    tasks.append(("quick", "episodic_cumsum", 4096, 2048, "nt", v, 4, False, False))
    return tasks


def group_record():
    """rlscan's table of record: every op at the benchmark shapes, [N, T] (with whole-row
    tiles and full calls; the earlier setting beside the heuristic at 512 x 2048), then
    [T, N] (one-pass chained settings beside it for GAE and V-trace at 512 x 2048), then
    Retrace from the tables with 18 actions."""
    tasks = []
    nt = [(512, 2048), (4096, 2048), (4096, 128), (16384, 16)]
    for (N, T) in nt:
        for op in OPS:
            v = dict(HEURISTIC, **({"before (b4 t256 c4)": OLD_MID} if (N, T) == (512, 2048) else {}))
            if op != "retrace_from_q":  # its target: plain Retrace + the tables read
                v[ROW_TILE] = _row_tile(T)  # one whole row per program, through rlscan's kernel
            tasks.append(("record", op, N, T, "nt", v, 4, True))
    for (N, T) in ((512, 2048), (4096, 2048), (1024, 2048), (4096, 128)):
        for op in OPS:
            v = dict(HEURISTIC)
            if (N, T) == (512, 2048) and op in ("gae", "vtrace"):  # one pass, as for N >= 4096
                v.update({f"chained {bb}x{steps} words": _blocks(bb, steps)
                          for bb, steps in ((64, 32), (32, 32), (32, 16))})
            tasks.append(("record", op, N, T, "tn", v, 4, True, False))
    for (N, T) in nt:
        tasks.append(("record", "retrace_from_q", N, T, "nt", HEURISTIC, 18, False, False))
    for (N, T) in SHAPES[4:]:
        for op in OPS:
            tasks.append(("record", op, N, T, "nt", HEURISTIC, 4, True))
    return tasks


def _tiles(block_b, block_t, warps):
    return dict(kind="scan", block_b=block_b, block_t=block_t, num_warps=warps, n_chunks=1)


def group_rows():
    """Row tiles for ``[N, T]``: the heuristic beside one row per program (whole or in
    1024-step tiles, 8-32 warps), two rows, and 4-row tiles of 256 steps, for the light and
    heavy ops at the shapes where rl-triton's design (a whole row per program) is the bar."""
    long_rows = {"heuristic": None, "b1 t2048 w16": _tiles(1, 2048, 16), "b1 t2048 w32": _tiles(1, 2048, 32),
                 "b1 t2048 w8": _tiles(1, 2048, 8),
                 "b1 t1024 w8": _tiles(1, 1024, 8), "b1 t1024 w16": _tiles(1, 1024, 16),
                 "b2 t1024 w8": _tiles(2, 1024, 8), "b4 t256 w4": _tiles(4, 256, 4)}
    short_rows = {"heuristic": None, "b1 t128 w1": _tiles(1, 128, 1), "b1 t128 w2": _tiles(1, 128, 2),
                  "b2 t128 w2": _tiles(2, 128, 2), "b4 t128 w4": _tiles(4, 128, 4)}
    tasks = []
    for N, T, variants in ((512, 2048, long_rows), (4096, 2048, long_rows), (4096, 128, short_rows)):
        for op in ("gae", "discounted_returns", "vtrace", "episodic_cumsum", "retrace_from_q"):
            tasks.append(("rows", op, N, T, "nt", variants, 4, False))
    return tasks


def _windows(block_b, stripes, steps, warps, lookback):
    return dict(kind="chained_stripe", block_b=block_b, stripes=stripes, steps=steps, num_warps=warps,
                lookback=lookback, link="words")


def _blocks(block_b, steps):
    """Chained blocks: ``block_b`` environments on one warp, ``steps`` steps in each thread,
    pairs as words read one at a time."""
    return dict(kind="chained", block_b=block_b, stripes=1, steps=steps, num_warps=1, lookback=1, link="words")


def _split_tiles(N, T, block_t):
    """16-wide tiles of ``block_t`` steps on 4 warps, time split for about 4 programs per SM
    (two launches)."""
    n_chunks = max(1, min(T // block_t, math.ceil(4 * 132 / math.ceil(N / 16))))
    return dict(kind="scan", block_b=16, block_t=block_t, num_warps=4, n_chunks=n_chunks)


def _before_windows(N, T, steps):
    """The setting of ``[T, N]`` calls before their chained windows: from 512 environments,
    64-wide chained blocks of ``steps`` steps (32 for kernels of up to 5 series, else 16);
    below, 16-wide tiles of 256 steps split in time."""
    return _blocks(64, steps) if N >= 512 else _split_tiles(N, T, 256)


def group_mid_tn():
    """``[T, N]`` with 64 to about a thousand environments and long T, where blocks of 64
    environments leave long chains: the heuristic (``chained_stripe``: windows of 64-128
    steps folded, chained, run again from cache) beside the settings before it (64-wide
    chained blocks from 512 environments, 256-step tiles split in time below) and other
    windows."""
    tasks = []
    for N, T in ((128, 2048), (256, 1024), (256, 4096), (512, 2048), (768, 2048), (64, 8192), (256, 16384)):
        for op, steps in (("gae", 32), ("vtrace", 16)):
            variants = {"heuristic": None, "before": _before_windows(N, T, steps),
                        "windows b32 8x16 w4 lb1": _windows(32, 8, 16, 4, 1),
                        "windows b32 8x8 w4 lb2": _windows(32, 8, 8, 4, 2),
                        "windows b16 16x16 w4 lb2": _windows(16, 16, 16, 4, 2)}
            tasks.append(("mid_tn", op, N, T, "tn", variants, 4, False, False))
    for N, T in ((512, 2048), (256, 4096)):
        for op in ("td_lambda", "discounted_returns", "retrace_from_q", "eligibility_traces", "episodic_cumsum"):
            before = _before_windows(N, T, 16 if op == "retrace_from_q" else 32)
            tasks.append(("mid_tn", op, N, T, "tn", {"heuristic": None, "before": before}, 4, False, False))
    return tasks


def group_mid_tn_backward():
    """The fused backward kernels of ``[T, N]`` calls with a few hundred environments, which
    take the same table class as the forward ones (up to 7 series): the heuristic beside the
    settings before the chained windows."""
    tasks = []
    for N, T in ((256, 4096), (512, 2048), (128, 2048)):
        for op, steps in (("gae", 32), ("vtrace", 16), ("td_lambda", 16), ("eligibility_traces", 32)):  # by series
            variants = {"heuristic": None, "before": _before_windows(N, T, steps)}
            tasks.append(("mid_tn_backward", op, N, T, "tn", variants, 4, False, True))
    return tasks


def group_mid_tn_short():
    """``[T, N]`` rows of 256-512 steps with a few hundred environments: the heuristic (64-step
    windows) beside the setting before them, one column of 128-step tiles per 16 environments."""
    variants = {"heuristic": None, "before (b16 t128)": dict(kind="scan", block_b=16, block_t=128, num_warps=4,
                                                              n_chunks=1)}
    return [("mid_tn_short", op, N, T, "tn", variants, 4, False, False)
            for N, T in ((256, 512), (512, 512), (128, 512), (512, 256)) for op in ("gae", "vtrace")]


def group_heavy_backward():
    """The fused backward kernels of V-trace, Retrace and GAE at ``[T, N]`` with 64-4096
    environments, 8 or more series for V-trace's and Retrace's: the heuristic (chained
    windows) beside the setting before it (tiles, 256 steps split in time from 1024 steps,
    which spill; at 4096 environments, the 128-wide blocks the spilling 64-wide chained ones
    fell to), windows of other sizes, 32-wide chained blocks of 8 steps and 64-step tiles."""
    variants = {"heuristic": None, "windows b32 8x8 w4 lb2": _windows(32, 8, 8, 4, 2),
                "windows b16 8x8 w4 lb2": _windows(16, 8, 8, 4, 2), "windows b32 8x4 w4 lb2": _windows(32, 8, 4, 4, 2),
                "blocks b32 s8": _blocks(32, 8)}
    tasks = []
    for N, T in ((128, 2048), (256, 4096), (512, 2048), (1024, 2048), (256, 512), (4096, 2048)):
        if N >= 4096:
            before = dict(kind="block", block_b=128, stripes=1, steps=4, num_warps=1, n_chunks=32)
        else:  # under 1024 steps, one column of 128-step tiles per 16 environments
            before = _tiles(16, 128, 4) if T < 1024 else _split_tiles(N, T, 256)
        v = dict(variants, **{"before": before, "tiles b16 t64 split": _split_tiles(N, T, 64)})
        tasks += [("heavy_backward", op, N, T, "tn", v, 4, False, True) for op in ("vtrace", "retrace", "gae")]
    return tasks


def group_light_windows():
    """``[T, N]`` at 512 x 2048 and 256 x 4096, where the target is 1.25x the ``[N, T]``
    time: the heuristic beside its windows on 8 warps, and with words read two at a time;
    the ``[N, T]`` call beside them."""
    variants = {"heuristic": None, "windows b32 8x16 w8 lb1": _windows(32, 8, 16, 8, 1),
                "windows b32 8x16 w4 lb2": _windows(32, 8, 16, 4, 2), "windows b32 8x16 w8 lb2": _windows(32, 8, 16, 8, 2),
                "windows b32 8x8 w8 lb2": _windows(32, 8, 8, 8, 2), "windows b32 8x8 w4 lb2": _windows(32, 8, 8, 4, 2)}
    tasks = []
    for N, T in ((512, 2048), (256, 4096)):
        for op in ("gae", "td_lambda", "discounted_returns", "eligibility_traces", "vtrace"):
            tasks.append(("light_windows", op, N, T, "tn", variants, 4, False, False))
            tasks.append(("light_windows", op, N, T, "nt", HEURISTIC, 4, False, False))
    return tasks


def group_rows_chained():
    """``[N, T]`` rows of 2048 steps: whole-row tiles beside tiles of 512-1024 steps chained
    along the row by a look-back (``chained_scan``), for the ops furthest from the seed's
    times."""
    chained = lambda t, w: dict(kind="chained_scan", block_b=1, block_t=t, num_warps=w, lookback=8,  # noqa: E731
                                link="words")
    variants = {"heuristic": None, "b1 t2048 w16": _tiles(1, 2048, 16), "b1 t2048 w4": _tiles(1, 2048, 4),
                "chained t1024 w4": chained(1024, 4), "chained t1024 w8": chained(1024, 8),
                "chained t512 w4": chained(512, 4), "chained t512 w2": chained(512, 2)}
    tasks = [("rows_chained", op, 512, 2048, "nt", variants, 4, False)
             for op in ("vtrace", "gae", "discounted_returns")]
    tasks.append(("rows_chained", "eligibility_traces", 4096, 2048, "nt", variants, 4, False, False))
    return tasks


def group_state_in():
    """The three ways a tile kernel takes the state carried into each step
    (``launch.state_in``), beside the heuristic: V-trace's forward, and the backward kernels
    of GAE, V-trace and the eligibility traces, at [N, T] shapes of whole-row tiles and of
    4-row tiles."""
    ways = dict(HEURISTIC, **{way: dict(state_in=way) for way in ("gather", "exclusive", "reload")})
    tasks = [("state_in", "vtrace", N, T, "nt", ways, 4, False, False) for N, T in ((512, 2048), (4096, 2048), (4096, 128))]
    for op in ("gae", "vtrace", "eligibility_traces"):
        tasks += [("state_in", op, N, T, "nt", ways, 4, False, True) for N, T in ((512, 2048), (4096, 2048))]
    return tasks


def group_long_rows():
    """``[N, T]`` rows longer than the whole-row tiles (verl's responses, long episodes): the
    heuristic (their table class chains 1024-step tiles by a look-back, in one launch) beside
    the setting before it, 4-row tiles of 256 steps split in time over two launches; every
    op forward, and the backward kernels of four ops."""
    tasks = []
    for N, T in ((64, 32768), (128, 16384), (256, 8192), (16, 262144)):
        before = dict(kind="scan", block_b=4, block_t=256, num_warps=4, n_chunks=T // 1024)
        variants = {"heuristic": None, "before (b4 t256 w4 split)": before}
        tasks += [("long_rows", op, N, T, "nt", variants, 4, False, False) for op in OPS]
        if (N, T) in ((64, 32768), (16, 262144)):
            tasks += [("long_rows", op, N, T, "nt", variants, 4, False, True)
                      for op in ("gae", "vtrace", "discounted_returns", "eligibility_traces")]
    return tasks


# ----------------------------------------------------------------------------- the seed's library

SEED_SHAPES = ((4096, 128), (16384, 16), (512, 2048), (4096, 2048))  # (N, T): the [N, T] cells of record
SEED_WON = 1.0  # rlscan's device time over rl-triton's at most this: the cell is won


def _device_us(fn):
    """``(device µs, method)`` of ``fn``: a CUDA-graph replay of up to 20 calls, median of 10."""
    sync = timing.synchronizer(DEV)
    _, once = timing.timed_once(fn, sync)
    t = timing.device_time(fn, one_call_s=once, target_s=0.02, repeat=10, max_calls=20)
    return 1e6 * t.seconds, t.method


def run_seed(op, N, T, layout, truncations=False):
    """One cell against rl-triton itself (``tools/seed_ops.py``): its inputs in rl-triton's form;
    rl-triton's functions for the op, rlscan's call mapped from the same arguments (and, where
    the mapping runs arithmetic, rlscan's own form prepared beforehand), each checked against
    the float64 truth of the mapped call before it is timed (a wrong one is timed as NaN)."""
    label = f"{op} {layout} {N}x{T}" + (" truncations" if truncations else "")
    if time.monotonic() > DEADLINE[0]:
        print(f"# {label}: skipped (out of time)", flush=True)
        return
    fresh()
    p = seed_ops.problem(op, N, T, layout, device=DEV, truncations=truncations)
    want = seed_ops.truth(p)
    calls = {name: ("rl-triton", fn) for name, fn in seed_ops.seed_calls(p).items()}
    calls["rlscan"] = ("rlscan", seed_ops.rlscan_call(p))
    if seed_ops.has_own(p):
        calls["rlscan own form"] = ("rlscan", seed_ops.rlscan_call(p, own=True))
    us, errs, outs, methods = {}, {}, {}, set()
    want = seed_ops.compared(p, "rlscan", want)
    for name, (side, fn) in calls.items():
        try:
            got = seed_ops.compared(p, side, fn())
            errs[name] = seed_ops.rel_err(got, want)
            outs[name] = got
            us[name] = math.nan
            if errs[name] < seed_ops.TOL:
                us[name], method = _device_us(fn)
                methods.add(method)
        except Exception as exc:  # noqa: BLE001 - a call that fails is a result of the cell
            errs[name], us[name] = math.inf, math.nan
            print(f"  {name}: failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    seeds = {k: v for k, v in us.items() if calls[k][0] == "rl-triton"}
    best = min(seeds, key=lambda k: seeds[k] if seeds[k] == seeds[k] else math.inf)
    between = seed_ops.rel_err(outs[best], outs["rlscan"]) if best in outs and "rlscan" in outs else math.inf
    ratio = us["rlscan"] / seeds[best]
    own = us.get("rlscan own form")
    row = dict(group="seed", op=op, seed_fn=seed_ops.OPS[op].name, layout=layout, N=N, T=T, truncations=truncations,
               shape=label, rlscan_us=us["rlscan"], rlscan_own_us=own, seed_us=seeds[best], seed_best=best,
               seed_variants=seeds, ratio=ratio, won=bool(ratio <= SEED_WON),
               won_own=None if own is None else bool(own / seeds[best] <= SEED_WON), errors=errs, between=between,
               method="; ".join(sorted(methods)))
    ROWS.append(row)
    wrong = [k for k, e in errs.items() if not e < seed_ops.TOL]
    print(f"  {label:40s} rlscan {us['rlscan']:8.1f} us | rl-triton {seeds[best]:8.1f} us ({best}) | "
          f"x{ratio:5.2f} {'won' if row['won'] else 'LOST'}"
          + (f" | own form {own:8.1f} us" if own is not None else "")
          + " | err " + ", ".join(f"{k} {e:.0e}" for k, e in errs.items()) + f", between {between:.0e}"
          + (f" | WRONG: {', '.join(wrong)} (against the float64 truth of the mapped call)" if wrong else ""),
          flush=True)


def group_seed():
    """rl-triton itself: every op of it at the ``[N, T]`` cells of record."""
    seed_ops.seed_library()
    return [partial(run_seed, op, N, T, "nt") for N, T in SEED_SHAPES for op in seed_ops.OPS]


def group_seed_tn():
    """rl-triton's ops on ``[T, N]`` storage, passed as ``[N, T]`` views: rl-triton copies them
    to ``[N, T]`` inside its call, rlscan reads them in place."""
    seed_ops.seed_library()
    return [partial(run_seed, op, N, T, "tn") for N, T in SEED_SHAPES for op in seed_ops.OPS
            if op != "discounted_returns_mc"]


def group_seed_truncated():
    """rl-triton's truncation forms (``truncateds`` and ``[N, T]`` bootstrap values) at the
    ``[N, T]`` cells of record."""
    seed_ops.seed_library()
    return [partial(run_seed, op, N, T, "nt", True) for N, T in SEED_SHAPES for op in seed_ops.TRUNCATING]


def group_retrace_tables():
    """Retrace from the action tables beside plain Retrace plus one read of the tables, at the
    ``[N, T]`` cells of record and ``[T, N]`` 512 x 2048."""
    return ([("retrace_tables", "retrace_from_q", N, T, "nt", HEURISTIC, 4, True) for N, T in SEED_SHAPES]
            + [("retrace_tables", "retrace_from_q", 512, 2048, "tn", HEURISTIC, 4, True)])


GROUPS = dict(seed=group_seed, seed_tn=group_seed_tn, seed_truncated=group_seed_truncated,
              retrace_tables=group_retrace_tables, quick=group_quick, record=group_record, rows=group_rows, rows_chained=group_rows_chained,
              mid_tn=group_mid_tn, mid_tn_backward=group_mid_tn_backward, mid_tn_short=group_mid_tn_short,
              heavy_backward=group_heavy_backward, light_windows=group_light_windows,
              state_in=group_state_in, long_rows=group_long_rows)


def write(out):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "seed.json"), "w") as f:
        json.dump(ROWS, f, indent=1)


def seed_table(rows) -> list:
    """The lines of the table of rl-triton's cells (``run_seed``'s rows)."""
    lines = ["| op (rl-triton's function) | layout | N x T | rlscan us | rl-triton us (fastest function) | ratio | won "
             "| rlscan own form us | won (own form) |", "|---|---|---|---:|---:|---:|---|---:|---|"]
    for r in rows:
        own = "" if r["rlscan_own_us"] is None else f"{r['rlscan_own_us']:.1f}"
        won_own = "" if r["won_own"] is None else ("yes" if r["won_own"] else "**no**")
        lines.append(f"| {r['op']} ({r['seed_fn']}) | {r['layout']}{' trunc' if r['truncations'] else ''} | "
                     f"{r['N']} x {r['T']} | {r['rlscan_us']:.1f} | {r['seed_us']:.1f} ({r['seed_best']}) | "
                     f"{r['ratio']:.2f} | {'yes' if r['won'] else '**no**'} | {own} | {won_own} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("groups", nargs="+", choices=sorted(GROUPS))
    ap.add_argument("--budget", type=float, default=math.inf, help="seconds; later shapes are skipped past it")
    ap.add_argument("--variants", help="comma-separated labels: time only these variants of each group")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("it times kernels on a CUDA GPU, and torch sees none here")
    DEADLINE[0] = time.monotonic() + args.budget
    out = os.environ.get("OUT", "bench-out")
    fl = floors.measure(DEV, quick=True)
    BW[0] = fl.bandwidth
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, "
          f"copy {fl.bandwidth / 1e12:.2f} TB/s", flush=True)
    tasks, missing = [], []
    for g in args.groups:
        try:
            tasks += GROUPS[g]()
        except seed_ops.SeedMissing as exc:
            missing.append(g)
            ROWS.append(dict(group=g, missing=str(exc)))
            print(f"# {g}: not run: {exc}", flush=True)
    if args.variants:
        keep = set(args.variants.split(","))
        tasks = [t if callable(t) else t[:5] + ({k: v for k, v in t[5].items() if k in keep},) + t[6:]
                 for t in tasks]
    for task in tasks:
        task() if callable(task) else run_variants(*task)
        write(out)  # after every cell: a run stopped from outside keeps what it measured
    write(out)
    seeds = [r for r in ROWS if r["group"].startswith("seed") and "missing" not in r]
    if seeds:
        nt = [r for r in seeds if r["layout"] == "nt" and not r["truncations"]]
        print("\nrl-triton itself (device us, CUDA-graph replays; won: rlscan <= 1.0x rl-triton):")
        print("\n".join(seed_table(seeds)))
        print(f"[N, T] cells won: {sum(r['won'] for r in nt)} of {len(nt)}", flush=True)
    rest = [r for r in ROWS if "label" in r]
    if rest:
        print("\nsummary: device us (x floor) per shape, best first")
    for shape in dict.fromkeys(r["shape"] for r in rest):
        mine = sorted((r for r in rest if r["shape"] == shape),
                      key=lambda r: r["device_us"] if r["device_us"] == r["device_us"] else math.inf)
        print(f"  {shape}: " + " | ".join(f"{r['label']} {r['device_us']:.1f}" for r in mine[:5]))
    if missing:
        print(f"\nnot run: {', '.join(missing)}: rl-triton is not installed ({seed_ops.INSTALL})", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
