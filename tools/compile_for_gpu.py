"""The compile matrix: compile every kernel rlscan would launch on an H100/H200 (sm_90) or an
A100 (sm_80), on a machine with no GPU, under whichever Triton is importable.

What it checks: Triton's front end, its MLIR passes and the bundled ptxas need no device,
so this catches what the interpreter cannot: code the interpreter runs as Python but the
compiler refuses (non-constexpr globals, Python calls inside jit code, layouts a Triton
version cannot lower). It launches nothing. The public ops are called
(``tools/op_cases.py``) at shapes that reach every branch of the launch heuristic, with the
GPU's SM count faked (132 for sm_90, 108 for sm_80), in every layout, flag dtype and dtype,
forward, backward and in exact mode; every setting a launch plan may run for a call (its
candidates, down to the sequential kernel it falls back to) is compiled, each distinct
(kernel, constexprs, signature, target) once.

When to run it: after changing a kernel or a launch setting, and before widening the
supported Triton range (run it under each Triton: ``PYTHONPATH=<folder with that Triton>``).
CI runs its ``ci`` matrix under every Triton of the range
(``integration_tests/test_gpu_compile.py``)::

    python tools/compile_for_gpu.py                       # the full matrix, sm_90 and sm_80
    python tools/compile_for_gpu.py --target sm_80 --group backward
    python tools/compile_for_gpu.py --matrix small        # every branch, fewer layouts/dtypes
    python tools/compile_for_gpu.py --matrix ci --once-per-setting   # each setting for one call
    python tools/compile_for_gpu.py --list                # the cases and settings, no compiling

What it prints: per target, the launch settings reached, one ``FAIL`` line per kernel that
did not compile, and ``sm_90: Triton X: compiled K kernels for C calls in S s (...); F
failures``; the last line reads ``Triton X: F failures``. ``--json PATH`` writes the counts,
settings and failures; ``RLSCAN_COMPILE_LOG=1`` prints each compile's time. It exits 1 on
any failure.

Groups: ``forward`` (fp32, every op, shape, layout and flag dtype), ``dtypes`` (fp16, bf16,
fp64), ``backward`` (the fused backward kernels), ``exact``, ``deterministic`` (under
``torch.use_deterministic_algorithms``), ``forced`` (settings only tests and benchmarks
force), ``wide`` (64-bit offsets), ``masked`` (the step-skip mask: GAE's one pass with the
whitening's sums, its two scans, TD(λ), discounted returns, and ``masked_whiten``'s kernels;
retrace_from_q's table prologue is compiled wherever that op runs), ``packed`` (packed sequences,
``cu_seqlens``: each op's tile kernel at each tile length, its exact kernel, the mask dtypes,
the coefficients' forms, float64, 64-bit positions, and the whitening of its sums).
Compiled kernels are cached by Triton (``TRITON_CACHE_DIR``), so a rerun compiles only what changed.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

import rlscan  # noqa: E402
import rlscan._backend as _backend  # noqa: E402
from rlscan import _cache  # noqa: E402
from rlscan._triton import launch as L  # noqa: E402
from rlscan.ops.discounted_returns import kept_returns  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_cases import DTYPES, FUSED_BACKWARD, LAYOUTS, OPS, backward, make_case, setting_name  # noqa: E402

TARGETS = {"sm_90": (90, 132), "sm_80": (80, 108)}  # compute capability, SMs (H100/H200 SXM, A100)

# (N, T) reaching each branch of launch._gpu_configs, in [T, N] and in [N, T]: time-contiguous
# tiles (chunked for few environments), short T by environment tiles, the sequential layout
# (65536 x 8, 1 x 8), blocks and chained blocks (16384 x 16, 4096 x 2048), chained windows
# (16 x 262144, and [T, N] 512 x 2048), one long sequence in two launches (1 x 262144) and in
# one pass (1 x 1,000,000)
SHAPES = ((4096, 128), (16384, 16), (512, 2048), (4096, 2048), (16, 262144), (1, 1000000), (1, 262144),
          (65536, 8), (1, 8), (8, 16), (1024, 256))
# what the smaller matrix runs: the ops of light and heavy kernels, each branch in both
# orientations; the six ops with flags in both 1-byte dtypes where time tiles are chunked
SMALL_OPS = ("gae", "vtrace", "linear_scan forward")
# Triton takes 3-5 minutes to compile each of retrace_from_q's fused chained and block kernels
# (its reduction over actions, unrolled over every step a thread holds; the exact path, and the
# fallback where the table prologue fails): the matrix skips that op at those shapes
SLOW_TO_COMPILE = {"retrace_from_q": ((4096, 2048), (16384, 16), (16, 262144), (65536, 8))}
FLAG_OPS = ("gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "retrace_from_q")

# settings only tests and benchmarks force (the heuristic never picks them as they are)
FORCED = [
    ("scan pipelined", dict(kind="scan", block_t=16, block_b=8, num_warps=4, stages=3, unroll=2)),
    ("stripe windows", dict(kind="stripe", stripes=4, steps=4, block_b=8, num_warps=1)),
    ("stripe pipelined", dict(kind="stripe", stripes=1, steps=1, block_b=32, num_warps=1, stages=4, n_chunks=3)),
    ("block chunked", dict(kind="block", stripes=2, steps=8, block_b=16, num_warps=1, n_chunks=3)),
    ("block by shuffles", dict(kind="block", stripes=2, steps=4, block_b=8, num_warps=1, step_scan="shuffles")),
    ("chained look-back", dict(kind="chained", stripes=1, steps=2, block_b=16, num_warps=1, test_lookback=True)),
    ("chained window", dict(kind="chained", stripes=1, steps=8, block_b=16, num_warps=1, lookback=4)),
    ("chained two per thread", dict(kind="chained", stripes=1, steps=2, block_b=64, num_warps=1, lookback=4)),
    ("chained stripes", dict(kind="chained", stripes=64, steps=8, block_b=16, num_warps=8, step_scan="shuffles")),
    ("chained stripe flags", dict(kind="chained_stripe", stripes=2, steps=4, block_b=16, num_warps=1, lookback=4)),
    ("chained words", dict(kind="chained", stripes=1, steps=8, block_b=128, num_warps=1, lookback=4, link="words")),
    ("chained stripe words", dict(kind="chained_stripe", stripes=4, steps=4, block_b=16, num_warps=4, lookback=4,
                                  link="words")),
    ("chained scan flags", dict(kind="chained_scan", block_t=64, block_b=4, num_warps=2, lookback=4)),
]


# what CI compiles under every Triton, for both targets: every launch setting the heuristic
# picks, at least once (light and heavy kernels, both orientations, forward and backward in
# time), each dtype and flag dtype, and the calls Triton 3.6 once failed on
CI = {
    "forward": [("gae", "TN", N, T, "fp32", "bool", "forward") for N, T in SHAPES]
    + [("gae", "NT", N, T, "fp32", "bool", "forward") for N, T in ((4096, 128), (16384, 16), (16, 262144), (4096, 2048),
                                                                   (65536, 8), (8, 16))]
    + [("discounted_returns", "TN", N, T, "fp32", "bool", "forward") for N, T in ((16384, 16), (1, 1000000))]
    + [("vtrace", "TN", N, T, "fp32", "bool", "forward") for N, T in ((4096, 2048), (16384, 16), (1, 1000000),
                                                                      (512, 2048))]
    + [("linear_scan forward", "TN", N, T, "fp32", "bool", "forward") for N, T in ((4096, 2048), (1, 8))]
    + [("gae", layout, 512, 2048, "fp32", flag, "forward") for layout in ("NT", "BT1") for flag in ("bool", "uint8")]
    + [("retrace", "BT1", 512, 2048, "fp32", "uint8", "forward")]
    + [("gae", "strided", 512, 2048, "fp32", "float", "forward")],
    "dtypes": [("gae", "NT", 512, 2048, "fp16", "bool", "forward"), ("gae", "TN", 4096, 2048, "bf16", "uint8", "forward"),
               ("gae", "TN", 4096, 2048, "fp64", "bool", "forward"),
               ("discounted_returns", "TN", 4096, 2048, "fp64", "bool", "forward"), ("gae", "NT", 1, 1000000, "fp64", "bool", "forward")],
    "backward": [("gae", "NT", 512, 2048, "fp32", "bool", "backward"), ("gae", "TN", 4096, 2048, "fp32", "bool", "backward"),
                 ("gae", "TN", 512, 2048, "fp32", "bool", "backward"),
                 ("vtrace", "TN", 512, 2048, "fp32", "bool", "backward")],
    "exact": [("gae", "TN", 512, 64, "fp32", "bool", "exact"), ("gae", "NT", 512, 64, "fp64", "uint8", "exact")],
    "deterministic": [("gae", "TN", N, T, "fp32", "bool", "deterministic") for N, T in ((4096, 2048), (16, 262144),
                                                                                          (1, 1000000))],
}


# the calls Triton 3.6.0 could not compile before the chunk pairs' tile had 16 rows
ALWAYS = [("forward", op, layout, 512, 2048, "fp32", flag, "forward") for op in ("gae", "retrace")
          for layout in ("NT", "BT1") for flag in ("bool", "uint8")]


class Spec(tuple):
    """One call: ``(group, op, layout, N, T, dtype, flag, mode)``, mode ``forward``,
    ``backward``, ``exact``, ``deterministic`` or a forced setting's name."""

    def label(self):
        group, op, layout, N, T, dtype, flag, mode = self
        return f"{op} {layout} {N}x{T} {dtype} {flag}-flags {mode}"


