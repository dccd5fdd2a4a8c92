"""The two kernels of :func:`rlscan.masked_whiten` (flat, contiguous tensors).

``block_stats`` reduces each block of ``BLOCK`` positions to the count, the sum and the
centred sum of squares of its kept positions (the block's own mean, in registers, so
that no large sums of squares cancel); the blocks merge in float64 with Chan et al.'s
formula ``M2 = Σ M2_b + Σ n_b (μ_b − μ)²``. ``apply`` writes ``(x − μ) · s`` (``+ μ``).
"""
import torch
import triton
import triton.language as tl

BLOCK = 4096


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
def apply(X, OUT, STATS, N, SHIFT: tl.constexpr, BLOCK: tl.constexpr, ACC: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    mean = tl.load(STATS).to(ACC)
    scale = tl.load(STATS + 1).to(ACC)
    y = (tl.load(X + offs, mask=inside, other=0).to(ACC) - mean) * scale
    if not SHIFT:
        y = y + mean
    tl.store(OUT + offs, y.to(OUT.dtype.element_ty), mask=inside)


def masked_whiten(x: torch.Tensor, m: torch.Tensor, shift_mean: bool, eps: float, check_count) -> torch.Tensor:
    N = x.numel()
    P = triton.cdiv(N, BLOCK)
    acc = tl.float64 if x.dtype == torch.float64 else tl.float32
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    if m.dtype == torch.bool:
        m = m.view(torch.uint8)
    parts = torch.empty(3, P, device=x.device, dtype=work)
    block_stats[(P,)](x, m, parts, N, P, BLOCK=BLOCK, ACC=acc, num_warps=8)
    n_b, s_b, m2_b = parts.double()
    n = n_b.sum()
    check_count(n)
    mean = s_b.sum() / n
    mean_b = s_b / n_b.clamp(min=1)
    var = (m2_b.sum() + (n_b * (mean_b - mean) ** 2).sum()) / (n - 1)
    return apply_stats(x, torch.stack([mean, torch.rsqrt(var + eps)]), shift_mean)


def apply_stats(x: torch.Tensor, stats: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """``(x − μ) · s`` (``+ μ``) for a contiguous ``x``, ``stats = (μ, s)`` on its device."""
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    acc = tl.float64 if x.dtype == torch.float64 else tl.float32
    N = x.numel()
    out = torch.empty_like(x)
    apply[(triton.cdiv(N, BLOCK),)](x, out, stats.to(work), N, SHIFT=shift_mean, BLOCK=BLOCK, ACC=acc, num_warps=8)
    return out
