"""Rows contiguous in time on the CPU (a language model's ``[B, T]`` responses): loops that
walk each row from its end in one iteration of a ``prange`` over the rows, carry their
state in registers, and gather the whitening's statistics on the way.

A row loop reads every input element once, in place: float32 and float64 as they are,
bfloat16 as its bits (``uint16``; a float32 is those bits shifted up 16, exactly), a bool
mask as bytes, any integer or float32/float64 mask as it is. Nothing is converted or copied
first, and no intermediate series (the next kept values ``W``) is written: the loop holds
them. Where the whitening follows, each row adds its kept steps' count and the sum and
sum of squares of ``x − c`` (``c`` the row's first kept value met, a shift against
cancellation) to its own row of a ``[B, 3]`` float64 array; :func:`whiten` merges the rows'
means and centred sums (Chan et al.'s formula) into the batch's mean ``μ`` and
Bessel-corrected variance ``σ²``, then one more ``prange`` writes
``(x − μ) · rsqrt(σ² + 1e-8)`` in the compute dtype (:func:`rlscan.masked_whiten`'s
arithmetic), with 0 where the mask is 0 if asked.

Each signature's runner picks the loops' serial or parallel version by its own recent
timings (``_cpu._Versions``): both compute the same bits, each row on one thread. Fresh
outputs of ``_cpu.HUGE_PAGE_BYTES`` or more are advised onto huge pages.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from . import _cache, _cpu
from ._cpu import njit, prange

#: Input dtypes the row loops read in place (others take the general path).
VALUE_DTYPES = (torch.float32, torch.float64, torch.bfloat16)
MASK_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float32,
               torch.float64)


#: Rows a thread walks side by side (the row loops are written for 4).
ROWS_AT_ONCE = 4

step_helper = _cpu._step_helper


@step_helper
def row_sums(sums, b, n, s, q, c):
    """Row ``b``'s ``[count, Σ(x − c), Σ(x − c)², c]``."""
    sums[b, 0] = n
    sums[b, 1] = s
    sums[b, 2] = q
    sums[b, 3] = c


def load_value(a, b, t, one):
    """``a[b, t]`` in ``one``'s dtype (float32 or float64); ``uint16`` arrays hold bfloat16 bits."""
    return one * 0 + a[b, t]


if _cpu.HAVE_NUMBA:
    from numba import types as numba_types
    from numba.extending import overload

    @overload(load_value, inline="always")
    def _load_value(a, b, t, one):
        wide = one == numba_types.float64
        if a.dtype == numba_types.uint16:
            if wide:
                return lambda a, b, t, one: np.float64(_cpu._float32_of_bits(np.uint32(a[b, t]) << 16))
            return lambda a, b, t, one: _cpu._float32_of_bits(np.uint32(a[b, t]) << 16)
        if wide:
            return lambda a, b, t, one: np.float64(a[b, t])
        return lambda a, b, t, one: np.float32(a[b, t])


def rows_of(x: torch.Tensor, time_dim: int):
    """``x`` as ``[B, T]`` rows with unit stride along time (a view), or ``None``."""
    if x.dim() != 2:
        return None
    rows = x if time_dim in (1, -1) else x.t()
    if rows.size(1) > 1 and rows.stride(1) != 1:
        return None
    return rows


def array(x: torch.Tensor) -> np.ndarray:
    """The loop's numpy view of a ``[B, T]`` tensor's memory (no copy)."""
    x = x.detach()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    if x.dtype == torch.bool:
        return x.view(torch.uint8).numpy()
    return x.numpy()


def readable(values=(), masks=()) -> bool:
    return (all(x is None or x.dtype in VALUE_DTYPES for x in values)
            and all(x is None or x.dtype in MASK_DTYPES for x in masks))


