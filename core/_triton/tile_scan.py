"""The tile scan: ``scan_kernel`` walks time in ``[BLOCK_T, BLOCK_B]`` tiles and scans each
tile with ``tl.associative_scan``, carrying the state from tile to tile. It suits inputs
that are contiguous along time.

Also here, as the other families build on them: the scan of a tile or block with no carry
(:func:`_scanned`), the state carried into each of its rows (:func:`_state_in`) and handed
on from its edge, and the two-launch chunk carry. ``scan_kernel``, ``stripe_kernel`` and
``block_kernel`` can split time into ``n_chunks`` chunks run by separate programs, in two
launches: ``PHASE=1`` reduces each chunk to its composed pair ``(a, b)``; ``PHASE=2`` folds
the pairs of the chunks that precede it in scan order into its carry
(:func:`_carry_from_chunks`), then scans and emits. ``PHASE=0`` is the single-launch case.
"""
import triton
import triton.language as tl

from .primitives import _along_first_axis, _envs, _initial, compose, compose_exclusive, offsets, row, store


@triton.jit
def _carried_in(A, carry, REVERSE: tl.constexpr, BLOCK_T: tl.constexpr):
    """The state carried into each row of a scanned tile (or step of a block): the row after
    it in reverse, the row before it forward, and ``carry`` (broadcast) at the edge. Where
    the rows lie in one thread's registers, or in one warp, this is cheap; where they span
    warps, Triton's gather goes through shared memory, and :func:`_state_in` takes the
    state another way."""
    rows = _along_first_axis(BLOCK_T, A)
    if BLOCK_T == 1:
        return A * 0 + carry
    else:
        if REVERSE:
            idx = tl.minimum(rows + 1, BLOCK_T - 1)
            edge = rows == BLOCK_T - 1
        else:
            idx = tl.maximum(rows - 1, 0)
            edge = rows == 0
        return tl.where(edge, carry, tl.gather(A, idx + tl.zeros(A.shape, tl.int32), 0))


@triton.jit
def _edge(x, REVERSE: tl.constexpr, BLOCK_T: tl.constexpr, KEEP_DIMS: tl.constexpr = True):
    """The state handed to the next tile (or, for a block, each stripe's composed value): the
    first row in reverse, the last row forward."""
    if REVERSE:
        return row(x, 0, BLOCK_T, KEEP_DIMS)
    else:
        return row(x, BLOCK_T - 1, BLOCK_T, KEEP_DIMS)


@triton.jit
def _scan_in_thread(alpha, beta, REVERSE: tl.constexpr, N: tl.constexpr):
    """The scan of ``(alpha, beta)`` along the first axis (``N`` long), one step after the
    other: ``a_s = alpha_s + beta_s * a_{s±1}``, ``k_s = beta_s * k_{s±1}``.

    For a block, whose steps sit in each thread's registers: there, rows picked by a
    constant index fold to register moves, while ``tl.associative_scan`` lowers the same
    axis to warp shuffles it does not need (640 for an 8 × 128 block, most of the kernel)."""
    rows = _along_first_axis(N, alpha)
    a, k = alpha, beta
    first = N - 1 if REVERSE else 0
    acc_a = row(alpha, first, N)
    acc_k = row(beta, first, N)
    for i in tl.static_range(1, N):
        s = N - 1 - i if REVERSE else i
        beta_s = row(beta, s, N)
        acc_a = row(alpha, s, N) + beta_s * acc_a
        acc_k = beta_s * acc_k
        a = tl.where(rows == s, acc_a, a)
        k = tl.where(rows == s, acc_k, k)
    return a, k


@triton.jit
def _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS: tl.constexpr, REVERSE: tl.constexpr,
             ACC: tl.constexpr, N: tl.constexpr, IN_THREAD: tl.constexpr = False, EXCLUSIVE: tl.constexpr = False):
    """The op's coefficients at times ``t`` (identity pairs outside ``[.., t_hi)`` and the
    environments), scanned along the first axis (``N`` long, in each thread's registers
    if ``IN_THREAD``) with no carry: ``(a, k)``; with ``EXCLUSIVE``, ``(ea, ek)``, the same
    of the rows before each row in scan order (else ``(0, 1)``, which the compiler drops
    unread); the tile, and what the op keeps for its outputs."""
    m = (t < t_hi) & mb
    tile = (t, b_hi, b_lo, m, mb)
    alpha, beta, keep = COEFFS(ins, in_strides, scalars, tile, T, ACC)
    alpha = tl.where(m, alpha, 0)
    beta = tl.where(m, beta, 1)
    zero, one = alpha * 0, beta * 0 + 1
    if N == 1:
        return alpha, beta, zero, one, tile, keep
    elif IN_THREAD:
        a, k = _scan_in_thread(alpha, beta, REVERSE, N)
        return a, k, zero, one, tile, keep
    elif EXCLUSIVE:
        a, k, ea, ek = tl.associative_scan((alpha, beta, zero, one), 0, compose_exclusive, reverse=REVERSE)
        return a, k, ea, ek, tile, keep
    else:
        a, k = tl.associative_scan((alpha, beta), 0, compose, reverse=REVERSE)
        return a, k, zero, one, tile, keep


