"""Launch settings for a shape, and launching the scan engine.

The plan. For each call signature (shapes, strides, dtypes, alignment) a
:class:`LaunchPlan` is made once and cached. Its candidate settings come from the launch
settings table (:mod:`rlscan._triton.settings`, shipped as ``tables/h200.json``): the
first shape class matching the call, and its settings in order, best first. Each setting
names its reason and the measured ratio that chose it; ``rlscan plan OP --shape NxT
--layout tn|nt`` prints them, and ``rlscan tune`` re-measures the table on another GPU
(docs/tuning.md). Nothing is autotuned on a user's first call. Outside the table:
``exact`` runs the sequential stripe kernel (one step per stripe, fused multiply-adds
off, in the reference loop's order), and the Triton interpreter runs small tiles.

The fallback order. Where a class lists several settings, the first call compiles them
in order (without running them) and keeps the first whose kernel keeps at most the table's
``max_local_bytes`` of local memory (spilled registers) per thread, else the last
(:mod:`rlscan._triton.policy` holds that and the table's other decisions outside its classes). A
setting this Triton cannot compile or launch is never the user's problem: the plan warns
once per setting and Triton version (:class:`CompileFallbackWarning`) and moves to the
next setting, then to the sequential kernel; where even that fails, the op runs on the
CPU.

The direct launch. After the first call for a signature, a plan skips Triton's generic
``JITFunction.run``: it keeps the compiled kernel and calls its launcher directly,
passing Triton's launch hooks through.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import textwrap
from typing import Optional

import numpy as np
import torch

from .. import _cache
from .._backend import interpreting
from . import policy as _policy
from . import settings as _settings
from .settings import CHAINED, Config, pow2 as _pow2, window as _window, with_chunks as _with_chunks  # noqa: F401

_forced: Optional[dict] = None


@contextlib.contextmanager
def forced_config(**settings):
    """Force launch settings (``kind``, ``block_t``, ``block_b``, ``stripes``, ``steps``,
    ``n_chunks``, ``num_warps``, ``stages``, ``unroll``, ``test_lookback``, ``step_scan``,
    ``lookback``, ``link``) inside a ``with`` block; fields not named come from the kind's
    defaults (:func:`_forced_setting`). Tests use it to reach every kernel path with small
    shapes; the benchmarks and ``rlscan tune`` use it to compare settings."""
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
    """What decides a launch besides the call's signature: the forced settings and policy
    decisions, and whether ``torch.use_deterministic_algorithms`` is on (it rules out the
    chained layout)."""
    forced = _policy.FORCED
    return (forced_settings(), torch.are_deterministic_algorithms_enabled(),
            repr(sorted(forced.items())) if forced else None)


_RECORDING: Optional[list] = None


@contextlib.contextmanager
def recording_plans():
    """Collect the :class:`LaunchPlan` objects made inside a ``with`` block, each with the
    ``query`` the settings table matched (``rlscan plan`` and ``rlscan tune`` read them)."""
    global _RECORDING
    previous, _RECORDING = _RECORDING, []
    try:
        yield _RECORDING
    finally:
        _RECORDING = previous


_SM_COUNT: dict = {}
_DEVICE_NAME: dict = {}


def _sm_count(device: torch.device) -> int:
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


def _table(device: torch.device) -> "_settings.Table":
    """The settings table for calls on ``device`` (:func:`rlscan._triton.settings.active_table`);
    off a GPU (the interpreter), the table for calls planned without one."""
    if device.type != "cuda":
        return _settings.active_table(None)
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _DEVICE_NAME:
        try:
            _DEVICE_NAME[key] = torch.cuda.get_device_name(key)
        except Exception:  # noqa: BLE001 - no device to name (compiling for a GPU target without one)
            _DEVICE_NAME[key] = None
    return _settings.active_table(_DEVICE_NAME[key], _sm_count(device) if _DEVICE_NAME[key] else None)


def choose_configs(T: int, B: int, time_contiguous: bool, exact: bool, device: torch.device,
                   reverse: bool = True, series: int = 0, words: bool = True) -> tuple:
    """Launch settings for a ``[T, B]`` problem scanned backward in time (``reverse``) or
    forward, reading and writing ``series`` tensors of ``[T, B]`` (0: unknown), computed in
    float32 (``words``) or not, in order of
    preference: a launch plan runs the first whose compiled kernel keeps each thread's local
    memory (spilled registers) within the table's ``max_local_bytes``, and the last regardless. Forced
    settings replace them all."""
    if exact:
        block_b = min(128, _pow2(B))
        configs = (Config("stripe", block_b, max(1, min(4, block_b // 32)), chunk_len=T),)
    elif interpreting() or device.type != "cuda":
        configs = (Config("scan", min(16, _pow2(B)), 4, block_t=min(32, _pow2(T)), chunk_len=T),)
    else:
        configs = _settings.configs_for(T, B, time_contiguous, _sm_count(device), reverse,
                                        torch.are_deterministic_algorithms_enabled(), series, words,
                                        table=_table(device))
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


def policy_table(device: torch.device) -> "_settings.Table":
    """The table whose policy decides calls on ``device`` (:func:`_table`), looked up once per
    device until :func:`rlscan._triton.settings.clear_cache`: calls read it every time."""
    key = device.index if device.type != "cuda" or device.index is not None else torch.cuda.current_device()
    return _settings.kept(("policy", device.type, key), lambda: _table(device))


def _gpu_configs(T: int, B: int, time_contiguous: bool, n_sm: int, reverse: bool = True,
                 deterministic: bool = False, series: int = 0, words: bool = True) -> tuple:
    """The shipped table's settings for a call on a GPU of ``n_sm`` SMs, best first
    (:func:`rlscan._triton.settings.configs_for`)."""
    return _settings.configs_for(T, B, time_contiguous, n_sm, reverse, deterministic, series, words,
                                 table=_settings.shipped())


def _gpu_config(T: int, B: int, time_contiguous: bool, n_sm: int, reverse: bool = True,
                deterministic: bool = False) -> Config:
    """The preferred settings of :func:`_gpu_configs`."""
    return _gpu_configs(T, B, time_contiguous, n_sm, reverse, deterministic)[0]


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
                 time_contiguous, exact, device, wide, init_of, cpu_fallback=None, lane_pairs=False):
        self.spec, self.layout = spec, layout
        series = sum(x is not None and s[0] != 0 for x, s in zip(ins, in_strides)) + sum(o is not None for o in outs)
        # what the settings table matches on, besides the GPU (``rlscan tune`` reads it)
        self.query = dict(T=layout.T, B=layout.B, time_contiguous=bool(time_contiguous), reverse=bool(spec[2]),
                          series=series, words=compute_dtype == torch.float32)
        if _RECORDING is not None:
            _RECORDING.append(self)
        self.candidates = choose_configs(layout.T, layout.B, time_contiguous, exact, device, spec[2], series,
                                         compute_dtype == torch.float32)
        if lane_pairs and not _forced:  # neighbouring lanes of the batch axis share a program
            self.candidates = tuple(c if c.block_b % 2 == 0 else c._replace(block_b=2 * c.block_b)
                                    for c in self.candidates)
        self.unchecked = len(self.candidates) > 1 and not interpreting()
        self.device = device
        self.compute_dtype = compute_dtype
        self.reloadable = outs[0] is not None and outs[0].dtype == compute_dtype
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
        if cfg.kind in ("scan", "chained_scan"):
            kwargs["STATE_IN"] = state_in(emit, cfg, self.reloadable,
                                          _policy.value("state_in_steps_per_warp", policy_table(self.device)))
        if cfg.kind == "scan":
            kwargs["ONE_TILE"] = cfg.n_chunks == 1 and cfg.block_t >= T
            kwargs["FLIP"] = reverse and (FORCE_FLIP if FORCE_FLIP is not None else
                                          cfg.block_t <= _policy.value("flip_max_block_t", policy_table(self.device)))
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
        """Use the first candidate whose compiled kernel keeps at most the table's
        ``max_local_bytes`` of local memory per thread (compiled, not run; Triton caches it for
        the first launch), else the last. Where the compiled kernel cannot be inspected, the last."""
        self.unchecked = False
        limit = _policy.value("max_local_bytes", policy_table(self.device))
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
            if local_bytes <= limit:
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
        if len(self.compiled) < len(self.phases):  # always, under the interpreter (nothing is kept)
            try:
                for phase in self.phases:
                    compiled = self.compiled.get(phase)
                    if compiled is None:
                        self._first_launch(phase, args)
                    else:
                        direct_launch(compiled, self.grid, self.device.index, args)
            except Exception as exc:  # noqa: BLE001 - a setting this stack cannot compile or launch
                self._fall_back(exc)
                self(ins, outs, scalars)
            return
        for phase in self.phases:
            direct_launch(self.compiled[phase], self.grid, self.device.index, args)

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

    def _first_launch(self, phase, args) -> None:
        kwargs = dict(self.constexprs, PHASE=phase, **self.options)
        kernel = _compile_and_launch(self.fn, self.grid[:2], args, kwargs)
        if interpreting() or not LaunchPlan.direct:
            return
        try:
            if tuple(self.fn.arg_names[: len(args)]) != _POSITIONAL:
                raise RuntimeError(f"unexpected kernel signature {list(self.fn.arg_names)}")
            self.compiled[phase] = launcher_of(self.fn, kernel, len(args), kwargs)
        except Exception as exc:  # noqa: BLE001 - fall back to Triton's own launch path
            LaunchPlan.direct = False
            LaunchPlan.disabled_reason = repr(exc)


def launcher_of(fn, kernel, n_args: int, kwargs: dict) -> tuple:
    """What :func:`direct_launch` needs to launch ``kernel`` again: the compiled kernel that
    ``fn`` (a ``JITFunction``) just returned for ``n_args`` positional arguments and the
    constexpr ``kwargs``. Raises where this Triton does not expose it."""
    _load_launch_internals()
    if kernel is None or not hasattr(kernel, "packed_metadata") or not hasattr(_runtime, "launch_enter_hook"):
        raise RuntimeError(f"JITFunction.run returned {type(kernel).__name__}, not a compiled kernel")
    constexpr_values = tuple(kwargs[n] for n in fn.arg_names[n_args:])
    return kernel.run, kernel.function, kernel.packed_metadata, kernel, constexpr_values


def first_launch(fn, grid, args, constexprs: dict, num_warps: int) -> Optional[tuple]:
    """Launch ``fn`` (a ``JITFunction``, which compiles) on a 1-D ``grid`` and return what
    :func:`direct_launch` needs to launch it again, or ``None`` where later launches must go
    through Triton too (the interpreter, direct launches off, other internals): for kernels
    launched outside a :class:`LaunchPlan`."""
    kernel = fn[grid[:1]](*args, **constexprs, num_warps=num_warps)
    if interpreting() or not LaunchPlan.direct:
        return None
    try:
        return launcher_of(fn, kernel, len(args), constexprs)
    except Exception:  # noqa: BLE001 - keep Triton's own launch path
        return None


def direct_launch(compiled, grid, device_index: int, args) -> None:
    """Launch a kernel through its compiled launcher (``launcher_of``), skipping
    ``JITFunction.run``'s argument binding and cache lookup; Triton's launch hooks, where
    set, are passed through, so profilers still see the launch."""
    run, function, packed, kernel, constexpr_values = compiled
    stream = _raw_stream(device_index)
    enter, leave = _runtime.launch_enter_hook, _runtime.launch_exit_hook
    if enter is not None and type(enter) is _HookChain and not enter.calls:
        enter = None
    if leave is not None and type(leave) is _HookChain and not leave.calls:
        leave = None
    args = tuple(args) + constexpr_values
    meta = None if enter is None else kernel.launch_metadata(grid, stream, *args)
    run(grid[0], grid[1], grid[2], stream, function, packed, meta, enter, leave, *args)


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


def _key(signature) -> tuple:
    """The signature cache's key of a plan made for ``signature`` (and the settings in force)."""
    return ("plan", signature) + settings_key()


