"""The CPU path: each op's loop over time, compiled by numba, vectorised over environments.

The loops run one step at a time in the order of the reference loop's code, in the
compute dtype (float32, or float64 for float64 inputs), so they are exact: bit for bit
the plain float32 loops that Stable-Baselines3 and CleanRL run.

Each loop sees ``[T, Bh, Bl]`` numpy views of its inputs (see ``_inputs``), made
without copies (but for inputs broadcast along environments, see ``_view_function``), and
its innermost loop runs along ``Bl``, the environment axis, so the compiler turns it into
SIMD instructions; rows of 1–8 environments run a version compiled for their width
(``FIXED_WIDTHS``), and rows contiguous in time, far apart, are walked along time, a few
rows side by side (``_steps_in_rows``, ``ROWS_TOGETHER``). A loop that runs forward in
time carries its state ``A_{t-1}`` in a ``[Bh, Bl]`` array of its own: reading it back from the output row
written one step before waits on the store it just issued, wherever rows hold more than a
few environments. Loops backward in time read ``A_{t+1}`` back from the output, which costs
no more than a carried array (docs/cpu.md). Absent inputs arrive as ``None``, so numba
compiles a version per combination with the dead branches pruned. float16 and bfloat16
inputs (which numba cannot read) are converted to float32 first.

A runner serves one call signature (shapes, strides, dtypes), so how each argument
becomes a view is worked out on its first call; later calls only wrap the new memory.
The loops' outer loop is a ``prange`` over blocks of environments: large calls may run a
version compiled with ``parallel=True`` on a grid whose environments are regrouped into
blocks, where their runner finds it faster than the serial version (``_Versions``); small
calls run the serial version (a parallel launch costs more than they do). Each
environment's steps still run in order on one thread, so threads change no bit. Fresh
outputs of at least ``HUGE_PAGE_BYTES`` are backed by transparent huge pages where Linux
allows it: a page fault per 4 KiB of a new output otherwise costs several times the loop
itself.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
import time
import types
import warnings
import weakref

import numpy as np
import torch

from ._spec import kernel_strides

try:
    from numba import njit as _njit
    from numba import prange

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover - numba is a dependency; this keeps exotic platforms working
    HAVE_NUMBA = False
    prange = range

# Per thread, the serial loops called with their arguments while a runner notes them
# (``_LoopCall``): loops release the GIL, so two threads may note at once.
_noting = threading.local()

# Whether loops run their parallel version now. A process-wide flag, not a thread's: a
# parallel loop computes the same bits as the serial one, so another thread's small call
# that happens to see it set is only slower, and one global read costs less per call.
_parallel_now = False


#: Rows of these many environments (``Bl``) run a version of each loop compiled for that
#: width, whose loop over environments LLVM unrolls: it vectorises the loop over environments
#: only in whole passes of 64 (16 lanes, 4 at a time), so narrower rows would run one element
#: at a time; from 16 environments the generic version vectorises as well (docs/cpu.md).
FIXED_WIDTHS = (1, 2, 4, 8)


class _Loop:
    """A loop compiled by numba in versions: serially, with ``parallel=True``, and each for rows
    of one of :data:`FIXED_WIDTHS` environments, compiled when first needed. The version for
    a call is picked by its first array's ``Bl`` (``grid``). Every loop runs its environments in
    a ``prange`` (``tests/test_cpu_path.py`` checks): numba warns the user about a parallel
    compile that finds none."""

    def __init__(self, fn, fastmath=False):
        self.py_func = fn
        self.fastmath = fastmath
        self.serial = self._compile(None, False)
        self._versions = {(None, False): self.serial}
        functools.update_wrapper(self, fn)

    def __call__(self, *args):
        width = None
        for a in args:
            if type(a) is np.ndarray:
                width = a.shape[2]
                break
        parallel = _parallel_now
        loop = self._versions.get((width, parallel))
        if loop is None:  # the version for this width, found once
            loop = self._versions[(width, parallel)] = self.version(width if width in FIXED_WIDTHS else None,
                                                                    parallel)
        seen = getattr(_noting, "seen", None)
        if seen is not None and not parallel:
            seen.append((loop, args))
        return loop(*args)

    @property
    def parallel(self):
        return self.version(None, True)

    def version(self, width, parallel: bool):
        """The loop compiled for rows of ``width`` environments (``None``: any), in parallel or not."""
        loop = self._versions.get((width, parallel))
        if loop is None:
            loop = self._versions[(width, parallel)] = self._compile(width, parallel)
        return loop

    def _compile(self, width, parallel: bool):
        if not HAVE_NUMBA:
            return self.py_func
        fn = self.py_func
        if width is not None:
            fn = _renamed(fn, f"w{width}", grid=_fixed_grid(width))
        if parallel:
            fn = _renamed(fn, "parallel")
        return cached_njit(fn, nogil=True, parallel=parallel, fastmath=self.fastmath)


def cached_njit(fn, **options):
    """``numba.njit(cache=True, **options)(fn)``, its on-disk cache's writes serialized across
    processes (:func:`serialize_saves`)."""
    return serialize_saves(_njit(cache=True, **options)(fn))


def serialize_saves(dispatcher):
    """``dispatcher`` with its on-disk cache's saves made one at a time across processes, under
    an exclusive lock on a file in the cache's folder. numba names a new entry's data file by
    the first number free in the index as it read it: two processes compiling different
    versions at once (the ranks of a job on one machine, test workers) took the same number,
    and one version's index entry then pointed at the other's code, which crashed the process
    that loaded it. Where the lock cannot be taken (no ``fcntl``, a folder not writable) the
    save runs as numba's own."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is None or getattr(cache_file.save, "serialized", False):
        return dispatcher
    save = cache_file.save

    def serialized_save(key, data):
        with _cache_lock(cache_file._cache_path):
            save(key, data)

    serialized_save.serialized = True
    cache_file.save = serialized_save
    return dispatcher


