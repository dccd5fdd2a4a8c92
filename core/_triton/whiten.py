"""The kernels of :func:`rlscan.masked_whiten` (flat, contiguous tensors).

``block_stats`` reduces each block of ``BLOCK`` positions to the count, the sum and the
centred sum of squares of its kept positions (the block's own mean, in registers, so
that no large sums of squares cancel). ``finish``, one program, merges the blocks in
float64 with Chan et al.'s formula ``M2 = Σ M2_b + Σ n_b (μ_b − μ)²`` and writes
``(μ, rsqrt(M2 / (n − 1) + eps), n)``. ``apply`` writes ``(x − μ) · s`` (``+ μ``), times
the mask where asked; from a scan's gathered sums (``SLOTS`` slots of ``n, Σ x, Σ x²``) it
computes ``μ`` and ``s`` itself, ``M2 = Σ x² − n μ²``. The statistics never leave the device.
"""
import torch
import triton
import triton.language as tl

from .launch import split
from .primitives import scalar

BLOCK = 4096
FINISH_BLOCK = 1024

# a scan's sums are spread over this many slots (chosen by program), so that the atomic
# additions of many programs do not queue on one address
SUM_SLOTS = tl.constexpr(64)


def sums_in_any_order() -> bool:
    """Whether a scan may gather the whitening's sums itself (:func:`add_sums`): float64 atomic
    additions in the order its programs finish, so the statistics' last bits can vary run to
    run. Not under ``torch.use_deterministic_algorithms(True)``, where the whitening adds them
    in a fixed order (:func:`rlscan.masked_whiten`)."""
    return not torch.are_deterministic_algorithms_enabled()


def new_sums(device) -> torch.Tensor:
    """Zeroed slots for the sums a scan gathers, ``[3, SUM_SLOTS]``: count, sum, sum of squares."""
    return torch.zeros(3, SUM_SLOTS.value, dtype=torch.float64, device=device)


@triton.jit
def add_sums(SUMS, counted, x):
    """Add the count, the sum and the sum of squares of ``x`` where ``counted`` to one of the
    program's slots of ``SUMS``: relaxed atomics, since only a later kernel reads them (the
    default, acq_rel, fenced each addition); the count is summed as an integer, exactly."""
    a = tl.where(counted, x, 0)
    slot = (tl.program_id(0) + 7 * tl.program_id(1)) % SUM_SLOTS
    tl.atomic_add(SUMS + slot, tl.sum(counted.to(tl.int32)).to(tl.float64), sem="relaxed")
    tl.atomic_add(SUMS + SUM_SLOTS + slot, tl.sum(a).to(tl.float64), sem="relaxed")
    tl.atomic_add(SUMS + 2 * SUM_SLOTS + slot, tl.sum(a * a).to(tl.float64), sem="relaxed")


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
def finish(PARTS, STATS, P, eps_parts, BLOCK: tl.constexpr):
    """``PARTS = [3, P]``: per block the count, the sum and the sum of squares about the
    block's mean; ``STATS = (μ, scale, n)``, float64."""
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
        n_b = tl.load(PARTS + offs, mask=inside, other=0).to(tl.float64)
        s_b = tl.load(PARTS + P + offs, mask=inside, other=0).to(tl.float64)
        d = s_b / tl.maximum(n_b, 1) - mean
        m2_acc += tl.load(PARTS + 2 * P + offs, mask=inside, other=0).to(tl.float64) + tl.where(n_b > 0, n_b * d * d, 0)
    tl.store(STATS, mean)
    tl.store(STATS + 1, 1 / tl.sqrt(tl.sum(m2_acc) / (n - 1) + scalar(eps_parts, tl.float64)))
    tl.store(STATS + 2, n)


@triton.jit
def apply(X, OUT, STATS, M, N, eps_parts, SHIFT: tl.constexpr, TIMES_MASK: tl.constexpr, SLOTS: tl.constexpr,
          BLOCK: tl.constexpr, ACC: tl.constexpr):
    """``STATS``: ``(μ, scale)``, or with ``SLOTS`` the ``[3, SLOTS]`` float64 sums a scan gathered."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    if SLOTS:  # a few hundred bytes, read from L2 by every program: no launch in between
        i = tl.arange(0, SLOTS)
        n = tl.sum(tl.load(STATS + i))
        mean64 = tl.sum(tl.load(STATS + SLOTS + i)) / n
        m2 = tl.maximum(tl.sum(tl.load(STATS + 2 * SLOTS + i)) - n * mean64 * mean64, 0)
        mean = mean64.to(ACC)
        scale = (1 / tl.sqrt(m2 / (n - 1) + scalar(eps_parts, tl.float64))).to(ACC)
    else:
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


def statistics(parts: torch.Tensor, eps: float) -> torch.Tensor:
    """``(μ, scale, n)`` (float64, on the device) from ``[3, P]`` block statistics (:func:`finish`)."""
    stats = torch.empty(3, device=parts.device, dtype=torch.float64)
    finish[(1,)](parts, stats, parts.shape[1], split(float(eps)), BLOCK=FINISH_BLOCK, num_warps=4)
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
    stats = statistics(parts, eps)
    out = torch.empty_like(x)
    _apply(x, out, stats, 0, eps, shift_mean, m if times_mask else None)
    check_count(stats[2])
    return out


def apply_sums(x: torch.Tensor, sums: torch.Tensor, eps: float, out: torch.Tensor, mask=None) -> None:
    """``x`` (contiguous) whitened into ``out`` (which may be ``x``) from the ``[3, SLOTS]``
    float64 sums a scan gathered; with ``mask``, 0 where it is 0."""
    if mask is not None and mask.dtype == torch.bool:
        mask = mask.view(torch.uint8)
    _apply(x, out, sums, sums.shape[1], eps, True, mask)


def _apply(x, out, stats, slots: int, eps: float, shift_mean: bool, mask) -> None:
    N = x.numel()
    apply[(triton.cdiv(N, BLOCK),)](x, out, stats, x if mask is None else mask, N, split(float(eps)), SHIFT=shift_mean,
                                    TIMES_MASK=mask is not None, SLOTS=slots, BLOCK=BLOCK, ACC=_acc(x), num_warps=8)