#: ``True`` or ``False`` to flip (or not) the tiles of every reverse ``scan`` kernel
#: (``tile_scan.scan_kernel``'s ``FLIP``; ``tools/seed_compare.py flip`` compares them); ``None``: the
#: table's ``flip_max_block_t`` decides
FORCE_FLIP = None

#: ``"gather"``, ``"exclusive"`` or ``"reload"`` to take the state carried in one way for
#: every ``EMIT`` that reads it (tests and ``tools/seed_compare.py state_in``); ``None``: choose
FORCE_STATE_IN = None


def state_in(emit, cfg: Config, reloadable: bool, steps_per_warp: int) -> str:
    """How a tile kernel gives an op's ``EMIT`` the state carried into each step, ``A_in``
    (``STATE_IN`` of ``tile_scan._state_in``), for an ``EMIT`` that reads it:

    * ``"reload"``: ``A`` stored in the first output and read back one step on, in the tile
      kernel's tiles spread over several warps with at least ``steps_per_warp`` steps each
      (the table's ``state_in_steps_per_warp``), where ``reloadable`` (the first output is
      given and has the compute dtype);
    * ``"exclusive"``: a second pair in ``tl.associative_scan``, in such tiles otherwise;
    * ``"gather"``: the neighbouring row, elsewhere.

    Across warps Triton's gather goes through shared memory, which costs shuffles and
    barriers that a read back (two barriers and a load from the cache) or a second pair in
    the scan do not; within a warp the neighbour's row is one shuffle, cheaper than either.
    The table's entry says where the two cross, and its evidence."""
    if not reads_state_in(emit):
        return "gather"  # the EMIT never reads it: no way is compiled in
    if FORCE_STATE_IN:
        return FORCE_STATE_IN if FORCE_STATE_IN != "reload" or reloadable else "exclusive"
    if cfg.num_warps == 1 or cfg.block_t < steps_per_warp * cfg.num_warps:
        return "gather"
    return "reload" if reloadable and cfg.kind == "scan" else "exclusive"