@triton.jit
def _state_in(A, ea, ek, carry, outs, out_strides, tile, t_hi, REVERSE: tl.constexpr, AXIS_REVERSE: tl.constexpr,
              N: tl.constexpr, STATE_IN: tl.constexpr, ACC: tl.constexpr):
    """The state carried into each row of a tile scanned by :func:`_scanned`, what an op's
    ``EMIT`` reads as ``A_in``, by ``STATE_IN`` (``launch.state_in`` chooses):

    * ``"gather"``: the neighbouring row of ``A`` (:func:`_carried_in`);
    * ``"exclusive"``: ``ea + ek * carry`` from the exclusive scan;
    * ``"reload"``: ``A`` stored where the first output goes, then read back one step on
      (:func:`_reloaded`).

    ``REVERSE``: the scan runs back in time; ``AXIS_REVERSE``: against the tile's first axis
    (they differ in a flipped tile, whose first axis runs back in time)."""
    if STATE_IN == "exclusive":
        return ea + ek * carry
    elif STATE_IN == "reload":
        return _reloaded(A, carry, outs[0], out_strides, tile, t_hi, REVERSE, AXIS_REVERSE, N, ACC)
    else:
        return _carried_in(A, carry, AXIS_REVERSE, N)


@triton.jit
def _reloaded(A, carry, OUT, s, tile, t_hi, REVERSE: tl.constexpr, AXIS_REVERSE: tl.constexpr, N: tl.constexpr,
              ACC: tl.constexpr):
    """``A_in`` through memory: every thread stores its rows of ``A`` in ``OUT`` (the first
    output, which ``EMIT`` then writes at every step; it has the compute dtype), and after a
    barrier reads the row after (reverse) or before (forward) each of its rows; ``carry``
    at the tile's edge. A second barrier keeps ``EMIT`` from overwriting a row before every
    thread has read it. The lines are in the cache, so this costs two barriers and a load,
    where the other ways cost shuffles and the registers of a second pair (docs/benchmarks.md
    has the counts)."""
    rows = _along_first_axis(N, A)
    t = tile[0]
    store(OUT, s, tile, A)
    tl.debug_barrier()
    # the tile's edge in scan order takes the carry; in reverse, so does a step whose next lies
    # past the chunk (its row of A was not stored)
    if AXIS_REVERSE:
        edge = rows == N - 1
    else:
        edge = rows == 0
    if REVERSE:
        edge = edge | (t + 1 >= t_hi)
        t_in = t + 1
    else:
        t_in = t - 1
    A_in = tl.load(OUT + offsets(s, t_in, tile), mask=tile[3] & ~edge, other=0).to(ACC)
    tl.debug_barrier()
    return tl.where(edge, carry, A_in)


@triton.jit
def _carry_from_chunks(AGG, chunk, n_chunks, b, mb, B, carry, REVERSE: tl.constexpr, BLOCK_C: tl.constexpr):
    """Fold the pairs of the chunks before ``chunk`` (in scan order) into ``carry``.

    The tile of pairs has at least 16 rows (the rows past ``n_chunks`` are identity pairs):
    the compiler may give it the layout of the kernel's time tiles, whose loads of 1-byte
    flags put up to 16 rows in each thread, and Triton 3.6 cannot lower a scan over fewer
    rows than a thread holds (an assertion in ``ScanOpToLLVM.cpp``)."""
    ROWS: tl.constexpr = BLOCK_C if BLOCK_C >= 16 else 16
    c = tl.arange(0, ROWS)[:, None]
    if REVERSE:
        before = c > chunk
    else:
        before = c < chunk
    m = before & (c < n_chunks) & mb
    a = tl.load(AGG + c * B + b, mask=m, other=0)
    k = tl.load(AGG + (n_chunks + c) * B + b, mask=m, other=1)
    sa, sk = tl.associative_scan((a, k), 0, compose, reverse=REVERSE)
    return _edge(sa, REVERSE, ROWS) + _edge(sk, REVERSE, ROWS) * carry


@triton.jit
def _store_chunk_pair(AGG, chunk, n_chunks, b, mb, B, a, k):
    """``PHASE=1``'s result, the chunk's composed pair ``(a, k)``, where
    :func:`_carry_from_chunks` reads it."""
    tl.store(AGG + chunk * B + b, a, mask=mb)
    tl.store(AGG + (n_chunks + chunk) * B + b, k, mask=mb)


