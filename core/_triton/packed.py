"""The Triton kernels of packed sequences (flash-attention's varlen layout): ``[total_tokens]``
inputs, the sequences laid end to end, ``cu_seqlens = [S + 1]`` their offsets.

The result on sequence ``s`` is the padded masked op's on a ``[S, max_len]`` batch whose row
``s`` holds the sequence, masked (1, or ``mask``) inside and 0 past its end, with no
per-step ``terminated`` flags and the bootstrap value ``0 if terminated[s] else
bootstrap_value[s]`` (docs/semantics.md, "Skipped steps"). So every op here is a masked op:
a skipped token passes the recurrence through, and the value after a kept token ``W_{t+1}``
is the next kept token's value (the bootstrap value past the last).

``scan_kernel``: one program per sequence walks it from its end in tiles of ``BLOCK`` tokens
(aligned to ``BLOCK`` in the packed tensor, so that loads are whole lines). Each tile

1. finds each token's next kept position, ``N_t = min{j > t : j kept or j = end}``, as a
   min-scan of the positions (carried from tile to tile as the smallest position seen), and
   loads ``W_{t+1} = V[N_t]`` (the bootstrap value where ``N_t = end``): the second scanned
   series, as a selection, which rounds nothing;
2. builds the op's ``(α, β)`` in registers from the raw inputs as the padded masked kernels
   do (``ops/*/kernel.py``, ``coeffs_masked``), scans them with ``tl.associative_scan`` and
   applies the state carried from the tile after it;
3. writes the outputs, and with ``whiten`` adds the kept tokens' count, sum and sum of
   squares to the whitening's sums (``whiten.SUM_SLOTS`` slots, one per program modulo).

Tiles are scanned as the masked GAE's row kernel scans them (``ops.gae.kernel``): loaded
as runs of consecutive tokens, flipped in registers into an axis that runs back in time,
and scanned forward along it (Triton's reverse scan costs more shuffles).

``chunk_kernel``: where the sequences are few for the GPU, each is cut into chunks of
``CHUNK`` tokens walked by programs of their own, in two launches: each chunk composes its
tokens into an affine map of the state and the next kept value after it, then each folds
the maps of the chunks after it in its sequence into its carries and walks its tokens as
above (the section "long sequences in chunks").

``exact_kernel``: one program per sequence, one token at a time in the padded loop's order,
fused multiply-adds off, each step's arithmetic that of the sequential stripe kernel the
padded op runs in exact mode (``stripe_scan``, ``STRIPES = STEPS = 1``): bit for bit the
padded op's exact Triton path (up to the sign of a zero).

``gamma`` and ``lmbda``: a float (passed as float64 split in three float32 parts; with both
floats, ``γλ`` is rounded once from float64, as the padded kernels take it), a tensor of
length ``S`` (one per sequence) or ``total_tokens`` (one per token).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .. import _cache
from .._backend import interpreting
from ..ops.gae.kernel import ROW_RUN, _backward_in_time, _forward_in_time, _row_sums, _whole_tile
from .launch import _acc_dtype, direct_launch, first_launch, settings_key, split
from .primitives import compose, scalar
from .whiten import SUM_SLOTS, new_sums, sums_in_any_order

#: the kinds of op, as the kernels number them, and their outputs
KINDS = {"gae": 0, "td_lambda": 1, "discounted_returns": 2, "kept_returns": 3}
OUTPUTS = {"gae": 2, "td_lambda": 1, "discounted_returns": 1, "kept_returns": 2}

#: tests and tools only: the tile length (a power of two, at least 4 · ROW_RUN), and the
#: number of tiles whose loads Triton's software pipelining overlaps (``tl.range(num_stages=)``)
FORCE_BLOCK: Optional[int] = None
FORCE_STAGES: Optional[int] = None
#: tests and tools only: the chunk length (a multiple of the tile's), 0 for one program per sequence
FORCE_CHUNK: Optional[int] = None

#: the chunk length where long sequences are split (``chunk_kernel``)
CHUNK = 4096
#: chunks where there are fewer sequences than this many per SM: their walks would leave SMs idle
CHUNKS_BELOW_SEQUENCES_PER_SM = 2


# ----------------------------------------------------------------------------- kernel pieces

@triton.jit
def _smaller(a, b):
    return tl.minimum(a, b)


@triton.jit
def _bounds(CU, s, WIDE: tl.constexpr):
    """Sequence ``s``'s first token and the token after its last."""
    if WIDE:
        return tl.load(CU + s).to(tl.int64), tl.load(CU + s + 1).to(tl.int64)
    else:
        return tl.load(CU + s).to(tl.int32), tl.load(CU + s + 1).to(tl.int32)