@functools.lru_cache(maxsize=None)
def reads_state_in(emit) -> bool:
    """Whether an op's ``EMIT(outs, strides, scalars, A, A_in, ...)`` reads ``A_in``, the
    state carried into each step: whether its fifth parameter's name occurs in its body
    (passing it on counts); an ``EMIT`` without Python source is assumed to read it."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(getattr(emit, "fn", emit))))
    except (OSError, TypeError, SyntaxError):
        return True
    func = tree.body[0]
    name = func.args.args[4].arg
    return any(isinstance(node, ast.Name) and node.id == name for stmt in func.body for node in ast.walk(stmt))


def cached_plan(signature) -> Optional[LaunchPlan]:
    """The plan made earlier for ``signature``, if any."""
    return _cache.CACHE.get(_key(signature))


def plans() -> list:
    """The launch plans in the signature cache (a :class:`LaunchPlan`, or a plan of an op's own
    such as Retrace-from-Q's table plan, which has launch settings too), oldest first."""
    return [v for v in list(_cache.CACHE.values()) if isinstance(v, LaunchPlan) or hasattr(v, "constexprs")]


def new_plan(spec, layout, ins, in_strides, outs, out_strides, *, compute_dtype, time_contiguous, exact=False,
             init_of=None, init_strides=(0, 0, 0), signature=None, cpu_fallback=None,
             lane_pairs=False) -> LaunchPlan:
    """The plan that runs the scan engine for one op (``spec = (COEFFS, EMIT, REVERSE)``) on a
    ``[T, B]`` grid; ``cpu_fallback(ins, outs, scalars)`` computes it where no setting
    compiles. ``signature``, when given, identifies everything the plan depends on (the
    caller includes shapes, strides, dtypes and pointer alignment); the plan is kept in the
    signature cache under it. ``lane_pairs``: the batch axis holds pairs of lanes that one
    program must scan together (an odd ``block_b`` of the table is doubled)."""
    device = next(o for o in outs if o is not None).device
    plan = LaunchPlan(spec[:3], layout, ins, in_strides, outs, out_strides, init_strides,
                      compute_dtype=compute_dtype, time_contiguous=time_contiguous, exact=exact, device=device,
                      wide=reaches_far(ins + outs), init_of=init_of, cpu_fallback=cpu_fallback, lane_pairs=lane_pairs)
    if signature is not None:
        _cache.CACHE.keep(_key(signature), plan)
    return plan


def reaches_far(tensors) -> bool:
    """Whether a kernel must address any of ``tensors`` with 64-bit offsets."""
    return any(_reach(x) >= 2**31 - 1 for x in tensors if x is not None)