@contextlib.contextmanager
def _cache_lock(folder: str):
    """An exclusive lock on ``folder``'s ``rlscan-numba.lock`` for the time of the block (none
    where it cannot be taken)."""
    try:
        import fcntl

        os.makedirs(folder, exist_ok=True)
        handle = open(os.path.join(folder, "rlscan-numba.lock"), "a")
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without locks (some network mounts): numba's own save
            pass
        yield
    finally:
        handle.close()  # closing releases the lock


def _renamed(fn, suffix: str, **names):
    """``fn`` as a new function object named ``<name>_<suffix>``, its global ``names`` replaced.
    numba's on-disk cache keys a function's compiled versions by its module, name, bytecode and
    argument types, not by the compiler's options or globals: versions of one function under
    one name would load each other's code (the parallel version had run serially)."""
    copy = types.FunctionType(fn.__code__, dict(fn.__globals__, **names), f"{fn.__name__}_{suffix}",
                              fn.__defaults__, fn.__closure__)
    copy.__qualname__ = f"{fn.__qualname__}_{suffix}"
    copy.__module__, copy.__doc__ = fn.__module__, fn.__doc__
    return copy


def njit(fn=None, *, reassociate: bool = False):
    """Compile a loop over ``[T, Bh, Bl]`` arrays whose outer loop is ``for i in prange(Bh)``
    and whose extents come from ``grid``. ``reassociate=True`` lets the compiler reorder the
    loop's sums (and fuse multiply-adds), so that it vectorises them: for loops that only
    gather statistics, never for a scan's steps, whose order is the result."""
    if fn is None:
        return lambda f: _Loop(f, fastmath={"reassoc", "contract"} if reassociate else False)
    return _Loop(fn)


@functools.lru_cache(maxsize=None)
def _fixed_grid(width: int):
    """``grid`` with ``Bl = width``, a constant of the loops compiled with it."""
    def fixed_grid(x):
        return x.shape[0], x.shape[1], width

    return _njit(nogil=True)(fixed_grid) if HAVE_NUMBA else fixed_grid


def _step_helper(fn):
    """A function the loops call at every element: compiled by numba and inlined into them."""
    return cached_njit(fn, inline="always", nogil=True) if HAVE_NUMBA else fn