def matrix(group: str, size: str) -> list:
    """The calls of one group, ``size`` ``"full"``, ``"small"`` or ``"ci"``."""
    full = size == "full"
    out = []
    if size == "ci":
        return [Spec((group,) + c) for c in CI.get(group, ())]

    def add(op, layout, N, T, dtype="fp32", flag="bool", mode="forward"):
        if (N, T) in SLOW_TO_COMPILE.get(op, ()) and layout not in ("NT", "BT1", "strided"):
            return
        out.append(Spec((group, op, layout, N, T, dtype, flag, mode)))

    if group == "forward":
        for N, T in SHAPES:
            for op in OPS if full else SMALL_OPS:
                for layout in LAYOUTS if full else ("TN", "NT"):
                    for flag in ("bool", "uint8", "float") if full else ("bool",):
                        if op.startswith("linear_scan") and flag != "bool":
                            continue  # no flags
                        add(op, layout, N, T, flag=flag)
        if not full:  # the calls Triton 3.6 could not compile before the chunk tile had 16 rows
            for op in FLAG_OPS:
                for layout in ("NT", "BT1"):
                    for flag in ("bool", "uint8"):
                        add(op, layout, 512, 2048, flag=flag)
    elif group == "dtypes":
        shapes = ((512, 2048), (4096, 2048), (1, 1000000), (16384, 16)) if full else ((512, 2048), (4096, 2048))
        for dtype in ("fp16", "bf16", "fp64"):
            for N, T in shapes:
                for op in OPS if full else ("gae", "vtrace"):
                    for layout in ("TN", "NT"):
                        add(op, layout, N, T, dtype)
        if not full:
            add("gae", "NT", 1, 1000000, "fp64")  # one long sequence without words
    elif group == "backward":
        for N, T in SHAPES:
            for op in FUSED_BACKWARD if full else ("gae", "vtrace"):
                for layout in ("TN", "NT", "BT1") if full else ("TN", "NT"):
                    add(op, layout, N, T, mode="backward")
        for op in FUSED_BACKWARD if full else ("gae",):
            add(op, "strided", 512, 2048, "fp64", "uint8", mode="backward")
            add(op, "TN", 4096, 2048, "bf16", "float", mode="backward")
    elif group == "exact":
        for op in OPS if full else ("gae", "vtrace", "retrace_from_q"):
            for layout in ("TN", "NT"):
                for N, T in ((512, 64), (1, 64)):
                    add(op, layout, N, T, mode="exact")
            add(op, "TN", 512, 64, "fp64", mode="exact")
    elif group == "deterministic":
        for op in OPS if full else ("gae", "vtrace", "linear_scan forward"):
            for N, T in ((4096, 2048), (16, 262144), (1, 1000000)):
                add(op, "TN", N, T, mode="deterministic")
    elif group == "forced":
        for op in ("gae", "vtrace", "retrace_from_q") if full else ("gae",):
            for name, _ in FORCED:
                add(op, "TN", 8, 64, mode=name)
    elif group == "wide":
        for op in OPS if full else ("gae",):
            add(op, "TN", 4096, 2048)
            add(op, "NT", 512, 2048)
    else:
        raise ValueError(f"unknown group {group!r}")
    return out


