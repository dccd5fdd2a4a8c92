"""Choosing launch settings for a shape, and launching the scan engine.

The strategy per shape is chosen by a measured heuristic (docs/perf-notes.md), never by
autotuning on the user's first call. Where it lists several settings, a launch plan
compiles them in order (without running them) and keeps the first whose kernel does not
spill registers:

* one environment with ``T <= 8``, backward in time: one step at a time, in one thread (the
  sequential layout);
* one sequence of at least 2**19 steps, in float32: ``chained_scan_kernel`` (one pass, tiles
  of 2048 steps on 4 warps, or 256 on one warp for kernels of more than 5 series, chained by
  words read 64 per round trip); otherwise, or under
  ``torch.use_deterministic_algorithms(True)``, the 512-step tiles below in two launches;
* inputs contiguous along time (``[N, T]``): ``scan_kernel`` with tiles of 256 steps (512
  for one very long sequence);
* inputs contiguous along environments (``[T, N]``): for ``8 <= T <= 16`` and ``N < 16384``,
  tiles of 8 environments, one warp each; one step at a time (128 environments per
  program) for ``T <= 8`` and wherever that alone makes three programs per SM
  (``N >= 50561`` on an H200); for ``N >= 4096, T >= 512``, one-warp programs with steps
  kept in each thread: ``chained_kernel`` (one pass, blocks chained by a decoupled
  look-back). First 64 environments per program whose pairs are published as one word each
  and read one at a time, with 32 steps for kernels of at most 5 series and 16 for bigger
  ones; then 128 environments and 16 steps, reading 4 predecessors at a time; 8 steps where
  16 spill; then one predecessor at a time backward in time, ``block_kernel`` forward; for
  ``N >= 16384, T <= 16``, ``block_kernel`` with every step in one thread (kernels of at
  most 5 series); for 16-64 environments and ``T >= 65536``, ``chained_stripe_kernel``
  (256-step windows of 16 environments, folded, chained by pairs published as one word
  each, read again to emit); otherwise by
  ``T``: 16-step tiles of 16 environments for ``T <= 16``, stripes of 4 steps up to
  ``T = 128``, and ``scan_kernel`` with narrow environment blocks (16, so more programs are
  in flight) beyond; under ``torch.use_deterministic_algorithms(True)``, neither chained
  kernel;
* too few environments to fill the GPU and ``T >= 1024``: time is also split into
  chunks run by separate programs, in two launches (reduce the chunks, then fold and emit);
* ``exact``: the stripe kernel with one step per stripe (a plain sequential loop) and
  fused multiply-adds off, in the reference loop's order.

A setting that this Triton cannot compile (or launch) is never the user's problem: the plan
warns once per setting and Triton version (:class:`CompileFallbackWarning`) and moves to the
next setting, down to the sequential kernel; where even that fails, the op runs on the CPU.

Launches skip Triton's generic ``JITFunction.run`` after the first call for a given
signature: a :class:`LaunchPlan` keeps the compiled kernel and calls its launcher
directly, passing Triton's launch hooks through.
"""
from __future__ import annotations

import contextlib
import math
from typing import NamedTuple, Optional

import numpy as np
import torch

from .._backend import interpreting


class Config(NamedTuple):
    kind: str  # "scan", "stripe", "block", "chained", "chained_scan" or "chained_stripe"
    block_b: int  # environments per program
    num_warps: int
    block_t: int = 1  # scan, chained_scan: rows of time per tile
    stripes: int = 1  # stripe: stripes per window
    steps: int = 1  # stripe: steps per stripe
    n_chunks: int = 1  # programs along time
    chunk_len: int = 0
    block_c: int = 1
    stages: int = 0  # > 1: software-pipeline the loads of this many tiles (``tl.range(num_stages=)``)
    unroll: int = 0  # > 1: unroll the loop over tiles this many times
    test_lookback: bool = False  # chained kinds, tests only: make the look-back compose published pairs
    step_scan: str = "registers"  # block, chained: scan the steps in each thread ("registers") or "shuffles"
    lookback: int = 1  # chained kinds: predecessors read per round trip of the look-back
    link: str = "flags"  # chained kinds: pairs published with flags, or as one word each ("words", float32 only)


CHAINED = ("chained", "chained_scan", "chained_stripe")  # one launch, windows chained by a decoupled look-back


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


_forced: Optional[dict] = None