@_step_helper
def grid(x):
    """``(T, Bh, Bl)`` of a loop's ``[T, Bh, Bl]`` array: its shape, or in a loop's version for
    one width (:data:`FIXED_WIDTHS`), ``Bl`` as a constant (:func:`_fixed_grid`)."""
    return x.shape


@_step_helper
def step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda):
    """``(γ_t, λ_t, γ_t·λ_t)`` at one element: the per-step arrays where given (``None``
    otherwise, a branch numba prunes), else the scalars."""
    g, lam, gl = gamma, lmbda, gamma_lmbda
    if gammas is not None:
        g = gammas[t, i, j]
        gl = g * lam
    if lmbdas is not None:
        lam = lmbdas[t, i, j]
        gl = g * lam
    return g, lam, gl


@_step_helper
def step_ends(term, trunc, t, i, j, last_step, zero, one):
    """``(ν_t, κ_t)`` at one element: ``ν = 0`` where the episode terminated at ``t`` (no
    bootstrap), ``κ = 0`` where it terminated or was truncated there, or the window ends (the
    trace is cut). An absent flag (``None``) is a branch numba prunes."""
    terminated = False
    if term is not None:
        terminated = term[t, i, j] != 0
    ended = terminated
    if trunc is not None:
        ended = ended or trunc[t, i, j] != 0
    nu = zero if terminated else one
    kappa = zero if (ended or last_step) else one
    return nu, kappa


@_step_helper
def nan_where_unbounded(x, factor):
    """``x`` where ``factor`` is finite, NaN where it is ±inf or NaN: ``α_t`` with ``β_t``
    (docs/semantics.md, "Numbers"; the kernels' ``primitives.nan_where_unbounded``)."""
    gap = factor - factor  # 0 where finite, NaN where not
    return x if gap == 0 else gap


def step_exp(x):
    """``exp(x)`` at one element, in ``x``'s dtype. Under numba, float32 runs
    :func:`_exp_float32`, which the loop vectoriser turns into SIMD instructions; float64
    runs libm's ``exp``, one element at a time."""
    return np.exp(x)


# exp(x) = 2^n · e^r with n = round(x / ln 2) and r = x − n ln 2 (|r| ≤ ln 2 / 2; ln 2 in two
# parts, so that n ln 2 is exact), e^r by Cephes' degree-7 polynomial for float32, 2^n in
# two factors built from their exponent bits (n runs from −150 to 128, past one factor's range)
_LOG2E = np.float32(1.4426950408889634)
_LN2_HI, _LN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)
_EXP_LO, _EXP_HI = np.float32(-104.0), np.float32(89.0)  # past them exp is 0, or inf, in float32
_EXP_POLY = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                                          1.6666665459e-1, 5.0000001201e-1))
_HALF, _ONE = np.float32(0.5), np.float32(1.0)