@triton.jit
def _in_scan_order(i, n, REVERSE: tl.constexpr):
    """The ``i``-th of a chunk's ``n`` tiles (or windows) in scan order: from the last in reverse."""
    if REVERSE:
        return n - 1 - i
    else:
        return i


@triton.jit
def _program_start(INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
                   REVERSE: tl.constexpr, PHASE: tl.constexpr, ACC: tl.constexpr, BLOCK_B: tl.constexpr,
                   BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr):
    """This program's environments, its carry into its first step, and its time range."""
    b, b_hi, b_lo, mb = _envs(tl.program_id(0), B, B_lo, BLOCK_B, TWO_LEVEL, WIDE)
    if PHASE == 1:
        carry = tl.zeros([1, BLOCK_B], ACC)
    else:
        carry = _initial(INIT, init_strides, b_hi, b_lo, mb, ACC, BLOCK_B)
    if PHASE == 2:
        carry = _carry_from_chunks(AGG, chunk, n_chunks, b, mb, B, carry, REVERSE, BLOCK_C)
    t_lo = chunk * chunk_len
    t_hi = tl.minimum(t_lo + chunk_len, T)
    return b, b_hi, b_lo, mb, carry, t_lo, t_hi


@triton.jit
def scan_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr,
    TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None, UNROLL: tl.constexpr = None,
    STATE_IN: tl.constexpr = "gather", ONE_TILE: tl.constexpr = False, FLIP: tl.constexpr = False,
):
    """``ONE_TILE`` (one launch, ``BLOCK_T >= T``): each program's steps are one tile, so no
    state is handed from tile to tile. The loop and its carry cost a third more registers
    and four more barriers (docs/benchmarks.md), which halves how many programs an SM holds.

    ``FLIP`` (with ``REVERSE``): each tile's first axis runs back in time (its row ``i`` is
    step ``BLOCK_T − 1 − i`` of the tile), so the scan along it is a forward one: Triton
    lowers ``tl.associative_scan(..., reverse=True)`` with about 2.7 times the warp shuffles
    (see ``ops/gae/kernel.py``'s row kernels). Only the order within a tile changes: tiles
    still follow each other from the last, and each step's arithmetic is the same."""
    chunk = tl.program_id(1)
    b, b_hi, b_lo, mb, carry, t_lo, t_hi = _program_start(
        INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
        REVERSE, PHASE, ACC, BLOCK_B, BLOCK_C, TWO_LEVEL, WIDE)
    AXIS_REVERSE: tl.constexpr = REVERSE and not FLIP  # whether scan order runs against the tile's first axis
    rows = tl.arange(0, BLOCK_T)[:, None]
    if REVERSE and FLIP:
        rows = BLOCK_T - 1 - rows
    if ONE_TILE:
        t = rows
        if WIDE:
            t = t.to(tl.int64)
        a, k, ea, ek, tile, keep = _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS,
                                            AXIS_REVERSE, ACC, BLOCK_T, False, STATE_IN == "exclusive")
        A = a + k * carry
        A_in = _state_in(A, ea, ek, carry, outs, out_strides, tile, t_hi, REVERSE, AXIS_REVERSE, BLOCK_T, STATE_IN,
                         ACC)
        EMIT(outs, out_strides, scalars, A, A_in, keep, tile, T)
    else:
        carry_b = tl.full([1, BLOCK_B], 1, ACC)
        n_tiles = tl.cdiv(t_hi - t_lo, BLOCK_T)
        for i in tl.range(n_tiles, num_stages=STAGES, loop_unroll_factor=UNROLL):
            t = t_lo + _in_scan_order(i, n_tiles, REVERSE) * BLOCK_T + rows
            if WIDE:
                t = t.to(tl.int64)
            a, k, ea, ek, tile, keep = _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS,
                                                AXIS_REVERSE, ACC, BLOCK_T, False,
                                                STATE_IN == "exclusive" and PHASE != 1)
            A = a + k * carry
            if PHASE == 1:
                carry_b = _edge(k * carry_b, AXIS_REVERSE, BLOCK_T)
            else:
                A_in = _state_in(A, ea, ek, carry, outs, out_strides, tile, t_hi, REVERSE, AXIS_REVERSE, BLOCK_T,
                                 STATE_IN, ACC)
                EMIT(outs, out_strides, scalars, A, A_in, keep, tile, T)
            carry = _edge(A, AXIS_REVERSE, BLOCK_T)

        if PHASE == 1:
            _store_chunk_pair(AGG, chunk, n_chunks, b, mb, B, carry, carry_b)