@contextlib.contextmanager
def forced_config(**settings):
    """Force launch settings (``kind``, ``block_t``, ``block_b``, ``stripes``, ``steps``,
    ``n_chunks``, ``num_warps``, ``stages``, ``unroll``, ``test_lookback``, ``step_scan``,
    ``lookback``, ``link``) inside a ``with`` block; fields not named come from the kind's
    defaults (:func:`_forced_setting`). Tests use it to reach every kernel path with small
    shapes; the benchmarks use it to compare settings."""
    global _forced
    previous, _forced = _forced, settings
    try:
        yield
    finally:
        _forced = previous


def forced_settings():
    """The settings forced now (a hashable value), or ``None``."""
    return tuple(sorted(_forced.items())) if _forced else None


def settings_key():
    """What decides a launch besides the call's signature: the forced settings, and whether
    ``torch.use_deterministic_algorithms`` is on (it rules out the chained layout)."""
    return forced_settings(), torch.are_deterministic_algorithms_enabled()


_SM_COUNT: dict = {}


def _sm_count(device: torch.device) -> int:
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


def _window(cfg: Config) -> int:
    return cfg.block_t if cfg.kind in ("scan", "chained_scan") else cfg.stripes * cfg.steps


def _with_chunks(cfg: Config, T: int, n_chunks: int) -> Config:
    """Split ``T`` into about ``n_chunks`` chunks, each a whole number of windows (for the
    chained kernel, one window each: ``n_chunks`` is then ``⌈T / window⌉``)."""
    window = _window(cfg)
    if cfg.kind in CHAINED:
        return cfg._replace(n_chunks=math.ceil(T / window), chunk_len=window, block_c=1)
    chunk_len = math.ceil(math.ceil(T / max(1, n_chunks)) / window) * window
    n = max(1, math.ceil(T / chunk_len))
    return cfg._replace(n_chunks=n, chunk_len=chunk_len, block_c=_pow2(n))