def _exp_float32(x):
    """``exp(x)`` for float32 within 1 ulp of the exact value (0 below about −103.9, inf
    above about 88.72, NaN for NaN), in arithmetic alone, so that LLVM inlines it and loops
    over environments vectorise: numba's ``exp`` is a call into libm per element, 6 times
    slower than this in a loop, and pip's llvmlite has no vector maths library. (Inlined by
    numba instead, ``overload(inline="always")``, it trips numba's SSA checks.)"""
    c = min(max(x, _EXP_LO), _EXP_HI)
    n = np.floor(c * _LOG2E + _HALF)
    r = c - n * _LN2_HI - n * _LN2_LO
    p0, p1, p2, p3, p4, p5 = _EXP_POLY
    y = (((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5) * (r * r) + r + _ONE
    k = np.int32(n)
    half = k >> 1
    y = y * _float32_of_bits((half + 127) << 23) * _float32_of_bits((k - half + 127) << 23)
    return x if x != x else y


if HAVE_NUMBA:
    from llvmlite import ir
    from numba import types as numba_types
    from numba.extending import intrinsic, overload

    @intrinsic
    def _float32_of_bits(typingctx, word):
        """The float32 whose bits are the low 32 bits of the integer ``word``."""
        if not isinstance(word, numba_types.Integer):
            return None

        def codegen(context, builder, signature, args):
            bits = args[0]
            if bits.type.width != 32:
                bits = builder.trunc(bits, ir.IntType(32))
            return builder.bitcast(bits, ir.FloatType())

        return numba_types.float32(word), codegen

    @overload(step_exp)
    def _step_exp(x):
        if x == numba_types.float32:
            return _exp_float32
        return lambda x: np.exp(x)


_NUMPY_DTYPE = {torch.float32: np.float32, torch.float64: np.float64}
_READABLE_FLAGS = (torch.bool, torch.uint8, torch.float32, torch.float64)

#: A call over at least this many elements (``T × B``) runs the loops' parallel version.
PARALLEL_MIN_ELEMENTS = 1 << 20
#: Environments per block, at least (whole cache lines per thread, and SIMD along each block).
_MIN_BLOCK = 64
#: Outputs of at least this many bytes are advised onto transparent huge pages.
HUGE_PAGE_BYTES = 4 << 20
_HUGE = 1 << 21


def cpu_threads() -> int:
    """Threads numba runs a parallel loop on (``NUMBA_NUM_THREADS``, by default every CPU)."""
    if not HAVE_NUMBA:
        return 1
    import numba

    return numba.get_num_threads()


def _madvise():
    """libc's ``madvise`` on Linux, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):  # pragma: no cover - no libc symbols
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _madvise()
_MADV_HUGEPAGE = 14


def advise_huge_pages(t: torch.Tensor) -> None:
    """Ask Linux to back the untouched memory of ``t`` with huge pages (a hint: failure changes nothing)."""
    if _MADVISE is None:
        return
    start = t.data_ptr()
    end = start + t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
    first = (start + _HUGE - 1) & ~(_HUGE - 1)
    length = (end - first) & ~(_HUGE - 1)
    if length > 0:
        _MADVISE(first, length, _MADV_HUGEPAGE)


def _geometry(t, layout, kind: str) -> tuple:
    """``(shape, element strides)`` of ``t`` seen as ``[T, Bh, Bl]`` (``[1, Bh, Bl]`` for
    per-environment values, ``[T, Bh, Bl, A]`` for action tables)."""
    s = kernel_strides(layout, t, kind)
    shape = (1 if kind == "batch" else layout.T, layout.B // layout.B_lo, layout.B_lo)
    if kind == "table":
        shape, s = shape + (t.shape[-1],), s[:4]
    return shape, tuple(s)


def _c_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _strides_agree(shape: tuple, a: tuple, b: tuple) -> bool:
    """Whether two stride tuples address the same elements of ``shape`` (unit dimensions do not count)."""
    return all(n == 1 or x == y for n, x, y in zip(shape, a, b))


def _converted(t, geometry: tuple, kind: str, compute_dtype: torch.dtype) -> np.ndarray:
    """The loop's view of ``t`` through torch: a converted copy for types numba cannot read."""
    t = torch.as_tensor(t)
    v = t.detach().as_strided(*geometry, t.storage_offset())
    if v.dtype == torch.bool:
        return v.numpy().view(np.uint8)
    if kind == "flag" and v.dtype not in _READABLE_FLAGS:
        return (v != 0).to(torch.uint8).numpy()  # numba reads neither half type; "set" is "non-zero"
    if kind == "flag":
        return v.numpy()
    if v.is_floating_point() and v.dtype != compute_dtype:
        v = v.to(compute_dtype)  # numba reads no half types; mixed dtypes meet in the compute dtype
    return v.numpy()


class _Remembered:
    """``view(y)`` of a view function that aliases a tensor's memory, remembering the array it
    made for a tensor passed twice in a row: buffers that a training loop fills again for
    each call (rollout storage) skip ``Tensor.numpy()``, about a fifth of a small call.

    The array kept does not own the memory (else it would keep the memory alive after the
    tensor is gone): it is handed out only while a weak reference finds the same tensor, at
    the same address. Its shape, strides and dtype are the runner's, which the call's
    signature fixes."""

    __slots__ = ("make", "seen", "kept")

    def __init__(self, make):
        self.make = make
        self.seen = None  # (id, data pointer) of the last tensor
        self.kept = (_gone, 0, None)  # (weak reference, data pointer, unowned array)

    def __call__(self, y):
        if type(y) is not torch.Tensor:
            return self.make(y)
        ptr = y.data_ptr()
        ref, at, a = self.kept
        if at == ptr and ref() is y:
            return a
        a = self.make(y)
        seen = (id(y), ptr)
        if seen == self.seen and a.size:
            self.kept = (weakref.ref(y), ptr, _unowned(a))
        self.seen = seen
        return a


def _gone():
    return None


def _unowned(a: np.ndarray) -> np.ndarray:
    """An array over ``a``'s memory (positive strides) that holds no reference to its owner."""
    span = sum((n - 1) * s for n, s in zip(a.shape, a.strides)) + a.itemsize
    memory = (ctypes.c_char * span).from_address(a.ctypes.data)
    return np.ndarray(a.shape, a.dtype, buffer=memory, strides=a.strides)


def _viewer(x, geometry: tuple, kind: str, compute_dtype: torch.dtype, remember: bool = False):
    """``view(x)``: the loop's numpy view of an argument laid out as ``x`` (a tensor or an array);
    with ``remember``, views of the tensor's own memory are :class:`_Remembered`."""
    view, aliases = _view_function(x, geometry, kind, compute_dtype)
    return _Remembered(view) if remember and aliases else view


def _view_function(x, geometry: tuple, kind: str, compute_dtype: torch.dtype):
    """``(view, whether its arrays alias the argument's memory)``."""
    shape, strides = geometry
    dtype = x.dtype if isinstance(x, torch.Tensor) else torch.from_numpy(x[:0]).dtype
    readable = dtype in _READABLE_FLAGS if kind == "flag" else dtype == compute_dtype
    if not readable:
        return (lambda y: _converted(y, geometry, kind, compute_dtype)), False
    as_uint8 = dtype == torch.bool
    contiguous = (x.is_contiguous() if isinstance(x, torch.Tensor) else x.flags.c_contiguous)
    numel = x.numel() if isinstance(x, torch.Tensor) else x.size
    if contiguous and numel == int(np.prod(shape)) and _strides_agree(shape, strides, _c_strides(shape)):
        def view(y):  # the common case: a reshape of the tensor's own memory
            a = y if type(y) is np.ndarray else (y.detach() if y.requires_grad else y).numpy()
            a = a.reshape(shape)
            return a.view(np.uint8) if as_uint8 else a
        return view, True
    itemsize = torch.empty((), dtype=dtype).element_size()
    byte_strides = tuple(s * itemsize for s in strides)

    def strided(y):
        a = y if type(y) is np.ndarray else (y.detach() if y.requires_grad else y).numpy()
        a = np.lib.stride_tricks.as_strided(a, shape, byte_strides)
        return a.view(np.uint8) if as_uint8 else a
    if len(shape) == 3 and shape[2] > 1 and strides[2] == 0:
        # broadcast along environments (the gradient of out.sum() or out.mean(), a flag per
        # step): numba compiles a loop that vectorises over environments only for arrays in
        # C order, so a C-ordered copy costs less than the loop saves (docs/benchmarks.md)
        return (lambda y: np.ascontiguousarray(strided(y))), False
    return strided, True


def _blocks(layout, threads: int) -> int:
    """How many blocks to cut a one-group grid ``[T, 1, B]`` into (``[T, blocks, B / blocks]``)
    for the loops' parallel version: a few per thread, of at least ``_MIN_BLOCK`` environments;
    1 (no parallel run) when ``B`` does not split so, 0 when the grid has two groups already."""
    if layout.two_level:
        return 0 if layout.B // layout.B_lo >= threads else 1
    for per_thread in (1, 2, 4):
        blocks = threads * per_thread
        if layout.B % blocks == 0 and layout.B // blocks >= _MIN_BLOCK:
            return blocks
    return 1


def _in_blocks(geometry: tuple, blocks: int) -> tuple:
    """A ``[T, 1, B, ...]`` geometry seen as ``[T, blocks, B / blocks, ...]``."""
    shape, strides = geometry
    lo = shape[2] // blocks
    return (shape[0], blocks, lo) + shape[3:], (strides[0], strides[2] * lo) + strides[2:]


#: environments apart in memory by at least this many bytes, together, make a step that
#: crosses them too far for the cache (see _steps_in_rows)
ROWS_MIN_BYTES = 2 << 20
#: fewer environments than this are never walked along their rows (see _steps_in_rows)
ROWS_MIN_ENVIRONMENTS = 32
#: rows closer than this many bytes are never walked one at a time (see _steps_in_rows)
ROW_MIN_BYTES = 2048
#: rows a whole number of these many bytes apart fall in the same cache sets (see _steps_in_rows)
PAGE_BYTES = 4096
#: rows one thread walks side by side where steps run along rows (see _steps_in_rows): a row's
#: steps form one chain, each step waiting on the one before (a load, a multiply-add), and
#: the chains of other rows fill that wait; with more rows, their streams crowd the cache sets
ROWS_TOGETHER = 4


def _row_blocks(B: int) -> int:
    """How many blocks of rows walked side by side (:data:`ROWS_TOGETHER`, or the most of
    2 and 1 that divides ``B``) a grid of ``B`` rows contiguous in time takes."""
    together = next(k for k in (ROWS_TOGETHER, 2, 1) if B % k == 0)
    return B // together


def _steps_in_rows(layout, tensors, kinds) -> bool:
    """Whether the loop should walk along environments' rows (blocks of :func:`_row_blocks`
    rows, :func:`_in_blocks`) rather than step across all environments: where the first
    series' steps are next to each other in memory (``[N, T]``, TorchRL's ``[B, T, 1]``) in
    a one-group grid, with ``ROWS_MIN_ENVIRONMENTS`` environments or more, rows
    ``ROW_MIN_BYTES`` or more apart, and rows whole pages apart (every row then falls in the
    same cache sets) or spanning ``ROWS_MIN_BYTES`` together: there a step across environments touches a new cache line
    per environment, and the lines of the next step are evicted before they are read.
    Elsewhere a step across environments stays in cache, and vectorises (the measured
    boundary is in docs/cpu.md)."""
    if layout.two_level or layout.B < ROWS_MIN_ENVIRONMENTS:
        return False
    first = next((t for t, k in zip(tensors, kinds) if t is not None and k == "series"), None)
    if first is None:
        return False
    s_t, _, s_lo = kernel_strides(layout, first, "series")
    row_bytes = s_lo * first.element_size()
    return s_t == 1 and row_bytes >= ROW_MIN_BYTES and (row_bytes % PAGE_BYTES == 0
                                                        or layout.B * row_bytes >= ROWS_MIN_BYTES)


#: A runner that may run in parallel runs the other version than the one it picked on every
#: this many calls, to follow changes in the machine's load (see :class:`_Versions`).
RECHECK_EVERY = 32
#: How many of a version's last timed calls its time is the least of (see :class:`_Versions`).
RECENT = 3


class _Versions:
    """Which version of the loop a runner's next call runs, serial or parallel: the one whose
    calls took less time lately.

    Other work on the CPUs slows the parallel version down (its threads wait for each other)
    and can make it slower than the serial one. Judged by the load average instead, a training
    loop's own calls counted as such work: after some seconds of back-to-back calls the load
    passes the threshold and every call would run serially (``tools/cpu_sustained.py``); and
    environments stepped between updates load the CPUs only while the loop does not run. So
    the runner times its own calls. The first ones take turns, parallel first, until each
    version has :data:`RECENT` timed calls (a version's first call is not timed: it may compile
    it); then the faster version runs, and the other again every :data:`RECHECK_EVERY` calls.
    Both versions compute the same bits.

    A version's time is the least of its last :data:`RECENT` timed calls: calls of one
    signature into fresh outputs (whose new pages fault in) and into ``out=`` take different
    times, and one such call or an average over both kinds favours the version that ran more
    calls of the faster kind, whatever the versions' own speeds."""

    __slots__ = ("recent", "runs", "calls")

    def __init__(self):
        self.recent = ([], [])  # the serial version's and the parallel one's last timed calls
        self.runs = [0, 0]
        self.calls = 0

    @property
    def seconds(self) -> list:
        """``[serial, parallel]``: each version's time lately (``None`` before it was timed)."""
        return [min(r) if r else None for r in self.recent]

    def parallel(self) -> bool:
        """Whether the next call runs the parallel version."""
        self.calls += 1
        if self.calls <= 2 * (RECENT + 1):  # the first calls take turns, so that both versions
            return self.calls % 2 == 1      # are timed under the same conditions
        serial, parallel = self.recent
        faster = min(parallel) <= min(serial)
        return faster != (self.calls % RECHECK_EVERY == 0)

    def note(self, parallel: bool, seconds: float) -> None:
        k = int(parallel)
        self.runs[k] += 1
        if self.runs[k] > 1:
            recent = self.recent[k]
            recent.append(seconds)
            if len(recent) > RECENT:
                del recent[0]


class CpuRunner:
    """``runner(tensors, outs, scalars)``: the CPU loop of ``op`` for arguments laid out as ``layout``.

    Calls of at least ``PARALLEL_MIN_ELEMENTS`` may run the loops' parallel version, where
    it is the faster one (:class:`_Versions`)."""

    def __init__(self, op, layout, compute_dtype: torch.dtype):
        self.op, self.layout, self.compute_dtype = op, layout, compute_dtype
        self.np_dtype = _NUMPY_DTYPE[compute_dtype]
        # blocks -> (input viewers, output viewers), for each version the runner may run; set on
        # the first call (see _prepare)
        self.views = None
        self.converts = None
        elements = layout.T * layout.B
        self.huge = elements * torch.empty((), dtype=compute_dtype).element_size() >= HUGE_PAGE_BYTES
        # the grid's blocks (_in_blocks; 0 or 1: the grid as it is) serially and in parallel
        # (None: never in parallel), set on the first call, which shows the strides
        self.serial_blocks, self.parallel_blocks = 1, None
        self.versions = None  # a _Versions where parallel_blocks is set
        self.replay = None  # the serial loop's call, noted on the first call (see _LoopCall)

    def _plan(self, tensors) -> None:
        layout = self.layout
        self.serial_blocks = _row_blocks(layout.B) if _steps_in_rows(layout, tensors, self.op.kinds) else 1
        if layout.T * layout.B >= PARALLEL_MIN_ELEMENTS and cpu_threads() > 1:
            blocks = self.serial_blocks if self.serial_blocks > 1 else _blocks(layout, cpu_threads())
            self.parallel_blocks = None if blocks == 1 else blocks
            self.versions = None if blocks == 1 else _Versions()

    def _prepare(self, tensors, outs) -> list:
        """Work out, from the first call's tensors, all that depends on the call's signature: the
        grid's blocks for the serial and the parallel loop and, for each, how every argument
        becomes a view; returns the outputs to compute into. The first call is the checked
        path's, on tensors; a later one (``_fast``'s replay) may pass the numpy arrays the user
        passed instead, which the views take but which have no torch strides to plan from."""
        if not HAVE_NUMBA:
            warnings.warn("numba is not installed: rlscan's CPU path runs as plain Python, slowly", stacklevel=3)
        # outputs not in the compute dtype are computed in a buffer of it, then copied
        self.converts = any(o is not None and o.dtype != self.compute_dtype for o in outs)
        self._plan(tensors)
        work = self._work(outs) if self.converts else outs
        blocks = (self.serial_blocks,) if self.parallel_blocks is None else (self.serial_blocks, self.parallel_blocks)
        self.views = {b: self._viewers(tensors, work, b) for b in blocks}  # last: a runner with views is ready
        return work

    def _viewers(self, tensors, work, blocks: int) -> tuple:
        cd, layout = self.compute_dtype, self.layout

        def geometry(x, kind):
            g = _geometry(x, layout, kind)
            return _in_blocks(g, blocks) if blocks > 1 else g

        inputs = [None if t is None else _viewer(t, geometry(t, k), k, cd, remember=True)
                  for t, k in zip(tensors, self.op.kinds)]
        outputs = [None if w is None else _viewer(w, geometry(w, "series"), "series", cd) for w in work]
        return inputs, outputs

    def _work(self, outs) -> list:
        cd = self.compute_dtype
        return [o if o is None or o.dtype == cd else torch.empty_like(o, dtype=cd) for o in outs]

    def __call__(self, tensors, outs, scalars) -> None:
        replay = self.replay
        if replay is not None and (scalars is replay.scalars or scalars == replay.scalars):
            replay(tensors, outs)
            return
        if self.views is None:
            work = self._prepare(tensors, outs)
        else:
            work = self._work(outs) if self.converts else outs
        if self.huge:
            for w in work:
                if type(w) is torch.Tensor:  # numpy advises its own large arrays
                    advise_huge_pages(w)
        versions = self.versions
        parallel = versions is not None and versions.parallel()
        blocks = self.parallel_blocks if parallel else self.serial_blocks
        viewers = self.views[blocks]
        arrays = [None if v is None else v(t) for v, t in zip(viewers[0], tensors)]
        views = [None if w is None else v(w) for v, w in zip(viewers[1], work)]
        start = time.perf_counter()
        if not parallel:
            noting = self.replay is None and self.parallel_blocks is None and not self.converts and not self.huge
            seen = _noting.seen = [] if noting else None
            try:
                self.op.cpu(self.layout, arrays, scalars, views, self.np_dtype)
            finally:
                _noting.seen = None
            if noting:
                self.replay = _LoopCall.of(seen, arrays, views, viewers, scalars)
        else:
            global _parallel_now
            _parallel_now = True
            try:
                self.op.cpu(self.layout, arrays, scalars, views, self.np_dtype)
            finally:
                _parallel_now = False
        if versions is not None:
            versions.note(parallel, time.perf_counter() - start)
        if self.converts:
            for o, w in zip(outs, work):
                if o is not w:
                    o.copy_(w)


class _LoopCall:
    """``replay(tensors, outs)``: the one serial loop call that an op's CPU function made,
    made again on new tensors with the same signature and scalars.

    Most ops' CPU functions (``OpSpec.cpu``) only convert the scalars and pass the views they
    are handed to one loop. Noting that call once (its loop, and which argument is which
    view) lets repeat calls go from the tensors to the loop without the op's Python between.
    A function that makes arrays of its own (Retrace's from an action table), or calls more
    than one loop, is not noted, and runs as it is every time."""

    __slots__ = ("loop", "template", "slots", "scalars")

    @classmethod
    def of(cls, seen: list, arrays: list, views: list, viewers: tuple, scalars):
        if len(seen) != 1:
            return None
        loop, args = seen[0]
        places = {id(a): (0, k) for k, a in enumerate(arrays) if a is not None}
        places.update({id(a): (1, k) for k, a in enumerate(views) if a is not None})
        slots = []
        for pos, a in enumerate(args):
            if isinstance(a, np.ndarray):
                if id(a) not in places:
                    return None  # an array the function made itself: not replayable
                side, k = places[id(a)]
                slots.append((pos, side, k, viewers[side][k]))
        self = cls()
        # the template holds none of this call's arrays (they would keep its tensors alive)
        self.template = [None if isinstance(a, np.ndarray) else a for a in args]
        self.loop, self.slots, self.scalars = loop, tuple(slots), scalars
        return self

    def __call__(self, tensors, outs) -> None:
        args = self.template.copy()
        sides = (tensors, outs)
        for pos, side, k, view in self.slots:
            args[pos] = view(sides[side][k])
        self.loop(*args)


def cpu_runner(op, layout, compute_dtype):
    """The runner of ``op``'s CPU loop for arguments laid out as ``layout`` (see :class:`CpuRunner`)."""
    return CpuRunner(op, layout, compute_dtype)


def cached_runners() -> list:
    """The CPU runners in the signature cache (:mod:`rlscan._cache`), oldest first."""
    from . import _cache

    return [v for v in list(_cache.CACHE.values()) if isinstance(v, CpuRunner)]