def new_rows(like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A fresh ``[B, T]`` output, on huge pages where it is large."""
    out = torch.empty(like.shape, dtype=dtype)
    if out.numel() * out.element_size() >= _cpu.HUGE_PAGE_BYTES:
        _cpu.advise_huge_pages(out)
    return out


def run(loop, key: tuple, shape: tuple, *args) -> None:
    """``loop(*args)`` over ``shape`` (``(prange iterations, elements)``) in its serial or
    parallel version, as the recent calls of ``key`` (a signature: the loop and its arrays'
    shapes and dtypes) found faster."""
    parallel = False
    versions = None
    iterations, elements = shape
    if iterations > 1 and elements >= _cpu.PARALLEL_MIN_ELEMENTS and _cpu.cpu_threads() > 1:
        versions = _cache.CACHE.get(("row loop",) + key)
        if versions is None:
            versions = _cache.CACHE.keep(("row loop",) + key, _cpu._Versions())
        parallel = versions.parallel()
    start = time.perf_counter()
    loop.version(None, parallel)(*args)
    if versions is not None:
        versions.note(parallel, time.perf_counter() - start)


def signature(*arrays) -> tuple:
    return tuple(None if a is None else (a.shape, a.strides, a.dtype.str) for a in arrays)


# ----------------------------------------------------------------------------- the whitening


@njit
def whiten_rows_loop(x, mask, mean, scale, zero_skipped, out):
    """``out = (x − mean) · scale``, 0 where ``mask`` is 0 if ``zero_skipped``; ``out`` may be ``x``."""
    B, T = x.shape
    zero = mean - mean
    for b in prange(B):
        for t in range(T):
            y = (x[b, t] - mean) * scale
            if zero_skipped:
                if mask[b, t] == 0:
                    y = zero
            out[b, t] = y


def statistics(sums: np.ndarray) -> tuple:
    """``(n, μ, σ²)`` of the batch from each row's ``[count, Σ(x − c), Σ(x − c)², c]``."""
    n_b, s_b, q_b, c_b = sums[:, 0], sums[:, 1], sums[:, 2], sums[:, 3]
    n = float(n_b.sum())
    if n < 2:
        raise ValueError(f"masked_whiten needs at least two positions with mask = 1 for the variance, got {int(n)}")
    kept = n_b > 0
    n_b, s_b, q_b, c_b = n_b[kept], s_b[kept], q_b[kept], c_b[kept]
    with np.errstate(invalid="ignore", over="ignore"):  # infinite inputs make NaN statistics, as the loop's
        mean_b = c_b + s_b / n_b
        m2_b = np.maximum(q_b - s_b * s_b / n_b, 0.0)
        mean = float((n_b * mean_b).sum() / n)
        m2 = float(m2_b.sum() + (n_b * (mean_b - mean) ** 2).sum())
    return n, mean, m2 / (n - 1)


def whiten(x: np.ndarray, sums: np.ndarray, one, mask=None, out=None, eps: float = 1e-8) -> None:
    """Standardise ``x`` (``[B, T]``) into ``out`` (default: in place) with the batch's
    statistics from the rows' ``sums``, in ``one``'s dtype; 0 where ``mask`` is 0 if given."""
    _, mean, var = statistics(sums)
    dtype = type(one)
    mean, scale = dtype(mean), dtype(1.0 / math.sqrt(var + eps))
    target = x if out is None else out
    zero_skipped = mask is not None
    run(whiten_rows_loop, ("whiten", signature(x, mask, target), zero_skipped), (x.shape[0], x.size), x,
        mask if zero_skipped else x, mean, scale, zero_skipped, target)


# ----------------------------------------------------------------------------- a value per row


@njit
def broadcast_rows_loop(x, mask, out, bad):
    """``out[b, t] = x[b] · mask[b, t]``: one value per row over its tokens (the product's
    bits: ``x`` times 0 or 1, the sign of a zero included); ``bad[b]`` counts the row's mask
    values other than 0 and 1, read on the way."""
    B, T = out.shape
    for b in prange(B):
        xb = x[b]
        e = 0
        for t in range(T):
            k = mask[b, t]
            if k != 0 and k != 1:
                e += 1
            out[b, t] = xb * k
        bad[b] = e


def broadcast(x: torch.Tensor, mask: torch.Tensor):
    """``(x.unsqueeze(-1) * mask, bad)`` (``x``: ``[B]``, ``mask``: ``[B, T]``) in torch's
    product dtype, written once into a fresh tensor, with the count of the mask's values other
    than 0 and 1 (one pass reads the mask for both); ``None`` where the row loop does not read
    the inputs in place (torch's product then runs)."""
    dtype = torch.promote_types(x.dtype, mask.dtype)
    if (x.device.type != "cpu" or mask.dim() != 2 or x.shape != mask.shape[:1] or dtype not in
            (torch.float32, torch.float64) or x.dtype not in (torch.float32, torch.float64)
            or mask.dtype not in MASK_DTYPES or (mask.size(1) > 1 and mask.stride(1) != 1)):
        return None
    out = new_rows(mask, dtype)
    a_x, a_m, a_out = x.detach().numpy(), array(mask), out.numpy()
    bad = np.zeros(a_out.shape[0], dtype=np.int64)
    run(broadcast_rows_loop, ("broadcast", signature(a_m, a_out), a_x.dtype.str), (a_out.shape[0], a_out.size), a_x,
        a_m, a_out, bad)
    return out, int(bad.sum())


# ----------------------------------------------------------------------------- rlscan.masked_normalize


@njit(reassociate=True)
def moment_rows_loop(x, mask, has_mask, sums):
    """``sums[b] = [n, Σ k·x, Σ k·(x − c)² − (Σ k·(x − c))²/n, bad]`` of row ``b`` in float64
    (``k``: 1 where ``mask`` is not 0, or everywhere without a mask; ``c`` the row's first kept
    value; ``bad`` the mask's values other than 0 and 1). The products with ``k`` are taken as
    the mask multiplies (a NaN at a skipped position makes the sums NaN). The sums are
    reassociated: the compiler adds them in SIMD lanes."""
    B, T = x.shape
    for b in prange(B):
        c = 0.0
        for t in range(T):
            if not has_mask or mask[b, t] != 0:
                c = np.float64(x[b, t])
                break
        n = s = d = q = 0.0
        bad = 0
        for t in range(T):
            k = 1.0
            if has_mask:
                m = mask[b, t]
                k = 1.0 if m != 0 else 0.0
                bad += (m != 0) & (m != 1)
            v = np.float64(x[b, t])
            u = (v - c) * k
            n += k
            s += v * k
            d += u
            q += u * u
        sums[b, 0] = n
        sums[b, 1] = s
        sums[b, 2] = max(q - d * d / n, 0.0) if n > 0 else 0.0
        sums[b, 3] = bad


def moment_rows(rows: torch.Tensor, mask) -> np.ndarray:
    """``[B, 4]`` float64 (:func:`moment_rows_loop`) of ``[B, T]`` rows contiguous in time."""
    a_x = array(rows)
    a_m = a_x if mask is None else array(mask)
    sums = np.empty((a_x.shape[0], 4), dtype=np.float64)
    run(moment_rows_loop, ("moments", signature(a_x, a_m), mask is None), (a_x.shape[0], a_x.size), a_x, a_m,
        mask is not None, sums)
    return sums


@njit
def normalize_rows_loop(x, mask, has_mask, mu, total, count, loo, denominator, keep_all, round_c, round_mean, narrow,
                        out):
    """``out = (x − μ_t) · k / denominator[b]``, rounded once into ``out``: ``μ_t`` is ``mu[b]``,
    or where ``loo[b]`` the mean of the others, ``(total − x) / max(count − 1, 1)`` where
    ``k = 1`` and ``total / count`` where ``k = 0``, rounded to float32 if ``round_mean``;
    ``x − μ_t`` is rounded to float32 if ``round_c``. ``narrow``: every operand is a float32
    (``x``, ``μ``, the divisor), and the arithmetic runs in float32, which rounds each step as
    float64's arithmetic rounded to float32 would. ``keep_all``: ``out = x``."""
    B, T = x.shape
    for b in prange(B):
        if keep_all:
            for t in range(T):
                out[b, t] = x[b, t]
        elif loo[b]:
            tot = total[b]
            cnt = count[b]
            regular = tot / cnt if cnt > 0 else 0.0
            others = max(cnt - 1.0, 1.0)
            d = denominator[b]
            for t in range(T):
                k = 1.0 if not has_mask or mask[b, t] != 0 else 0.0
                v = np.float64(x[b, t])
                m_t = (tot - v) / others if k != 0 else regular
                if round_mean:
                    m_t = np.float64(np.float32(m_t))
                c = v - m_t
                if round_c:
                    c = np.float64(np.float32(c))
                out[b, t] = c * k / d
        elif narrow:
            m32 = np.float32(mu[b])
            d32 = np.float32(denominator[b])
            if has_mask:  # branch-free loops, which the compiler vectorises
                for t in range(T):
                    out[b, t] = (np.float32(x[b, t]) - m32) * np.float32(mask[b, t] != 0) / d32
            else:
                for t in range(T):
                    out[b, t] = (np.float32(x[b, t]) - m32) / d32
        else:
            m64 = mu[b]
            d = denominator[b]
            for t in range(T):
                k = np.float64(mask[b, t] != 0) if has_mask else 1.0
                c = np.float64(x[b, t]) - m64
                if round_c:
                    c = np.float64(np.float32(c))
                out[b, t] = c * k / d


def normalize_rows(rows: torch.Tensor, mask, out: torch.Tensor, mu, total, count, loo, denominator, keep_all: bool,
                   round_c: bool, round_mean: bool, narrow: bool) -> None:
    """:func:`normalize_rows_loop` over ``[B, T]`` rows, the per-row arguments float64 ``[B]`` tensors."""
    a_x, a_out = array(rows), out.numpy()
    a_m = a_x if mask is None else array(mask)
    per_row = [np.ascontiguousarray(v.numpy()) for v in (mu, total, count, loo, denominator)]
    run(normalize_rows_loop, ("normalize", signature(a_x, a_m, a_out), mask is None), (a_x.shape[0], a_x.size),
        a_x, a_m, mask is not None, *per_row, keep_all, round_c, round_mean, narrow, a_out)


def _group_sums(x, mask, has_mask, lo, size):
    """``(n, Σ k·x, M2, bad)`` of rows ``lo .. lo + size − 1`` (M2 about the group's mean, from
    sums about its first kept value); compiled with reassociation, its sums in SIMD lanes."""
    T = x.shape[1]
    c = 0.0
    found = False
    for b in range(lo, lo + size):
        for t in range(T):
            if not has_mask or mask[b, t] != 0:
                c = np.float64(x[b, t])
                found = True
                break
        if found:
            break
    n = s = d = q = 0.0
    bad = 0
    for b in range(lo, lo + size):
        for t in range(T):
            k = 1.0
            if has_mask:
                m = mask[b, t]
                k = 1.0 if m != 0 else 0.0
                bad += (m != 0) & (m != 1)
            v = np.float64(x[b, t])
            u = (v - c) * k
            n += k
            s += v * k
            d += u
            q += u * u
    return n, s, (max(q - d * d / n, 0.0) if n > 0 else 0.0), bad


if _cpu.HAVE_NUMBA:
    _group_sums = _cpu.cached_njit(_group_sums, nogil=True, fastmath={"reassoc", "contract"})


@njit
def normalize_groups_loop(x, mask, has_mask, size, mean_group, loo, std_group, unbiased, eps, round32, out, stats):
    """:func:`normalize_rows_loop` for statistics of groups only (no batch level), each group
    of ``size`` consecutive rows in one iteration: its count, sum and centred sum of squares
    (about its first kept value), its mean and ``σ + eps`` as :mod:`rlscan.normalize` takes
    them, then its rows written, while they are still in the cache. ``stats[j] = [n, bad]``."""
    B, T = x.shape
    for j in prange(B // size):
        lo = j * size
        n, s, m2, bad = _group_sums(x, mask, has_mask, lo, size)
        stats[j, 0] = n
        stats[j, 1] = bad
        own = s / n if n > 0 else 0.0
        # the mean the rows subtract, and whether each position leaves itself out
        usable = mean_group and not (loo and size == 1) and (n > 1 if loo else n > 0)
        mean = own if usable else 0.0
        if round32:
            mean = np.float64(np.float32(mean))
        if std_group:
            if loo and usable:
                ratio = n / (n - 1.0)
                sq = m2 * ratio * ratio
            else:
                sq = m2 + n * (own - mean) * (own - mean)
            if unbiased:
                sigma = 1.0 if size == 1 or n <= 1 else np.sqrt(sq / (n - 1.0))
            else:
                sigma = np.sqrt(sq / n) if n > 0 else 1.0
            if round32:
                den = np.float64(np.float32(np.float32(sigma) + np.float32(eps)))
            else:
                den = sigma + eps
        else:
            den = 1.0
        others = max(n - 1.0, 1.0)
        regular = s / n if n > 0 else 0.0
        for b in range(lo, lo + size):
            if loo and usable:
                for t in range(T):
                    k = 1.0 if not has_mask or mask[b, t] != 0 else 0.0
                    v = np.float64(x[b, t])
                    m_t = (s - v) / others if k != 0 else regular
                    if round32:
                        m_t = np.float64(np.float32(m_t))
                        out[b, t] = np.float64(np.float32(v - m_t)) * k / den
                    else:
                        out[b, t] = (v - m_t) * k / den
            elif round32:
                m32 = np.float32(mean)
                d32 = np.float32(den)
                if has_mask:  # branch-free loops, which the compiler vectorises
                    for t in range(T):
                        out[b, t] = (np.float32(x[b, t]) - m32) * np.float32(mask[b, t] != 0) / d32
                else:
                    for t in range(T):
                        out[b, t] = (np.float32(x[b, t]) - m32) / d32
            elif has_mask:
                for t in range(T):
                    out[b, t] = (np.float64(x[b, t]) - mean) * np.float64(mask[b, t] != 0) / den
            else:
                for t in range(T):
                    out[b, t] = (np.float64(x[b, t]) - mean) / den


def normalize_groups(rows: torch.Tensor, mask, out: torch.Tensor, size: int, mean_group: bool, loo: bool,
                     std_group: bool, unbiased: bool, eps: float, round32: bool) -> np.ndarray:
    """:func:`normalize_groups_loop` over ``[B, T]`` rows; returns each group's ``[n, bad]``."""
    a_x, a_out = array(rows), out.numpy()
    a_m = a_x if mask is None else array(mask)
    stats = np.empty((a_x.shape[0] // size, 2), dtype=np.float64)
    run(normalize_groups_loop, ("normalize groups", signature(a_x, a_m, a_out), mask is None),
        (a_x.shape[0] // size, a_x.size), a_x, a_m, mask is not None, size, mean_group, loo, std_group, unbiased,
        eps, round32, a_out, stats)
    return stats