def choose_configs(T: int, B: int, time_contiguous: bool, exact: bool, device: torch.device,
                   reverse: bool = True, series: int = 0, words: bool = True) -> tuple:
    """Launch settings for a ``[T, B]`` problem scanned backward in time (``reverse``) or
    forward, reading and writing ``series`` tensors of ``[T, B]`` (0: unknown), computed in
    float32 (``words``) or not, in order of
    preference: a launch plan runs the first whose compiled kernel keeps each thread's local
    memory (spilled registers) within ``MAX_LOCAL_BYTES``, and the last regardless. Forced
    settings replace them all."""
    if exact:
        block_b = min(128, _pow2(B))
        configs = (Config("stripe", block_b, max(1, min(4, block_b // 32)), chunk_len=T),)
    elif interpreting() or device.type != "cuda":
        configs = (Config("scan", min(16, _pow2(B)), 4, block_t=min(32, _pow2(T)), chunk_len=T),)
    else:
        configs = _gpu_configs(T, B, time_contiguous, _sm_count(device), reverse,
                               torch.are_deterministic_algorithms_enabled(), series, words)
    if _forced:
        configs = (_forced_setting(configs[0], T, _forced),)
    return configs


def _forced_setting(first: Config, T: int, forced: dict) -> Config:
    """``forced`` applied to the heuristic's first setting for a ``[T, ...]`` problem. A forced
    ``kind`` starts from that kind's defaults (keeping only the first setting's ``block_b``,
    ``num_warps`` and chunk count unless forced too), so a forced chained setting that names
    no ``link`` or ``lookback`` gets flags and one predecessor per round trip, whatever the
    heuristic would have run; without ``kind``, the forced fields replace the first setting's."""
    settings = {k: v for k, v in forced.items() if k != "n_chunks"}
    if "kind" in settings:
        cfg = Config(**{"block_b": first.block_b, "num_warps": first.num_warps, **settings})
    else:
        cfg = first._replace(**settings)
    return _with_chunks(cfg, T, forced.get("n_chunks", first.n_chunks))


def choose_config(T: int, B: int, time_contiguous: bool, exact: bool, device: torch.device,
                  reverse: bool = True) -> Config:
    """The preferred launch settings for a ``[T, B]`` problem (:func:`choose_configs`)."""
    return choose_configs(T, B, time_contiguous, exact, device, reverse)[0]


# Largest BLOCK_C * BLOCK_B tile of chunk pairs one program folds in registers.
_MAX_CHUNK_TILE = 4096
# Local memory per thread above which a kernel counts as spilling: GAE's chained kernel with
# 16 steps per thread kept 192 bytes (Triton 3.7's ptxas) and ran fastest; Retrace's kept 864
# and V-trace's 2,816, and ran 1.1x and 2.3x slower than with 8 steps (docs/perf-notes.md, run 18)
MAX_LOCAL_BYTES = 256


def _gpu_config(T: int, B: int, time_contiguous: bool, n_sm: int, reverse: bool = True,
                deterministic: bool = False) -> Config:
    """The preferred settings of :func:`_gpu_configs`."""
    return _gpu_configs(T, B, time_contiguous, n_sm, reverse, deterministic)[0]


def _gpu_configs(T: int, B: int, time_contiguous: bool, n_sm: int, reverse: bool = True,
                 deterministic: bool = False, series: int = 0, words: bool = True) -> tuple:
    """The settings that measured fastest on an H200 (docs/perf-notes.md), in order of preference.
    ``words``: the pairs fit in one 64-bit word each (float32), as the one-pass kernel for a
    single long sequence needs (its look-back reads 64 of them per round trip)."""
    if B == 1 and T >= 2**18:
        # one long sequence: 512-step tiles, about 4 chunks per SM, in two launches (1 x 1,000,000:
        # 15.5 against 21.4 us with 256-step tiles; scripts/h200_settings.py long)
        tiles = _split_time(Config("scan", 1, 4, block_t=512), T, B, n_sm)
        if T < 2**19 or not words or deterministic:
            return (tiles,)
        # from 2**19 steps in float32, first in one pass: tiles scanned across their threads,
        # chained by words read 64 per round trip (chained_scan_kernel). At 1 x 1,000,000 against
        # the two launches: 2048-step tiles on 4 warps 1.13-1.50x faster for GAE and discounted
        # returns; 256-step tiles on one warp 1.47x for V-trace and 1.12x for Retrace, whose kernels
        # spill with more steps per thread. At 1 x 262144 the two launches were as fast (runs
        # 47-49, scripts/h200_settings.py one_long)
        chained = Config("chained_scan", 1, 4, block_t=2048, lookback=64, link="words")
        if series > 5:
            chained = chained._replace(num_warps=1, block_t=256)
        return (_with_chunks(chained, T, 1), tiles)
    elif B == 1 and T <= 8 and reverse:
        # one environment, a few steps, backward in time: the sequential layout, one thread. At
        # 1 x 8, the 8-step tile lost to the sequential kernel for GAE, TD(λ), V-trace and
        # Retrace (run 24); this ran 1.01-1.05x as fast as the sequential kernel for the six
        # backward-time ops (run 35). Forward in time the tiles were 1.2-1.3x faster than it
        cfg = Config("stripe", 1, 1)
    elif time_contiguous and n_sm <= B < 4 * n_sm and 1024 <= T <= 4096 and 0 < series <= 5:
        # rows enough for one per program to fill the GPU, too few for 4-row tiles: one row per
        # 8-warp program in 1024-step tiles, one launch, instead of 4-row tiles split in time: the
        # five light ops 1.7-1.9x faster at 512 x 2048 (V-trace 1.05x slower: heavier kernels keep
        # the tiles; scripts/h200_seed.py record)
        return (_with_chunks(Config("scan", 1, 8, block_t=1024), T, 1),)
    elif time_contiguous or B == 1:
        cfg = Config("scan", min(4, _pow2(B)), 4, block_t=min(256, _pow2(T)))
    elif 8 <= T <= 16 and B < 16384:
        # short T, environments too few for 64-wide tiles to fill the GPU: 8 environments per
        # one-warp program. Against run 24's 64-wide tiles (T = 16), sequential layout (T = 8)
        # and block kernel (4096 x 16, light ops), the same cells of rlscan bench in run 26 ran
        # 0.98-2.4x as fast at N = 64-4096; at 8 x 16, 0.80-1.15x (Retrace slowest); the
        # sequential kernel lost every one of those cells (scripts/h200_settings.py small: run 25)
        cfg = Config("scan", min(8, _pow2(B)), 1, block_t=min(16, _pow2(T)))
    elif T <= 8 or math.ceil(B / 128) >= 3 * n_sm:
        # one step per stripe, 128 environments per program: the sequential layout, which beat
        # 8-step stripes at 65536 x 8 for 7 of the 8 ops, and the tiles and stripes below at
        # 65536 x {16, 128, 512, 2048} (GAE; docs/benchmarks.md): with a few programs per SM
        # there is parallelism enough across environments alone
        cfg = Config("stripe", min(128, _pow2(B)), 4 if B >= 128 else 1)
    elif 16 <= B <= 64 and T >= 65536 and not deterministic:
        # few environments, very long T: windows of 256 steps (16 stripes of 16) for 16
        # environments, chained in two passes (chained_stripe_kernel: fold, look back, read the
        # window again to emit), four warps, each pair published as one word and read 2 at a
        # time. Against run 28's 512-step windows with flagged pairs, 1.20-2.55x faster at
        # 16 x 262144 for all 8 ops and 1.24x for GAE at 64 x 65536 (run 33,
        # scripts/h200_settings.py words_few); run 28's were 1.18-1.54x faster than run 19's
        # 512-step blocks held in registers (one 8-warp program per SM)
        return (_with_chunks(Config("chained_stripe", 16, 4, stripes=16, steps=16, lookback=2, link="words"), T, 1),)
    elif 512 <= B < 4096 and T >= 1024 and 0 < series <= 5 and not deterministic:
        # mid-size batches, light kernels: the one-pass blocks of the rule below (64 environments,
        # 32 steps, words), then 128 x 16 with flags: GAE 1.72x faster than 16-wide tiles split
        # in time at 512 x 2048 (V-trace 1.25x slower there: heavier kernels keep the tiles;
        # scripts/h200_seed.py record)
        chained = Config("chained", 64, 1, stripes=1, steps=32, lookback=1, link="words")
        return (_with_chunks(chained, T, 1), _with_chunks(chained._replace(block_b=128, steps=16, lookback=4,
                                                                           link="flags"), T, 1))
    elif B >= 4096 and T >= 512 and not deterministic:
        # chained_kernel (one pass), one warp of 128 environments, 16 steps in each thread and a
        # look-back of 4 blocks per round trip: 1.06-1.41x faster than 8 steps at 4096 x 2048 and
        # 16384 x 512, for scans both ways (run 18). Kernels whose steps do not fit in registers
        # take 8 steps, and where even that spills, the settings of run 14: one block per round
        # trip backward in time, the block kernel forward. 16 steps are tried only for kernels
        # of at most 5 series (GAE, TD(λ), discounted returns, traces, sums, linear scan):
        # V-trace's and Retrace's spill there, and bigger kernels take long to compile. The
        # look-back composes a varying number of blocks, so last bits can vary run to run: under
        # torch.use_deterministic_algorithms(True) the block kernel below runs instead
        chained = Config("chained", 128, 1, stripes=1, steps=16, lookback=4)
        last = _with_chunks(chained._replace(steps=8, lookback=1), T, 1) if reverse else _block_config(T, B, n_sm)
        configs = (_with_chunks(chained._replace(steps=8), T, 1), last)
        if 0 < series <= 5:
            # lighter kernels: 64 environments per warp, 32 steps, pairs published as words and
            # read one at a time, then 128 x 16 steps with flags. Half as many links per chain as
            # 64 x 16, and no fences: 1.05-1.17x faster than 128 x 16 at 4096 x 2048 and
            # 1.02-1.10x at 16384 x 512 for all six (runs 39-40, h200_settings.py words_light);
            # with flags read 4 at a time the same blocks were 0.99-1.08x
            first = (_with_chunks(chained._replace(block_b=64, steps=32, lookback=1, link="words"), T, 1),
                     _with_chunks(chained, T, 1))
        elif series > 5:
            # heavier kernels (V-trace, Retrace, the backward kernels): 64 environments per warp,
            # two per thread, 16 steps. At 4096 x 2048 against 128 x 8 steps: Retrace 1.13-1.15x
            # (also 16384 x 512; run 23, scripts/h200_settings.py heavy); the backward of TD(λ)
            # 1.13x and of GAE 1.07x, forward in time (run 27, scripts/h200_checks.py
            # backward_settings). 32 environments, one per thread, ran 12-220x slower. Pairs
            # published as words, read one at a time: V-trace 1.11x and 1.09x, Retrace 1.06x
            # faster than flagged pairs read 4 at a time (run 33, h200_settings.py words)
            first = (_with_chunks(chained._replace(block_b=64, lookback=1, link="words"), T, 1),)
        else:
            first = ()
        return first + configs
    elif B >= 4096 and T >= 512:
        return (_block_config(T, B, n_sm),)
    elif T <= 16 and B >= 16384 and 0 < series <= 5:
        # 128 environments per one-warp program, all steps in each thread (block_kernel): 1.2-1.8x
        # faster than the tiles below at 16384 x 16 for the six ops of at most 5 series (runs
        # 18-19); V-trace's spilled there, and Retrace's ran 1.5x slower than the tiles
        block = Config("block", 128, 1, stripes=1, steps=_pow2(T))
        return (_with_chunks(block, T, 1), _with_chunks(Config("scan", 16, 1, block_t=16), T, 1))
    elif T <= 16:
        # 16 environments per one-warp tile: at 16384 x 16, V-trace 5.9 -> 4.3 us and Retrace
        # 4.8 -> 4.1 against 64-wide tiles (runs 24 and 26; run 25 alike)
        cfg = Config("scan", 16, 1, block_t=16)
    elif T <= 128:
        cfg = Config("stripe", min(8, _pow2(B)), 4, stripes=min(32, _pow2(math.ceil(T / 4))), steps=4)
    else:
        cfg = Config("scan", min(16, _pow2(B)), 4, block_t=256 if T >= 1024 else 128)
    return (_split_time(cfg, T, B, n_sm),)


def _split_time(cfg: Config, T: int, B: int, n_sm: int) -> Config:
    """``cfg`` with time split into chunks run by separate programs (two launches) where its
    environment blocks alone are too few to fill the GPU: about 4 programs per SM."""
    b_programs = math.ceil(B / cfg.block_b)
    n_windows = math.ceil(T / _window(cfg))
    if b_programs >= n_sm or n_windows < 4 or T < 1024:  # a second launch does not pay for short T
        return _with_chunks(cfg, T, 1)
    n_chunks = min(n_windows, math.ceil(4 * n_sm / b_programs), max(1, _MAX_CHUNK_TILE // cfg.block_b))
    return _with_chunks(cfg, T, n_chunks)


def _block_config(T: int, B: int, n_sm: int) -> Config:
    """block_kernel, one warp of 128 environments, 4 steps in each thread, and time chunks for
    ~16 programs per SM (two launches): 1.14-1.32x faster than the tiles at 4096 x 2048, 8192 x
    1024 and 16384 x 512 (scripts/h200_settings.py block_refined)."""
    cfg = Config("block", 128, 1, stripes=1, steps=4)
    b_programs = math.ceil(B / cfg.block_b)
    return _with_chunks(cfg, T, min(32, math.ceil(16 * n_sm / b_programs)))


# ----------------------------------------------------------------------------- scalars

_SPLIT_CACHE: dict = {}


def split(x: float) -> tuple:
    """A float64 as three float32 parts whose float64 sum is exactly ``x``."""
    parts = _SPLIT_CACHE.get(x)
    if parts is None:
        hi = float(np.float32(x))
        if math.isfinite(x):
            r = x - hi
            mid = float(np.float32(r))
            parts = (hi, mid, float(np.float32(r - mid)))
        else:
            parts = (hi, 0.0, 0.0)
        if len(_SPLIT_CACHE) < 4096:
            _SPLIT_CACHE[x] = parts
    return parts


# ----------------------------------------------------------------------------- launching


def _reach(x: torch.Tensor) -> int:
    """The largest element offset a kernel adds to the tensor's pointer."""
    return sum((n - 1) * abs(s) for n, s in zip(x.shape, x.stride()) if n > 1)


def _acc_dtype(dtype: torch.dtype):
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32


class CompileFallbackWarning(RuntimeWarning):
    """A launch setting failed to compile or launch on this stack; rlscan ran another."""


class NoKernel(RuntimeError):
    """No launch setting compiled, and the op has no CPU path to run instead."""


_WARNED: set = set()


def _warn_fallback(cfg: Config, exc: Exception, instead: str) -> None:
    """Warn once per (setting, Triton version) that ``cfg`` failed and ``instead`` runs."""
    import triton

    key = (cfg._replace(n_chunks=1, chunk_len=0, block_c=1), triton.__version__)  # the setting, not the shape's chunks
    if key in _WARNED:
        return
    _WARNED.add(key)
    lines = [x for x in str(exc).strip().splitlines() if x.strip()]
    import warnings

    warnings.warn(f"rlscan: launch setting {cfg} failed to compile or launch under Triton {triton.__version__} "
                  f"({type(exc).__name__}: {lines[-1][:200] if lines else ''}); running {instead} instead",
                  CompileFallbackWarning, stacklevel=4)


def _sequential(T: int, B: int) -> Config:
    """The last setting a plan tries: one step per stripe, a plain loop over time (exact mode's
    kernel, with fused multiply-adds allowed)."""
    block_b = min(128, _pow2(B))
    return Config("stripe", block_b, max(1, min(4, block_b // 32)), chunk_len=T)


def _compile_and_launch(fn, grid, args, kwargs):
    """Triton's own launch path: on the first call for a signature it compiles the kernel, so a
    setting this Triton cannot compile fails here (tests replace it to fail a setting under the
    interpreter, which compiles nothing)."""
    return fn[grid](*args, **kwargs)


class LaunchPlan:
    """Everything about a launch that depends only on the call's signature (shapes,
    strides, dtypes, pointer alignment, settings), prepared once and reused; calling it
    with ``(ins, outs, scalars)`` launches.

    Where the heuristic offers several settings (``candidates``), the first call picks one
    by compiling them in order (:meth:`_pick_by_local_memory`). The first launch of each
    phase goes through Triton's ``JITFunction`` (which compiles);
    later ones call the compiled kernel's launcher directly. That is safe because the
    signature the plan is cached under fixes every value Triton specialises on. Launch
    hooks are passed through as ``JITFunction.run`` passes them, except that an empty
    :class:`triton.knobs.HookChain` (the default) is passed as ``None``: there is nothing
    to call, and building the launch metadata for it costs more than the launch.
    """

    direct = True  # set False (with the reason) if this Triton's internals differ
    disabled_reason = ""

    def __init__(self, spec, layout, ins, in_strides, outs, out_strides, init_strides, *, compute_dtype,
                 time_contiguous, exact, device, wide, init_of, cpu_fallback=None):
        self.spec, self.layout = spec, layout
        series = sum(x is not None and s[0] != 0 for x, s in zip(ins, in_strides)) + sum(o is not None for o in outs)
        self.candidates = choose_configs(layout.T, layout.B, time_contiguous, exact, device, spec[2], series,
                                         compute_dtype == torch.float32)
        self.unchecked = len(self.candidates) > 1 and not interpreting()
        self.device = device
        self.compute_dtype = compute_dtype
        self.init_of = init_of
        self.wide = wide
        self.exact = exact
        self.strides = (in_strides, out_strides, init_strides)
        # every setting the plan may run, in order: the candidates, then the sequential kernel
        last = _sequential(layout.T, layout.B)
        self.chain = self.candidates + ((last,) if last not in self.candidates else ())
        self.cpu_fallback, self.on_cpu = cpu_fallback, False
        self._use(self.candidates[0])
        self._scalars, self._parts = None, ()

    def _use(self, cfg: Config) -> None:
        """Launch with the settings ``cfg`` from now on."""
        from .chained_scan import chained_kernel, chained_scan_kernel, chained_stripe_kernel
        from .stripe_scan import block_kernel, stripe_kernel
        from .tile_scan import scan_kernel

        coeffs, emit, reverse = self.spec
        T, B = self.layout.T, self.layout.B
        self.source = cfg
        if cfg.kind in CHAINED and cfg.link == "words" and self.compute_dtype != torch.float32:
            cfg = cfg._replace(link="flags")  # a word holds two float32 values
        self.cfg = cfg
        self.grid = (math.ceil(B / cfg.block_b), cfg.n_chunks, 1)
        # scratch: the chunks' pairs; for the chained kernels, pairs and outgoing states, then
        # int32 flags and a ticket counter (zeroed on every call, from ``flags_at``), or one
        # int64 word per position and environment and the counter (all bits set on every call)
        self.flags_at = None
        if cfg.kind in CHAINED and cfg.link == "words":
            self.agg_numel = 2 * (cfg.n_chunks * B + 1)
        elif cfg.kind in CHAINED:
            self.flags_at = 3 * cfg.n_chunks * B
            n_flags = cfg.n_chunks * self.grid[0] + 1
            self.agg_numel = self.flags_at + math.ceil(32 * n_flags / torch.finfo(self.compute_dtype).bits)
        else:
            self.agg_numel = 2 * cfg.n_chunks * B if cfg.n_chunks > 1 else 0
        kwargs = dict(
            COEFFS=coeffs, EMIT=emit, REVERSE=reverse, ACC=_acc_dtype(self.compute_dtype), BLOCK_B=cfg.block_b,
            BLOCK_C=cfg.block_c, TWO_LEVEL=self.layout.two_level, WIDE=self.wide,
            STAGES=cfg.stages if cfg.stages > 1 else None, UNROLL=cfg.unroll if cfg.unroll > 1 else None,
        )
        self.fn = dict(scan=scan_kernel, stripe=stripe_kernel, block=block_kernel, chained=chained_kernel,
                       chained_scan=chained_scan_kernel, chained_stripe=chained_stripe_kernel)[cfg.kind]
        if cfg.kind in ("scan", "chained_scan"):
            kwargs["BLOCK_T"] = cfg.block_t
        else:
            kwargs["STRIPES"] = cfg.stripes
            kwargs["STEPS"] = cfg.steps
        if cfg.kind in CHAINED:
            kwargs["TEST_LOOKBACK"] = cfg.test_lookback
            kwargs["LOOKBACK"] = cfg.lookback
            kwargs["LINK"] = cfg.link
        if cfg.kind == "chained_stripe":
            kwargs["OPAQUE"] = not interpreting()
        if cfg.kind in ("block", "chained"):
            kwargs["STEP_SCAN"] = cfg.step_scan
        self.constexprs = kwargs
        self.options = dict(num_warps=cfg.num_warps)
        if self.exact:
            self.options["enable_fp_fusion"] = False
        self.sizes = (T, B, self.layout.B_lo, cfg.chunk_len, cfg.n_chunks)
        self.phases = (0,) if cfg.n_chunks == 1 or cfg.kind in CHAINED else (1, 2)
        self.compiled: dict = {}  # phase -> (launcher, function, packed metadata, kernel, constexpr values)

    def _args(self, ins, outs) -> tuple:
        """The kernel's positional arguments for one call (with fresh scratch)."""
        in_strides, out_strides, init_strides = self.strides
        init = None if self.init_of is None else ins[self.init_of]
        agg = torch.empty(self.agg_numel, dtype=self.compute_dtype, device=self.device) if self.agg_numel else None
        if self.flags_at is not None:
            agg[self.flags_at:].zero_()
        elif self.cfg.kind in CHAINED:
            agg.view(torch.int32).fill_(-1)
        return (ins, in_strides, outs, out_strides, self._parts, init, init_strides, agg) + self.sizes

    def _pick_by_local_memory(self, ins, outs) -> None:
        """Use the first candidate whose compiled kernel keeps at most ``MAX_LOCAL_BYTES`` of
        local memory per thread (compiled, not run; Triton caches it for the first launch),
        else the last. Where the compiled kernel cannot be inspected, the last."""
        self.unchecked = False
        for cfg in self.candidates[:-1]:
            self._use(cfg)
            try:
                kernel = self.fn.warmup(*self._args(ins, outs), grid=self.grid[:2],
                                        **dict(self.constexprs, PHASE=self.phases[0], **self.options))
            except Exception as exc:  # noqa: BLE001 - this setting does not compile here: the next one
                _warn_fallback(self.cfg, exc, "the next setting")
                continue
            try:
                kernel._init_handles()
                local_bytes = 4 * kernel.n_spills  # Triton reports the local memory size / 4
            except Exception:  # noqa: BLE001 - no inspection: the last candidate (the settings of old)
                break
            if local_bytes <= MAX_LOCAL_BYTES:
                return
        self._use(self.candidates[-1])

    def __call__(self, ins, outs, scalars) -> None:
        if scalars is not self._scalars:  # the fast path passes the same tuple on every call
            self._scalars, self._parts = scalars, tuple(split(float(x)) for x in scalars)
        if self.unchecked:
            self._pick_by_local_memory(ins, outs)
        if self.on_cpu:
            self.cpu_fallback(ins, outs, scalars)
            return
        args = self._args(ins, outs)
        if len(self.compiled) < len(self.phases) or interpreting():
            try:
                for phase in self.phases:
                    compiled = self.compiled.get(phase)
                    if compiled is None or interpreting():
                        self._first_launch(phase, args)
                    else:
                        self._direct_launch(compiled, args)
            except Exception as exc:  # noqa: BLE001 - a setting this stack cannot compile or launch
                self._fall_back(exc)
                self(ins, outs, scalars)
            return
        for phase in self.phases:
            self._direct_launch(self.compiled[phase], args)

    def _fall_back(self, exc: Exception) -> None:
        """Move on from the setting that failed with ``exc``: to the next in :attr:`chain`, or
        to the CPU (warning once per setting and Triton version)."""
        self.unchecked = False
        at = self.chain.index(self.source)
        if at < len(self.chain) - 1:
            _warn_fallback(self.cfg, exc, f"the setting {self.chain[at + 1]}")
            self._use(self.chain[at + 1])
            return
        if self.cpu_fallback is None:
            raise NoKernel(f"no launch setting compiled for this call (last: {self.cfg}): {exc!r}") from exc
        _warn_fallback(self.cfg, exc, "the CPU path")
        self.on_cpu = True

    def _direct_launch(self, compiled, args) -> None:
        run, function, packed, kernel, constexpr_values = compiled
        stream = _raw_stream(self.device.index)
        enter, leave = _runtime.launch_enter_hook, _runtime.launch_exit_hook
        if enter is not None and type(enter) is _HookChain and not enter.calls:
            enter = None
        if leave is not None and type(leave) is _HookChain and not leave.calls:
            leave = None
        args = args + constexpr_values
        meta = None if enter is None else kernel.launch_metadata(self.grid, stream, *args)
        run(self.grid[0], self.grid[1], self.grid[2], stream, function, packed, meta, enter, leave, *args)

    def _first_launch(self, phase, args) -> None:
        kwargs = dict(self.constexprs, PHASE=phase, **self.options)
        kernel = _compile_and_launch(self.fn, self.grid[:2], args, kwargs)
        if interpreting() or not LaunchPlan.direct:
            return
        try:
            _load_launch_internals()
            names = list(self.fn.arg_names)
            if tuple(names[: len(args)]) != _POSITIONAL:
                raise RuntimeError(f"unexpected kernel signature {names}")
            if kernel is None or not hasattr(kernel, "packed_metadata") or not hasattr(_runtime, "launch_enter_hook"):
                raise RuntimeError(f"JITFunction.run returned {type(kernel).__name__}, not a compiled kernel")
            constexpr_values = tuple(kwargs[n] for n in names[len(args):])
            self.compiled[phase] = (kernel.run, kernel.function, kernel.packed_metadata, kernel, constexpr_values)
        except Exception as exc:  # noqa: BLE001 - fall back to Triton's own launch path
            LaunchPlan.direct = False
            LaunchPlan.disabled_reason = repr(exc)


_runtime = _HookChain = _raw_stream = None


def _load_launch_internals() -> None:
    """What a direct launch reads on every call, looked up once."""
    global _runtime, _HookChain, _raw_stream
    from triton import knobs

    _runtime = knobs.runtime
    _HookChain = getattr(knobs, "HookChain", None)
    _raw_stream = torch._C._cuda_getCurrentRawStream


_POSITIONAL = ("ins", "in_strides", "outs", "out_strides", "scalars", "INIT", "init_strides", "AGG",
               "T", "B", "B_lo", "chunk_len", "n_chunks")
_PLANS: dict = {}


def _key(signature):
    return signature, settings_key()


def cached_plan(signature) -> Optional[LaunchPlan]:
    """The plan made earlier for ``signature``, if any."""
    return _PLANS.get(_key(signature))


def new_plan(spec, layout, ins, in_strides, outs, out_strides, *, compute_dtype, time_contiguous, exact=False,
             init_of=None, init_strides=(0, 0, 0), signature=None, cpu_fallback=None) -> LaunchPlan:
    """The plan that runs the scan engine for one op (``spec = (COEFFS, EMIT, REVERSE)``, or
    with a fourth entry that builds the plan instead, outside ``exact``) on a ``[T, B]``
    grid; ``cpu_fallback(ins, outs, scalars)`` computes it where no setting compiles.
    ``signature``, when given, identifies everything the plan depends on (the caller
    includes shapes, strides, dtypes and pointer alignment); the plan is cached under it."""
    device = next(o for o in outs if o is not None).device
    wide = any(_reach(x) >= 2**31 - 1 for x in ins + outs if x is not None)

    def engine_plan():
        return LaunchPlan(spec[:3], layout, ins, in_strides, outs, out_strides, init_strides,
                          compute_dtype=compute_dtype, time_contiguous=time_contiguous, exact=exact, device=device,
                          wide=wide, init_of=init_of, cpu_fallback=cpu_fallback)

    if len(spec) == 4 and not exact:
        # a fourth entry builds a plan of its own: a prologue kernel first (retrace_from_q's
        # tables); where that plan fails to compile, the engine's own plan (fused) takes over
        plan = spec[3](layout, ins, in_strides, outs, out_strides, compute_dtype=compute_dtype,
                       time_contiguous=time_contiguous, device=device, wide=wide, init_strides=init_strides,
                       fallback=engine_plan)
    else:
        plan = engine_plan()
    if signature is not None:
        if len(_PLANS) >= 4096:
            _PLANS.clear()
        _PLANS[_key(signature)] = plan
    return plan