@triton.jit
def _bootstrap(BOOT, TERM, s, ACC: tl.constexpr):
    """``W_end``: the bootstrap value, 0 where the sequence terminated (or none was given)."""
    boot = tl.zeros([], ACC)
    if BOOT is not None:
        boot = tl.load(BOOT + s).to(ACC)
        if TERM is not None:
            boot = tl.where(tl.load(TERM + s) != 0, 0, boot)
    return boot


@triton.jit
def _coef(P, s, t, inside, BY: tl.constexpr, parts, ACC: tl.constexpr):
    """γ or λ at tokens ``t``: the float (``BY = 0``), sequence ``s``'s (1) or each token's (2)."""
    if BY == 0:
        return scalar(parts, ACC)
    elif BY == 1:
        return tl.load(P + s).to(ACC)
    else:
        return tl.load(P + t, mask=inside, other=0).to(ACC)


@triton.jit
def _coefficients(r, v, w_next, kept, gamma, lmbda, gamma_lmbda, KIND: tl.constexpr):
    """The masked op's ``(α, β)``, in the padded kernels' order of operations (``ν = 1``):
    GAE ``δ = r + γ W_{t+1} − V``, ``β = γλ``; TD(λ) ``α = r + γ (1 − λ) W_{t+1}``, ``β = γλ``;
    the discounted and kept returns ``α = r``, ``β = γ``; ``(0, 1)`` where skipped."""
    if KIND == 0:
        alpha = r + gamma * w_next - v
        beta = gamma_lmbda
    elif KIND == 1:
        alpha = r + gamma * (1 - lmbda) * w_next
        beta = gamma_lmbda
    else:
        alpha = r
        beta = gamma
    return tl.where(kept, alpha, 0), tl.where(kept, beta, 1)


@triton.jit
def _gamma_lmbda(gamma, lmbda, scalars, GAMMA_BY: tl.constexpr, LMBDA_BY: tl.constexpr, ACC: tl.constexpr):
    """``γλ``: rounded once from float64 where both are floats, else the product in ``ACC``."""
    if GAMMA_BY == 0 and LMBDA_BY == 0:
        return scalar(scalars[2], ACC)
    else:
        return gamma * lmbda


# ----------------------------------------------------------------------------- the tile kernels

@triton.jit
def _then_with_edge(a_later, k_later, e_later, a_now, k_now, e_now):
    """:func:`compose` of two reverse runs for ``(a, k)``, and for ``e``, a second offset
    that the same ``k`` carries (the coefficient of ``W`` after a chunk)."""
    return a_now + k_now * a_later, k_now * k_later, e_now + k_now * e_later


