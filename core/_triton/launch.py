"""Choosing launch settings for a shape, and launching the scan engine.

The strategy per shape (measured on an H200; see docs/benchmarks.md and
docs/perf-notes.md):

* many environments: one program per block of environments walks the whole time
  axis, carrying the state in registers;
* few environments and long sequences: time is split into chunks run by separate
  programs, in two launches (reduce the chunks, then fold and scan);
* ``exact``: one step at a time (``BLOCK_T = 1``) with fused multiply-adds off, in
  the reference loop's order.

The tile is laid out so that the contiguous axis of the inputs (environments for
``[T, N]``, time for ``[N, T]``) is the one read in wide, coalesced loads.
"""
from __future__ import annotations

import contextlib
import math
from typing import NamedTuple, Optional

import numpy as np
import torch

from .._backend import interpreting


class Config(NamedTuple):
    block_t: int
    block_b: int
    num_warps: int
    n_chunks: int
    chunk_len: int
    block_c: int


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


_forced: Optional[dict] = None


@contextlib.contextmanager
def forced_config(**settings):
    """Force launch settings (``block_t``, ``block_b``, ``n_chunks``, ...) inside a ``with``
    block. Tests use it to reach every kernel path with small shapes."""
    global _forced
    previous, _forced = _forced, settings
    try:
        yield
    finally:
        _forced = previous


# Largest BLOCK_C * BLOCK_B tile of chunk pairs one program folds in registers.
_MAX_CHUNK_TILE = 4096
_SM_COUNT: dict = {}


def _sm_count(device: torch.device) -> int:
    key = device.index if device.index is not None else torch.cuda.current_device()
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


def choose_config(T: int, B: int, time_contiguous: bool, exact: bool, device: torch.device) -> Config:
    """Launch settings for a ``[T, B]`` problem."""
    if exact:
        cfg = Config(1, min(128, _pow2(B)), 4, 1, T, 1)
    elif interpreting() or device.type != "cuda":
        cfg = Config(min(32, _pow2(T)), min(16, _pow2(B)), 4, 1, T, 1)
    else:
        cfg = _gpu_config(T, B, time_contiguous, _sm_count(device))
    if _forced:
        cfg = cfg._replace(**_forced)
        if "n_chunks" in _forced:
            chunk_len = math.ceil(T / cfg.n_chunks)
            chunk_len = math.ceil(chunk_len / cfg.block_t) * cfg.block_t
            n_chunks = max(1, math.ceil(T / chunk_len))
            cfg = cfg._replace(n_chunks=n_chunks, chunk_len=chunk_len, block_c=_pow2(n_chunks))
    return cfg


def _gpu_config(T: int, B: int, time_contiguous: bool, n_sm: int) -> Config:
    if time_contiguous:
        block_b = min(4, _pow2(B))
        block_t = min(1024, _pow2(T))
    else:
        block_b = min(64, _pow2(B))
        block_t = min(64, _pow2(T))
    num_warps = 4
    b_programs = math.ceil(B / block_b)
    want = 2 * n_sm
    n_tiles = math.ceil(T / block_t)
    if b_programs >= want or n_tiles < 4:
        return Config(block_t, block_b, num_warps, 1, T, 1)
    max_chunks = max(1, _MAX_CHUNK_TILE // block_b)
    n_chunks = min(n_tiles, math.ceil(want / b_programs), max_chunks)
    tiles_per_chunk = math.ceil(n_tiles / n_chunks)
    chunk_len = tiles_per_chunk * block_t
    n_chunks = math.ceil(T / chunk_len)
    return Config(block_t, block_b, num_warps, n_chunks, chunk_len, _pow2(n_chunks))


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

def _acc_dtype(dtype: torch.dtype):
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32


def _reach(x: torch.Tensor) -> int:
    """The largest element offset a kernel adds to the tensor's pointer."""
    return sum((n - 1) * abs(s) for n, s in zip(x.shape, x.stride()) if n > 1)


def launch(
    spec,
    layout,
    ins: tuple,
    in_strides: tuple,
    outs: tuple,
    out_strides: tuple,
    scalars: tuple,
    *,
    compute_dtype: torch.dtype,
    time_contiguous: bool,
    exact: bool = False,
    init=None,
    init_strides=(0, 0, 0),
):
    """Run the scan engine for one op (``spec = (COEFFS, EMIT, REVERSE)``) on a ``[T, B]`` grid."""
    from .engine import scan_kernel

    coeffs, emit, reverse = spec
    T, B = layout.T, layout.B
    device = outs[0].device
    cfg = choose_config(T, B, time_contiguous, exact, device)
    params = tuple(split(float(x)) for x in scalars)
    wide = any(_reach(x) >= 2**31 - 1 for x in ins + outs if x is not None)
    grid = (math.ceil(B / cfg.block_b), cfg.n_chunks)
    agg = None
    if cfg.n_chunks > 1:
        agg = torch.empty(2 * cfg.n_chunks * B, dtype=compute_dtype, device=device)
    common = dict(
        COEFFS=coeffs, EMIT=emit, REVERSE=reverse, ACC=_acc_dtype(compute_dtype),
        BLOCK_T=cfg.block_t, BLOCK_B=cfg.block_b, BLOCK_C=cfg.block_c,
        TWO_LEVEL=layout.two_level, WIDE=wide, num_warps=cfg.num_warps,
    )
    if exact:
        common["enable_fp_fusion"] = False
    args = (ins, in_strides, outs, out_strides, params, init, tuple(init_strides), agg,
            T, B, layout.B_lo, cfg.chunk_len, cfg.n_chunks)
    if cfg.n_chunks == 1:
        scan_kernel[grid](*args, PHASE=0, **common)
    else:
        scan_kernel[grid](*args, PHASE=1, **common)
        scan_kernel[grid](*args, PHASE=2, **common)