def masked_calls(N: int, T: int) -> dict:
    """The step-skip mask's calls, ``[N, T]`` like verl's responses (bf16 values)."""
    r, vb = torch.empty(N, T), torch.empty(N, T, dtype=torch.bfloat16)
    mask = torch.ones(N, T, dtype=torch.bool)
    boot, term, g = torch.empty(N), torch.zeros(N, T, dtype=torch.bool), torch.full((N, T), 0.9)
    return {
        "gae masked one pass": lambda: rlscan.gae(r, vb, mask=mask, time_dim=1, whiten=True, lmbda=0.95),
        "gae masked bootstrap": lambda: rlscan.gae(r, vb, mask=mask.long(), time_dim=1, bootstrap_value=boot,
                                                   terminated=term, gamma=g, lmbda=0.9),
        "gae masked rows bootstrap": lambda: rlscan.gae(r, vb, mask=mask.long(), time_dim=1, bootstrap_value=boot,
                                                        terminated=term, lmbda=0.9),
        "gae masked rows float64": lambda: rlscan.gae(r.double(), r.double(), mask=mask, time_dim=1, lmbda=0.95),
        "gae masked two scans": lambda: rlscan.gae(r, r, mask=mask, time_dim=1, bootstrap_value=boot, lmbda=0.3),
        "td_lambda masked": lambda: rlscan.td_lambda(r, r, mask=mask, time_dim=1, bootstrap_value=boot,
                                                     terminated=term),
        "discounted_returns masked": lambda: rlscan.discounted_returns(r, mask=mask, time_dim=1, terminated=term),
        "reinforce++ one pass": lambda: kept_returns.returns_and_advantages(r, mask.long(), 0.99),
    }


