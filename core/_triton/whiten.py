"""The kernels of :func:`rlscan.masked_whiten` (flat, contiguous tensors).

``block_stats`` reduces each block of ``BLOCK`` positions to the count, the sum and the
centred sum of squares of its kept positions (the block's own mean, in registers, so
that no large sums of squares cancel). ``finish``, one program, merges the blocks in
float64 with Chan et al.'s formula ``M2 = Σ M2_b + Σ n_b (μ_b − μ)²`` (or, from a scan
that gathered raw sums, ``M2 = Σ q − n μ²``) and writes ``(μ, rsqrt(M2 / (n − 1) + eps),
n)``. ``apply`` writes ``(x − μ) · s`` (``+ μ``), times the mask where asked. The
statistics never leave the device: three launches, whatever the size.
"""
import torch
import triton
import triton.language as tl

from .launch import split
from .primitives import scalar

BLOCK = 4096
FINISH_BLOCK = 1024


@triton.jit
def block_stats(X, M, PARTS, N, P, BLOCK: tl.constexpr, ACC: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    keep = (tl.load(M + offs, mask=inside, other=0) != 0) & inside
    x = tl.load(X + offs, mask=keep, other=0).to(ACC)
    n = tl.sum(keep.to(ACC))
    s = tl.sum(x)
    mean = s / tl.maximum(n, 1)
    d = tl.where(keep, x - mean, 0)
    tl.store(PARTS + pid, n)
    tl.store(PARTS + P + pid, s)
    tl.store(PARTS + 2 * P + pid, tl.sum(d * d))


@triton.jit
def finish(PARTS, STATS, P, eps_parts, CENTRED: tl.constexpr, BLOCK: tl.constexpr):
    """``PARTS = [3, P]``: per part the count, the sum and (``CENTRED``) the sum of squares
    about the part's mean, or the plain sum of squares; ``STATS = (μ, scale, n)``, float64."""
    n_acc = tl.zeros((BLOCK,), tl.float64)
    s_acc = tl.zeros((BLOCK,), tl.float64)
    for start in range(0, P, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < P
        n_acc += tl.load(PARTS + offs, mask=inside, other=0).to(tl.float64)
        s_acc += tl.load(PARTS + P + offs, mask=inside, other=0).to(tl.float64)
    n = tl.sum(n_acc)
    mean = tl.sum(s_acc) / n
    m2_acc = tl.zeros((BLOCK,), tl.float64)
    for start in range(0, P, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < P
        q = tl.load(PARTS + 2 * P + offs, mask=inside, other=0).to(tl.float64)
        if CENTRED:
            n_b = tl.load(PARTS + offs, mask=inside, other=0).to(tl.float64)
            s_b = tl.load(PARTS + P + offs, mask=inside, other=0).to(tl.float64)
            d = s_b / tl.maximum(n_b, 1) - mean
            q = q + tl.where(n_b > 0, n_b * d * d, 0)
        m2_acc += q
    m2 = tl.sum(m2_acc)
    if not CENTRED:
        m2 = tl.maximum(m2 - n * mean * mean, 0)
    tl.store(STATS, mean)
    tl.store(STATS + 1, 1 / tl.sqrt(m2 / (n - 1) + scalar(eps_parts, tl.float64)))
    tl.store(STATS + 2, n)


@triton.jit
def apply(X, OUT, STATS, M, N, SHIFT: tl.constexpr, TIMES_MASK: tl.constexpr, BLOCK: tl.constexpr,
          ACC: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    mean = tl.load(STATS).to(ACC)
    scale = tl.load(STATS + 1).to(ACC)
    y = (tl.load(X + offs, mask=inside, other=0).to(ACC) - mean) * scale
    if not SHIFT:
        y = y + mean
    if TIMES_MASK:
        y = tl.where(tl.load(M + offs, mask=inside, other=0) != 0, y, 0)
    tl.store(OUT + offs, y.to(OUT.dtype.element_ty), mask=inside)


def _acc(x: torch.Tensor):
    return tl.float64 if x.dtype == torch.float64 else tl.float32


def statistics(parts: torch.Tensor, eps: float, centred: bool) -> torch.Tensor:
    """``(μ, scale, n)`` (float64, on the device) from ``[3, P]`` partial sums (:func:`finish`)."""
    stats = torch.empty(3, device=parts.device, dtype=torch.float64)
    finish[(1,)](parts, stats, parts.shape[1], split(float(eps)), CENTRED=centred, BLOCK=FINISH_BLOCK, num_warps=4)
    return stats


def masked_whiten(x: torch.Tensor, m: torch.Tensor, shift_mean: bool, eps: float, check_count,
                  times_mask: bool = False) -> torch.Tensor:
    """``x`` whitened over the kept positions of ``m`` (both contiguous); ``times_mask``
    zeroes the positions ``m`` skips."""
    N = x.numel()
    P = triton.cdiv(N, BLOCK)
    if m.dtype == torch.bool:
        m = m.view(torch.uint8)
    parts = torch.empty(3, P, device=x.device, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
    block_stats[(P,)](x, m, parts, N, P, BLOCK=BLOCK, ACC=_acc(x), num_warps=8)
    stats = statistics(parts, eps, centred=True)
    out = apply_stats(x, stats, shift_mean, mask=m if times_mask else None)
    check_count(stats[2])
    return out


def apply_stats(x: torch.Tensor, stats: torch.Tensor, shift_mean: bool = True, mask=None, out=None) -> torch.Tensor:
    """``(x − μ) · s`` (``+ μ``; ``· (mask ≠ 0)`` with ``mask``) for a contiguous ``x``,
    ``stats = (μ, s, ...)`` on its device; into ``out`` (which may be ``x``) if given."""
    N = x.numel()
    if out is None:
        out = torch.empty_like(x)
    if mask is not None and mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)
    apply[(triton.cdiv(N, BLOCK),)](x, out, stats, x if mask is None else mask, N, SHIFT=shift_mean,
                                    TIMES_MASK=mask is not None, BLOCK=BLOCK, ACC=_acc(x), num_warps=8)
    return out