@triton.jit
def _walk(ins, outs, scalars, s, lo, hi, carry, w_after, count, total, squares, KIND: tl.constexpr,
          GAMMA_BY: tl.constexpr, LMBDA_BY: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
          STAGES: tl.constexpr, SUMMARY: tl.constexpr):
    """Tokens ``[lo, hi)`` of sequence ``s`` walked from ``hi`` in tiles of ``BLOCK`` (aligned
    in the packed tensor), from the state ``carry`` after them and the next kept value
    ``w_after`` (``W`` at ``hi``). Writes the outputs (and adds to the sums), or with
    ``SUMMARY`` writes nothing and composes the range: returns ``(x, q, p, first)`` such that
    the state before the range is ``x + p · carry + q · w_after`` for any ``carry`` and
    ``w_after`` (``x`` computed with ``w_after = 0``, which the caller passes), and ``first``
    the first kept position (``hi`` where none is)."""
    R, V, M, TERM, BOOT, GAMMA, LMBDA, CU = ins
    OUT, OUT2, SUMS = outs
    after_tile = hi  # the first kept position (or hi) after the tile
    first = hi
    q = tl.zeros([1], ACC)
    p = tl.full([1], 1, ACC)
    last_tile = (hi - 1) // BLOCK  # hi >= 1 where the range holds a token
    n_tiles = tl.where(hi > lo, last_tile - lo // BLOCK + 1, 0)
    for i in tl.range(n_tiles, num_stages=STAGES):
        base = (last_tile - i) * BLOCK
        t = base + (BLOCK // ROW_RUN - 1 - tl.arange(0, BLOCK // ROW_RUN)[:, None]) * ROW_RUN \
            + tl.arange(0, ROW_RUN)[None, :]
        inside = (t >= lo) & (t < hi)
        r = tl.load(R + t, mask=inside, other=0).to(ACC)
        if M is not None:
            kept = (tl.load(M + t, mask=inside, other=0) != 0) & inside
        else:
            kept = inside
        gamma = _coef(GAMMA, s, t, inside, GAMMA_BY, scalars[0], ACC)
        v = r * 0
        w_next = r * 0
        lmbda = r * 0
        gamma_lmbda = gamma
        nxt = t + 1
        if KIND == 0 or KIND == 1:
            lmbda = _coef(LMBDA, s, t, inside, LMBDA_BY, scalars[1], ACC)
            gamma_lmbda = _gamma_lmbda(gamma, lmbda, scalars, GAMMA_BY, LMBDA_BY, ACC)
            v = tl.load(V + t, mask=inside, other=0).to(ACC)
            if M is not None:
                # N_t: the next kept position after t (or hi), a min-scan carried from the tile after
                kept_next = (tl.load(M + nxt, mask=inside & (nxt < hi), other=0) != 0) | (nxt == hi)
                mark = tl.where(kept_next & inside, nxt, hi)
                after_t = tl.associative_scan(_backward_in_time(mark, BLOCK), 0, _smaller)
                nxt = tl.minimum(_forward_in_time(after_t, BLOCK), after_tile)
                after_tile = tl.minimum(after_tile, tl.min(tl.min(mark, axis=1), axis=0))
            w_next = tl.load(V + nxt, mask=inside & (nxt < hi), other=0).to(ACC)
            w_next = tl.where(nxt == hi, w_after, w_next)
        alpha, beta = _coefficients(r, v, w_next, kept, gamma, lmbda, gamma_lmbda, KIND)
        if SUMMARY:
            first = tl.minimum(first, tl.min(tl.min(tl.where(kept, t, hi), axis=1), axis=0))
            # the last kept token's W_{t+1} is w_after: its coefficient there, carried as a third series
            if KIND == 0:
                edge = tl.where(kept & (nxt == hi), gamma, 0)
            elif KIND == 1:
                edge = tl.where(kept & (nxt == hi), gamma * (1 - lmbda), 0)
            else:
                edge = r * 0
            a, k, e = tl.associative_scan((_backward_in_time(alpha, BLOCK), _backward_in_time(beta, BLOCK),
                                           _backward_in_time(edge, BLOCK)), 0, _then_with_edge)
            carry = _whole_tile(a + k * carry, BLOCK)
            q = _whole_tile(e + k * q, BLOCK)
            p = _whole_tile(k, BLOCK) * p
        else:
            a, k = tl.associative_scan((_backward_in_time(alpha, BLOCK), _backward_in_time(beta, BLOCK)), 0,
                                       compose)
            A = a + k * carry
            carry = _whole_tile(A, BLOCK)
            A = _forward_in_time(A, BLOCK)
            if KIND == 0:
                tl.store(OUT + t, A, mask=inside)
                tl.store(OUT2 + t, A + v, mask=inside)
            elif KIND == 3:
                A = tl.where(kept, A, 0)
                tl.store(OUT + t, A, mask=inside)
            else:
                tl.store(OUT + t, A, mask=inside)
            if SUMS is not None:
                counted = tl.where(kept, A, 0)
                count += kept.to(tl.int32)
                total += counted
                squares += counted * counted
    return carry, q, p, first, count, total, squares


@triton.jit
def _start_state(boot, KIND: tl.constexpr, ACC: tl.constexpr):
    """The state after a sequence's last token: ``G_end = W_end`` for TD(λ) and the discounted
    return, 0 for GAE and the kept return."""
    if KIND == 1 or KIND == 2:
        return tl.zeros([1], ACC) + boot
    else:
        return tl.zeros([1], ACC)


@triton.jit
def scan_kernel(ins, outs, scalars, KIND: tl.constexpr, GAMMA_BY: tl.constexpr, LMBDA_BY: tl.constexpr,
                ACC: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None):
    """Sequence ``program_id(0)``, walked from its end in tiles of ``BLOCK`` tokens (``STAGES``:
    Triton's software pipelining of the tiles' loads, ``tl.range(num_stages=)``).
    ``ins = (R, V, M, TERM, BOOT, GAMMA, LMBDA, CU)``, ``outs = (OUT, OUT2, SUMS)``: GAE writes
    ``Â`` and ``Â + V``, TD(λ) and the discounted return ``G``, the kept return ``G · m``;
    with ``SUMS``, the kept ``Â`` (or ``G``) are counted, summed and squared into it."""
    s = tl.program_id(0)
    start, end = _bounds(ins[7], s, WIDE)
    boot = _bootstrap(ins[4], ins[3], s, ACC)
    count = tl.zeros([BLOCK // ROW_RUN, ROW_RUN], tl.int32)
    total = tl.zeros([BLOCK // ROW_RUN, ROW_RUN], ACC)
    squares = tl.zeros([BLOCK // ROW_RUN, ROW_RUN], ACC)
    _, _, _, _, count, total, squares = _walk(ins, outs, scalars, s, start, end, _start_state(boot, KIND, ACC), boot,
                                              count, total, squares, KIND, GAMMA_BY, LMBDA_BY, ACC, BLOCK, STAGES,
                                              False)
    _row_sums(outs[2], s % SUM_SLOTS, count, total, squares)


# ----------------------------------------------------------------------------- long sequences in chunks
#
# A sequence longer than a chunk (``CHUNK`` tokens, chunks aligned in the packed tensor) is
# walked by one program per chunk, in two launches. ``PHASE=1``: each chunk but a sequence's
# first composes its tokens into ``(x, p, q, y, c)``: the state before it is ``x + p·A + q·W``
# and the next kept value before it ``y + c·W``, for the state ``A`` and next kept value
# ``W`` after it. ``PHASE=2``: each chunk folds the compositions of the chunks after it in its
# sequence into its ``(A, W)``, then walks its tokens and writes. ``work_kernel`` numbers
# the chunks first (``OFF[s]``: the first chunk of sequence ``s``), with no synchronisation:
# the launches cover at most ``S + cdiv(total, CHUNK)`` chunks, and the programs past the
# last do nothing.

@triton.jit(do_not_specialize=["S"])
def work_kernel(CU, OFF, S, CHUNK: tl.constexpr, BLOCK_S: tl.constexpr, WIDE: tl.constexpr):
    """``OFF[0] = 0``, ``OFF[s + 1] = OFF[s] +`` the number of chunks sequence ``s`` touches."""
    done = tl.zeros([], tl.int32)
    tl.store(OFF, done)
    for base in range(0, S, BLOCK_S):
        s = base + tl.arange(0, BLOCK_S)
        inside = s < S
        if WIDE:
            start = tl.load(CU + s, mask=inside, other=0).to(tl.int64)
            end = tl.load(CU + s + 1, mask=inside, other=0).to(tl.int64)
        else:
            start = tl.load(CU + s, mask=inside, other=0).to(tl.int32)
            end = tl.load(CU + s + 1, mask=inside, other=0).to(tl.int32)
        n = tl.where(inside & (end > start), (tl.maximum(end, 1) - 1) // CHUNK - start // CHUNK + 1, 0).to(tl.int32)
        tl.store(OFF + s + 1, tl.cumsum(n, 0) + done, mask=inside)
        done += tl.sum(n)


@triton.jit(do_not_specialize=["S"])
def chunk_kernel(ins, outs, scalars, OFF, PARTS, S, KIND: tl.constexpr, GAMMA_BY: tl.constexpr,
                 LMBDA_BY: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr,
                 CHUNK: tl.constexpr, PHASE: tl.constexpr, STAGES: tl.constexpr = None):
    """Chunk ``program_id(0)`` of the numbering ``OFF``; ``PARTS``: ``[chunks, 5]`` in ``ACC``,
    each chunk's ``(x, p, q, y, c)``."""
    V = ins[1]
    chunk = tl.program_id(0)
    count = tl.zeros([BLOCK // ROW_RUN, ROW_RUN], tl.int32)
    total = tl.zeros([BLOCK // ROW_RUN, ROW_RUN], ACC)
    squares = tl.zeros([BLOCK // ROW_RUN, ROW_RUN], ACC)
    if chunk < tl.load(OFF + S):
        # the sequence: the last s with OFF[s] <= chunk (a binary search)
        lo_s = tl.zeros([], tl.int32)
        hi_s = tl.zeros([], tl.int32) + S
        while hi_s - lo_s > 1:
            mid = (lo_s + hi_s) // 2
            below = tl.load(OFF + mid) <= chunk
            lo_s = tl.where(below, mid, lo_s)
            hi_s = tl.where(below, hi_s, mid)
        s = lo_s
        start, end = _bounds(ins[7], s, WIDE)
        first_chunk = tl.load(OFF + s)
        last_chunk = tl.load(OFF + s + 1) - 1
        j = (start // CHUNK + (chunk - first_chunk)).to(start.dtype)
        lo = tl.maximum(start, j * CHUNK)
        hi = tl.minimum(end, (j + 1) * CHUNK)
        if PHASE == 1:
            if chunk > first_chunk:  # a sequence's first chunk: no chunk before it reads its composition
                x, q, p, first, _, _, _ = _walk(ins, outs, scalars, s, lo, hi, tl.zeros([1], ACC),
                                                tl.zeros([], ACC), count, total, squares, KIND, GAMMA_BY,
                                                LMBDA_BY, ACC, BLOCK, STAGES, True)
                none_kept = first == hi
                y = tl.zeros([1], ACC)
                if KIND == 0 or KIND == 1:
                    y += tl.load(V + first + tl.arange(0, 1), mask=(tl.arange(0, 1) == 0) & ~none_kept,
                                 other=0).to(ACC)
                c = tl.zeros([1], ACC) + none_kept.to(ACC)
                part = PARTS + chunk.to(tl.int64) * 5 + tl.arange(0, 1)
                tl.store(part, x)
                tl.store(part + 1, p)
                tl.store(part + 2, q)
                tl.store(part + 3, y)
                tl.store(part + 4, c)
        else:
            boot = _bootstrap(ins[4], ins[3], s, ACC)
            A = _start_state(boot, KIND, ACC)
            W = tl.zeros([1], ACC) + boot
            for i in range(last_chunk - chunk):
                part = PARTS + (last_chunk - i).to(tl.int64) * 5 + tl.arange(0, 1)
                A = tl.load(part) + tl.load(part + 1) * A + tl.load(part + 2) * W
                W = tl.load(part + 3) + tl.load(part + 4) * W
            w_after = tl.sum(W, axis=0)
            _, _, _, _, count, total, squares = _walk(ins, outs, scalars, s, lo, hi, A, w_after, count, total,
                                                      squares, KIND, GAMMA_BY, LMBDA_BY, ACC, BLOCK, STAGES, False)
    if PHASE == 2:
        _row_sums(outs[2], chunk % SUM_SLOTS, count, total, squares)


# ----------------------------------------------------------------------------- the exact kernel

@triton.jit
def exact_kernel(ins, outs, scalars, KIND: tl.constexpr, GAMMA_BY: tl.constexpr, LMBDA_BY: tl.constexpr,
                 ACC: tl.constexpr, WIDE: tl.constexpr):
    """Sequence ``program_id(0)``, one token at a time from its end (launched with fused
    multiply-adds off). Each step is the padded exact path's: the next kept value ``W`` by
    the selection scan ``W_t = α + β W_{t+1}`` (``α = m V``, ``β = 1 − m``), then the op's
    step as the sequential stripe kernel computes it: ``a = α + β · 0``, ``k = β · 1``, the
    state carried in ``a · 0 + (k · 0 + 1) · carry``, the output ``α + β · state``, and the
    carry on ``a + k · carry``."""
    R, V, M, TERM, BOOT, GAMMA, LMBDA, CU = ins
    OUT, OUT2, SUMS = outs
    s = tl.program_id(0)
    start, end = _bounds(CU, s, WIDE)
    boot = _bootstrap(BOOT, TERM, s, ACC)
    if KIND == 1 or KIND == 2:
        carry = boot
    else:
        carry = tl.zeros([], ACC)
    w_after = boot
    zero = tl.zeros([], ACC)
    for i in range(end - start):
        t = end - 1 - i
        r = tl.load(R + t).to(ACC)
        if M is not None:
            kept = tl.load(M + t) != 0
        else:
            kept = t >= 0
        gamma = _coef(GAMMA, s, t, t >= 0, GAMMA_BY, scalars[0], ACC)
        v = zero
        lmbda = zero
        gamma_lmbda = gamma
        w_next = w_after
        if KIND == 0 or KIND == 1:
            lmbda = _coef(LMBDA, s, t, t >= 0, LMBDA_BY, scalars[1], ACC)
            gamma_lmbda = _gamma_lmbda(gamma, lmbda, scalars, GAMMA_BY, LMBDA_BY, ACC)
            v = tl.load(V + t).to(ACC)
            w_after = tl.where(kept, v, zero) + tl.where(kept, zero, zero + 1) * w_after
        alpha, beta = _coefficients(r, v, w_next, kept, gamma, lmbda, gamma_lmbda, KIND)
        a = alpha + beta * zero
        k = beta * (zero + 1)
        state = a * 0 + (k * 0 + 1) * carry
        state = alpha + beta * state
        carry = a + k * carry
        if KIND == 0:
            tl.store(OUT + t, state)
            tl.store(OUT2 + t, state + v)
        elif KIND == 3:
            tl.store(OUT + t, tl.where(kept, state, zero))
        else:
            tl.store(OUT + t, state)


# ----------------------------------------------------------------------------- launching

def _tile(total: int, S: int) -> tuple:
    """``(BLOCK, num_warps)`` for sequences of ``total / S`` tokens on average: a tile about
    that long (128 to 2048 tokens), so that short sequences do not scan empty tiles."""
    if FORCE_BLOCK is not None:
        block = FORCE_BLOCK
    elif interpreting():
        block = 16
    else:
        block = min(2048, max(128, triton.next_power_of_2(max(1, total // max(1, S)))))
    return block, min(4, max(1, block // 256))


_SM_COUNT: dict = {}


def _chunk(N: int, S: int, block: int, device: torch.device) -> int:
    """The chunk length to split sequences into, or 0 for one program per sequence: chunks
    where the sequences are fewer than ``CHUNKS_BELOW_SEQUENCES_PER_SM`` per SM (then one
    program per sequence would leave SMs idle, or wait on its longest sequence)."""
    chunk = FORCE_CHUNK
    if chunk is None:
        if interpreting() or device.type != "cuda":
            return 0
        if device.index not in _SM_COUNT:
            _SM_COUNT[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
        chunk = CHUNK if S < CHUNKS_BELOW_SEQUENCES_PER_SM * _SM_COUNT[device.index] else 0
    return -(-chunk // block) * block if chunk else 0


def _flags(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return x.view(torch.uint8) if x is not None and x.dtype == torch.bool else x


def acc_is_64(compute_dtype: torch.dtype) -> bool:
    return compute_dtype == torch.float64


def _coef_arg(x, S: int, total: int) -> tuple:
    """``(value, tensor, by)`` of γ or λ: by 0 (a float), 1 (per sequence) or 2 (per token; a
    tensor of ``total`` values is read per token where ``S == total``, as the CPU loops do)."""
    if x is None or not isinstance(x, torch.Tensor):
        return (0.0 if x is None else float(x)), None, 0
    return 0.0, x, 2 if x.numel() == total else 1


def _launch(signature, fn, grid, args, constexprs, warps, device_index) -> None:
    """Through Triton's ``JITFunction`` the first time for a signature, then the compiled
    kernel's launcher directly (``launch.direct_launch``)."""
    key = ("packed",) + signature + settings_key()
    compiled = _cache.CACHE.get(key)
    if compiled is not None:
        direct_launch(compiled, grid, device_index, args)
        return
    compiled = first_launch(fn, grid, args, constexprs, warps)
    if compiled is not None:
        _cache.CACHE.keep(key, compiled)


def _where(x: Optional[torch.Tensor]):
    """What a kernel specialises a pointer on (besides its being None): dtype, 16-byte alignment."""
    return None if x is None else (x.dtype, x.data_ptr() % 16 == 0)


def reaches_far(N: int) -> bool:
    """Whether positions in a packed tensor of ``N`` tokens need 64-bit arithmetic (a tile
    reads up to a tile past the end)."""
    return N + 4096 >= 2**31


def launch(kind: str, cu_seqlens: torch.Tensor, *, rewards: torch.Tensor, values=None, mask=None, terminated=None,
           bootstrap_value=None, gamma, lmbda=None, exact: bool = False, sums: bool = False,
           compute_dtype: torch.dtype) -> tuple:
    """The kernel's outputs for :func:`scan`'s arguments, not whitened: GAE ``(Â, Â + V)``,
    TD(λ) and the discounted return ``(G,)``, the kept return ``(G · m,)``; and, with ``sums``
    (not in exact mode), the ``[3, SUM_SLOTS]`` float64 count, sum and sum of squares of the
    first output's kept tokens (else ``None``)."""
    code = KINDS[kind]
    N, S = rewards.numel(), cu_seqlens.numel() - 1
    device = rewards.device
    new = tuple(torch.empty(N, dtype=compute_dtype, device=device) for _ in range(2 if code == 0 else 1))
    g_value, g_tensor, g_by = _coef_arg(gamma, S, N)
    l_value, l_tensor, l_by = _coef_arg(lmbda if code < 2 else None, S, N)
    stats = new_sums(device) if sums and not exact else None
    if N and S:
        ins = (rewards, values if code < 2 else None, _flags(mask), _flags(terminated) if code < 3 else None,
               bootstrap_value if code < 3 else None, g_tensor, l_tensor, cu_seqlens)
        outs = (new[0], new[1] if code == 0 else None, stats)
        scalars = (split(g_value), split(l_value), split(g_value * l_value))
        wide = reaches_far(N)
        common = dict(KIND=code, GAMMA_BY=g_by, LMBDA_BY=l_by, ACC=_acc_dtype(compute_dtype), WIDE=wide)
        sig = (kind, exact, g_by, l_by, str(compute_dtype), wide, device.index, tuple(map(_where, ins + outs)))
        if exact:
            _launch(sig, exact_kernel, (S, 1, 1), (ins, outs, scalars), dict(common, enable_fp_fusion=False), 1,
                    device.index)
        else:
            block, warps = _tile(N, S)
            chunk = _chunk(N, S, block, device)
            if not chunk:
                _launch(sig + (block, FORCE_STAGES), scan_kernel, (S, 1, 1), (ins, outs, scalars),
                        dict(common, BLOCK=block, STAGES=FORCE_STAGES), warps, device.index)
            else:
                n_chunks = S + triton.cdiv(N, chunk)  # at least the chunks the sequences touch
                off = torch.empty(S + 1, dtype=torch.int32, device=device)
                parts = torch.empty(5 * n_chunks, dtype=torch.float64 if acc_is_64(compute_dtype) else torch.float32,
                                    device=device)
                _launch(("work", chunk, wide, device.index, _where(cu_seqlens)), work_kernel, (1, 1, 1),
                        (cu_seqlens, off, S), dict(CHUNK=chunk, BLOCK_S=1024, WIDE=wide), 4, device.index)
                for phase in (1, 2):
                    _launch(sig + (block, FORCE_STAGES, chunk, phase), chunk_kernel, (n_chunks, 1, 1),
                            (ins, outs, scalars, off, parts, S),
                            dict(common, BLOCK=block, CHUNK=chunk, PHASE=phase, STAGES=FORCE_STAGES), warps,
                            device.index)
    return new, stats


def scan(kind: str, cu_seqlens: torch.Tensor, *, rewards: torch.Tensor, values=None, mask=None, terminated=None,
         bootstrap_value=None, gamma, lmbda=None, exact: bool = False, whiten: bool = False,
         compute_dtype: torch.dtype) -> tuple:
    """The op ``kind`` (``"gae"``, ``"td_lambda"``, ``"discounted_returns"``, ``"kept_returns"``)
    on packed sequences, the inputs already checked (1-D, stride 1, one device):

    * GAE: ``(advantages, returns)``; with ``whiten``, the advantages standardised over the
      kept tokens of all sequences (``masked_whiten(Â, m)``, applied at every token);
    * TD(λ), the discounted return: ``(returns,)``;
    * the kept return (REINFORCE++): ``(masked_whiten(G, m) · m, G · m)``.

    ``gamma``, ``lmbda``: floats, or tensors of length ``S`` (per sequence, which wins where
    ``S = total_tokens``) or ``total_tokens``. Outputs are ``[total_tokens]`` in
    ``compute_dtype``. The whitening's statistics are gathered by the scan, except in exact
    mode and under ``torch.use_deterministic_algorithms(True)``, where ``masked_whiten`` adds
    them in a fixed order. Raises where a kernel fails to
    compile or launch (the caller falls back), and ``ValueError`` where the whitening has
    fewer than two kept tokens."""
    whitened = whiten or kind == "kept_returns"
    fixed_order = exact or not sums_in_any_order()
    new, sums = launch(kind, cu_seqlens, rewards=rewards, values=values, mask=mask, terminated=terminated,
                       bootstrap_value=bootstrap_value, gamma=gamma, lmbda=lmbda, exact=exact,
                       sums=whitened and not fixed_order, compute_dtype=compute_dtype)
    if not whitened:
        return new
    from ..whiten import _check_count, masked_whiten

    x = new[0]
    if fixed_order:  # the whitening in a fixed order (the sums' atomics add in any order)
        kept = mask if mask is not None else torch.ones(x.numel(), dtype=torch.bool, device=x.device)
        if kind == "gae":
            return masked_whiten(x, kept), new[1]
        return masked_whiten(x, kept, zero_skipped=mask is not None), x
    from .whiten import apply_sums

    if kind == "gae":
        apply_sums(x, sums, 1e-8, out=x)
        _check_count(sums[0])  # after the launches, so that the device is not kept waiting
        return x, new[1]
    advantages = torch.empty_like(x)
    apply_sums(x, sums, 1e-8, out=advantages, mask=mask)
    _check_count(sums[0])
    return advantages, x