MASKED_SHAPES = {"full": ((256, 4096), (64, 32768), (16, 64)), "small": ((256, 4096), (64, 32768)),
                 "ci": ((256, 4096), (64, 32768))}


def run_masked(compiler, size: str) -> None:
    """The masked calls (their one pass must not fall back) and masked_whiten's kernels."""
    from rlscan.ops.gae import one_pass

    compiler.always = True  # their kernels share settings with the unmasked calls' but not code
    for N, T in MASKED_SHAPES[size]:
        for name, call in masked_calls(N, T).items():
            compiler.case = f"{name} NT {N}x{T}"
            _cache.clear()
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - a call that fails before compiling
                compiler.failures.append(f"{compiler.case}: {type(exc).__name__}: {str(exc)[:300]}")
            for failed in (one_pass._failed, kept_returns._failed):  # one passes fall back on failure
                if failed:
                    compiler.failures.append(f"{compiler.case}: one pass: {failed[-1]}"[:400])
                    failed.clear()
    import triton.language as tl

    from rlscan._triton import whiten as W

    x, m, stats = torch.empty(5000), torch.ones(5000, dtype=torch.uint8), torch.zeros(3, dtype=torch.float64)
    sums = torch.zeros(3, 64, dtype=torch.float64)  # GAE's one pass gathers these
    for dtype, acc in ((torch.float32, tl.float32), (torch.bfloat16, tl.float32), (torch.float64, tl.float64)):
        xs = x.to(dtype)
        parts = torch.empty(9, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
        compiler.case, compiler.cfg = f"masked_whiten {dtype}", None
        compiler.compile(W.block_stats, (2,), (xs, m, parts, 5000, 3), dict(BLOCK=W.BLOCK, ACC=acc, num_warps=8))
        compiler.compile(W.finish, (1,), (parts, stats, 3, L.split(1e-8)), dict(BLOCK=W.FINISH_BLOCK, num_warps=4))
        # the write's three ways (statistics, masked, gathered sums) in float32, its plain way in the others
        ways = ((False, 0, stats), (True, 0, stats), (False, 64, sums)) if dtype == torch.float32 else ((False, 0, stats),)
        for times_mask, slots, st in ways:
            compiler.compile(W.apply, (2,), (xs, xs, st, m, 5000, L.split(1e-8)),
                             dict(SHIFT=True, TIMES_MASK=times_mask, SLOTS=slots, BLOCK=W.BLOCK, ACC=acc, num_warps=8))


def packed_calls() -> dict:
    """The packed sequences' kernel launches (``rlscan._triton.packed.launch``): each op in
    tile and exact mode, and around GAE, each tile length (the mean sequence length picks
    it), mask dtype, coefficient form, dtype and 64-bit positions."""
    from rlscan._triton import packed

    def batch(S=64, mean=2048, dtype=torch.float32, values=torch.bfloat16, mask=torch.bool, cu=torch.int32):
        N = S * mean
        return dict(cu_seqlens=torch.zeros(S + 1, dtype=cu), rewards=torch.empty(N, dtype=dtype),
                    values=torch.empty(N, dtype=values), mask=None if mask is None else torch.ones(N, dtype=mask),
                    terminated=torch.zeros(S, dtype=torch.bool), bootstrap_value=torch.empty(S, dtype=dtype),
                    compute_dtype=torch.float64 if dtype == torch.float64 else torch.float32)

    calls = {}
    for kind in packed.KINDS:
        for exact in (False, True):
            sums = kind == "kept_returns" or (kind == "gae" and not exact)
            calls[f"{kind} {'exact' if exact else 'tiles'}"] = (
                kind, dict(batch(), gamma=0.99, lmbda=0.95, exact=exact, sums=sums))
    S = 64
    for mean in (128, 512, 1024):
        calls[f"gae tiles of {mean}"] = ("gae", dict(batch(mean=mean), gamma=0.99, lmbda=0.95))
    calls["gae no mask"] = ("gae", dict(batch(mask=None), gamma=0.99, lmbda=0.95))
    calls["gae int64 mask, int64 offsets"] = ("gae", dict(batch(mask=torch.int64, cu=torch.int64), gamma=0.99,
                                                          lmbda=0.95))
    calls["gae float mask, fp32 values"] = ("gae", dict(batch(mask=torch.float32, values=torch.float32), gamma=0.99,
                                                        lmbda=0.95))
    calls["gae gamma per sequence, lmbda per token"] = ("gae", dict(batch(), gamma=torch.full((S,), 0.99),
                                                                    lmbda=torch.full((S * 2048,), 0.95)))
    calls["td_lambda gamma per token"] = ("td_lambda", dict(batch(), gamma=torch.full((S * 2048,), 0.99), lmbda=0.95))
    calls["gae float64"] = ("gae", dict(batch(dtype=torch.float64, values=torch.float64), gamma=0.99, lmbda=0.95,
                                        sums=True))
    calls["gae float64 exact"] = ("gae", dict(batch(dtype=torch.float64, values=torch.float64), gamma=0.99,
                                              lmbda=0.95, exact=True))
    calls["discounted_returns float64"] = ("discounted_returns", dict(batch(dtype=torch.float64), gamma=0.99))
    calls["gae 64-bit positions"] = ("gae", dict(batch(), gamma=0.99, lmbda=0.95, wide=True))
    calls["gae pipelined (tools/packed_gpu.py's sweep)"] = ("gae", dict(batch(), gamma=0.99, lmbda=0.95, stages=3))
    for kind in packed.KINDS:  # long sequences in chunks: the numbering and both phases
        calls[f"{kind} in chunks"] = (kind, dict(batch(), gamma=0.99, lmbda=0.95, sums=kind in ("gae", "kept_returns"),
                                                 chunk=packed.CHUNK))
    calls["gae in chunks, float64, no mask"] = ("gae", dict(batch(dtype=torch.float64, mask=None), gamma=0.99,
                                                            lmbda=0.95, chunk=packed.CHUNK))
    calls["td_lambda in chunks, tensor coefficients, 64-bit"] = (
        "td_lambda", dict(batch(), gamma=torch.full((S,), 0.99), lmbda=torch.full((S * 2048,), 0.95),
                          chunk=packed.CHUNK, wide=True))
    return calls


def run_packed(compiler) -> None:
    """The packed sequences' kernels (every call), and the whitening from their sums."""
    import triton.language as tl

    from rlscan._triton import packed
    from rlscan._triton import whiten as W

    compiler.always, compiler.cfg = True, None
    reaches_far = packed.reaches_far
    try:
        for name, (kind, kwargs) in packed_calls().items():
            compiler.case = f"packed {name}"
            wide = kwargs.pop("wide", False)
            packed.FORCE_STAGES = kwargs.pop("stages", None)
            packed.FORCE_CHUNK = kwargs.pop("chunk", 0)
            packed.reaches_far = (lambda N: True) if wide else reaches_far
            _cache.clear()
            try:
                packed.launch(kind, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a call that fails before compiling
                compiler.failures.append(f"{compiler.case}: {type(exc).__name__}: {str(exc)[:300]}")
    finally:
        packed.reaches_far, packed.FORCE_STAGES, packed.FORCE_CHUNK = reaches_far, None, None
    sums = torch.zeros(3, 64, dtype=torch.float64)
    for dtype, acc in ((torch.float32, tl.float32), (torch.float64, tl.float64)):
        x = torch.empty(5000, dtype=dtype)
        for mask in (None, torch.ones(5000, dtype=torch.uint8), torch.ones(5000, dtype=torch.int64),
                     torch.ones(5000)):
            compiler.case = f"packed whitening {dtype} mask {None if mask is None else mask.dtype}"
            compiler.compile(W.apply, (2,), (x, x, sums, x if mask is None else mask, 5000, L.split(1e-8)),
                             dict(SHIFT=True, TIMES_MASK=mask is not None, SLOTS=64, BLOCK=W.BLOCK, ACC=acc,
                                  num_warps=8))


GROUPS = ("forward", "dtypes", "backward", "exact", "deterministic", "forced", "wide", "masked", "packed")


class Compiler:
    """Compiles kernels for one target, each distinct one once."""

    def __init__(self, target: str, dry: bool = False, once_per_setting: bool = False):
        cc, self.n_sm = TARGETS[target]
        self.name, self.target, self.dry = target, GPUTarget("cuda", cc, 32), dry
        self.backend = make_backend(self.target)
        self.done: dict = {}  # kernel key -> error text or None
        self.failures: list = []
        self.settings: set = set()
        self.seconds = 0.0
        self.case, self.cfg = "", None
        # once_per_setting: a setting's kernels compiled for one call stand for every other call
        # with that setting and the same way of taking the state carried in (``STATE_IN``),
        # except the calls of ALWAYS
        self.once_per_setting, self.always, self.settings_compiled = once_per_setting, False, set()

    def compile(self, fn, grid, args, kwargs) -> None:
        binder = create_function_from_signature(fn.signature, fn.params, self.backend)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(self.backend, kwargs, bound, specialization, options)
        if self.once_per_setting and not self.always and self.cfg is not None:
            by_setting = (fn.__name__, setting_name(self.cfg), kwargs.get("PHASE"), kwargs.get("STATE_IN"))
            if by_setting in self.settings_compiled:
                return
            self.settings_compiled.add(by_setting)
        src = ASTSource(fn, signature, constexprs, attrs)
        key = (src.hash(), tuple(sorted((k, str(v)) for k, v in options.__dict__.items())))
        if key not in self.done:
            error = None
            if not self.dry:
                start = time.perf_counter()
                try:
                    compile(src, target=self.target, options=options.__dict__)
                except Exception as exc:  # noqa: BLE001 - every failure is reported
                    lines = [x for x in str(exc).strip().splitlines() if x.strip()]
                    error = f"{type(exc).__name__}: {lines[-1] if lines else ''}"[:300]
                took = time.perf_counter() - start
                self.seconds += took
                if os.environ.get("RLSCAN_COMPILE_LOG"):
                    print(f"    {took:6.1f} s {fn.__name__} {setting_name(self.cfg) if self.cfg else '-'} phase {kwargs.get('PHASE')} "
                          f"[{self.case}]", flush=True)
            self.done[key] = error
        if self.done[key] is not None:
            what = {k: v for k, v in kwargs.items() if k not in ("COEFFS", "EMIT")}
            self.failures.append(f"{self.case}: {fn.__name__} {what}: {self.done[key]}")

    def plan_call(self, plan, ins, outs, scalars) -> None:
        """In place of a launch: compile every setting the plan may run, each phase."""
        plan._scalars, plan._parts = scalars, tuple(L.split(float(x)) for x in scalars)
        for cfg in plan.candidates:
            plan._use(cfg)
            self.cfg = plan.cfg
            self.settings.add(setting_name(plan.cfg))
            args = plan._args(ins, outs)
            for phase in plan.phases:
                self.compile(plan.fn, plan.grid[:2], args, dict(plan.constexprs, PHASE=phase, **plan.options))


@contextlib.contextmanager
def as_on_gpu(compiler: Compiler):
    """Calls plan launches as on a GPU of ``compiler``'s target, compiling instead of launching."""
    import rlscan.whiten
    from rlscan._triton import packed
    from rlscan.ops.gae import one_pass
    from rlscan.ops.retrace import table

    choose, call, path_for = L.choose_configs, L.LaunchPlan.__call__, _backend.path_for
    prologue, whitening, rows = table.TablePlan._launch, rlscan.whiten.apply_whitening, one_pass._launch_rows
    packed_launch = packed._launch
    sm = dict(L._SM_COUNT)
    L._SM_COUNT[0] = compiler.n_sm
    L.choose_configs = lambda T, B, tc, exact, device, *a, **k: choose(T, B, tc, exact, torch.device("cuda", 0), *a,
                                                                       **k)
    L.LaunchPlan.__call__ = lambda plan, ins, outs, scalars: compiler.plan_call(plan, ins, outs, scalars)
    _backend.path_for = lambda device_type, what="": "triton"

    def compile_prologue(plan, args):  # retrace_from_q's table prologue, before its inner plan
        compiler.cfg = plan.cfg
        compiler.compile(table.table_prologue_kernel, plan.grid[:1], args, dict(plan.constexprs, num_warps=4))

    def compile_rows(signature, fn, grid, args, constexprs, warps, device_index):  # GAE's masked row kernels
        compiler.cfg = None
        compiler.compile(fn, grid[:1], args, dict(constexprs, num_warps=warps))

    table.TablePlan._launch = compile_prologue
    one_pass._launch_rows = compile_rows
    packed._launch = compile_rows  # the packed sequences' kernels (same arguments)
    rlscan.whiten.apply_whitening = lambda x, sums, **kw: x  # launches directly; run_masked compiles it
    try:
        yield
    finally:
        L.choose_configs, L.LaunchPlan.__call__, _backend.path_for = choose, call, path_for
        table.TablePlan._launch, rlscan.whiten.apply_whitening, one_pass._launch_rows = prologue, whitening, rows
        packed._launch = packed_launch
        L._SM_COUNT.clear()
        L._SM_COUNT.update(sm)


def run_spec(spec: Spec) -> None:
    group, op, layout, N, T, dtype, flag, mode = spec
    case = make_case(op, layout, N, T, DTYPES[dtype], flag, random=False)
    _cache.clear()
    forced = dict(FORCED).get(mode)
    if mode == "backward":
        backward(case)
    elif mode == "exact":
        case(exact=True)
    elif mode == "deterministic":
        previous = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            case()
        finally:
            torch.use_deterministic_algorithms(previous)
    elif forced is not None:
        with L.forced_config(**forced):
            case()
    else:
        case()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="repeatable; default both")
    parser.add_argument("--group", action="append", choices=GROUPS, help="repeatable; default all")
    parser.add_argument("--matrix", choices=("full", "small", "ci"), default="full")
    parser.add_argument("--list", action="store_true", help="list the calls and settings; compile nothing")
    parser.add_argument("--once-per-setting", action="store_true",
                        help="compile each launch setting for one call only (and every call Triton 3.6 failed on)")
    parser.add_argument("--json", help="write the counts, settings and failures here")
    opts = parser.parse_args(argv)
    if "wide" in (opts.group or ()):
        L._reach = lambda x: 2**31  # every launch takes its 64-bit offset path (inputs past 2**31 elements)
    groups = opts.group or [g for g in GROUPS if g != "wide"]
    specs = [s for g in groups if g not in ("masked", "packed") for s in matrix(g, opts.matrix)]
    report = dict(triton=triton.__version__, torch=torch.__version__, matrix=opts.matrix, groups=groups, targets={})
    failed = 0
    for target in opts.target or sorted(TARGETS, reverse=True):
        compiler = Compiler(target, dry=opts.list, once_per_setting=opts.once_per_setting)
        start = time.perf_counter()
        with as_on_gpu(compiler):
            for spec in specs:
                compiler.case, compiler.always = spec.label(), spec in ALWAYS
                try:
                    run_spec(spec)
                except Exception as exc:  # noqa: BLE001 - a call that fails before compiling
                    compiler.failures.append(f"{compiler.case}: {type(exc).__name__}: {str(exc)[:300]}")
            if "masked" in groups and not opts.list:
                run_masked(compiler, opts.matrix)
            if "packed" in groups and not opts.list:
                run_packed(compiler)
        wall = time.perf_counter() - start
        failed += len(compiler.failures)
        report["targets"][target] = dict(calls=len(specs), kernels=len(compiler.done), settings=sorted(compiler.settings),
                                         failures=compiler.failures, compile_s=round(compiler.seconds, 1),
                                         wall_s=round(wall, 1))
        if opts.list:
            for s in specs:
                print(" ", s.label())
        print(f"{target}: {len(specs)} calls, {len(compiler.settings)} launch settings:")
        for name in sorted(compiler.settings):
            print("   ", name)
        for f in compiler.failures:
            print("  FAIL", f)
        print(f"{target}: Triton {triton.__version__}: {'listed' if opts.list else 'compiled'} {len(compiler.done)} "
              f"kernels for {len(specs)} calls in {wall:.0f} s ({compiler.seconds:.0f} s compiling); "
              f"{len(compiler.failures)} failures", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"Triton {triton.__version__}: {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
