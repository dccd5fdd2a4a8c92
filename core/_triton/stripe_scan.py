"""The stripe and block kernels: each thread holds runs of consecutive steps, so every load
is one row of environments; they suit inputs contiguous along environments (``[T, N]``).

* ``stripe_kernel`` walks time in windows of ``STRIPES x STEPS`` steps; each stripe of
  ``STEPS`` consecutive steps is folded one step at a time inside a thread, the
  stripes' composed pairs are scanned across, and a second pass applies the carried
  state step by step. With ``STRIPES = STEPS = 1`` it is the sequential (``exact``) kernel.
* ``block_kernel`` does the stripe kernel's work on ``[STEPS, STRIPES, BLOCK_B]`` blocks
  held in registers (each input read once): loads of 4 contiguous environments make the
  compiler keep each thread's steps in its registers, and the steps are scanned one after
  another there (``_scan_in_thread``), with no other thread.

Both take the two-launch chunk carry of ``tile_scan``.
"""
import triton
import triton.language as tl

from .primitives import compose
from .tile_scan import _carried_in, _edge, _in_scan_order, _program_start, _scanned, _store_chunk_pair


@triton.jit
def _stripe_starts(STRIPES: tl.constexpr, STEPS: tl.constexpr, WIDE: tl.constexpr):
    """A window's stripes' first time offsets, ``stripe*STEPS``, as a ``[STRIPES, 1]`` tensor."""
    stripe = tl.arange(0, STRIPES)[:, None]
    if WIDE:
        stripe = stripe.to(tl.int64)
    return stripe * STEPS


@triton.jit
def _fold_stripes(ins, in_strides, scalars, first, b_hi, b_lo, mb, t_hi, T, COEFFS: tl.constexpr,
                  REVERSE: tl.constexpr, ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr,
                  BLOCK_B: tl.constexpr):
    """Pass 1 of a window: each stripe (``STEPS`` steps from ``first``) folded into its
    composed pair ``(a, k)``, one step at a time."""
    a = tl.zeros([STRIPES, BLOCK_B], ACC)
    k = tl.full([STRIPES, BLOCK_B], 1, ACC)
    for j in tl.static_range(STEPS):
        t = first + (STEPS - 1 - j if REVERSE else j)
        m = (t < t_hi) & mb
        alpha, beta, keep = COEFFS(ins, in_strides, scalars, (t, b_hi, b_lo, m, mb), T, ACC)
        beta = tl.where(m, beta, 1)
        a = tl.where(m, alpha, 0) + beta * a
        k = beta * k
    return a, k


@triton.jit
def _across_stripes(a, k, REVERSE: tl.constexpr, ACC: tl.constexpr, STRIPES: tl.constexpr, BLOCK_B: tl.constexpr):
    """Given each stripe's composed pair (``[STRIPES, BLOCK_B]``): what each stripe receives
    from the stripes before it in scan order, as the map ``x -> ia + ik*x`` of the window's
    carried-in state, and the whole window's pair ``(out_a, out_k)``."""
    if STRIPES == 1:
        return a * 0, k * 0 + 1, a, k
    else:
        sa, sk = tl.associative_scan((a, k), 0, compose, reverse=REVERSE)
        ia = _carried_in(sa, tl.zeros([1, BLOCK_B], ACC), REVERSE, STRIPES)
        ik = _carried_in(sk, tl.full([1, BLOCK_B], 1, ACC), REVERSE, STRIPES)
        return ia, ik, _edge(sa, REVERSE, STRIPES), _edge(sk, REVERSE, STRIPES)


@triton.jit
def _run_stripes(ins, in_strides, outs, out_strides, scalars, first, b_hi, b_lo, mb, t_hi, T, state,
                 COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, ACC: tl.constexpr,
                 STEPS: tl.constexpr):
    """Pass 2 of a window: each stripe run from the state carried into it (``state``), one
    step at a time, reading its inputs again and writing the outputs."""
    for j in tl.static_range(STEPS):
        t = first + (STEPS - 1 - j if REVERSE else j)
        m = (t < t_hi) & mb
        tile = (t, b_hi, b_lo, m, mb)
        alpha, beta, keep = COEFFS(ins, in_strides, scalars, tile, T, ACC)
        state_in = state
        state = tl.where(m, alpha + beta * state, state)
        EMIT(outs, out_strides, scalars, state, state_in, keep, tile, T)


@triton.jit
def stripe_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None,
    UNROLL: tl.constexpr = None,
):
    chunk = tl.program_id(1)
    b, b_hi, b_lo, mb, carry, t_lo, t_hi = _program_start(
        INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
        REVERSE, PHASE, ACC, BLOCK_B, BLOCK_C, TWO_LEVEL, WIDE)
    carry_b = tl.full([1, BLOCK_B], 1, ACC)
    starts = _stripe_starts(STRIPES, STEPS, WIDE)
    window = STRIPES * STEPS
    n_windows = tl.cdiv(t_hi - t_lo, window)
    for i in tl.range(n_windows, num_stages=STAGES, loop_unroll_factor=UNROLL):
        w = _in_scan_order(i, n_windows, REVERSE)
        first = t_lo + w * window + starts
        a, k = _fold_stripes(ins, in_strides, scalars, first, b_hi, b_lo, mb, t_hi, T, COEFFS, REVERSE, ACC, STRIPES,
                             STEPS, BLOCK_B)
        ia, ik, out_a, out_k = _across_stripes(a, k, REVERSE, ACC, STRIPES, BLOCK_B)
        if PHASE == 1:
            carry_b = out_k * carry_b
        else:
            _run_stripes(ins, in_strides, outs, out_strides, scalars, first, b_hi, b_lo, mb, t_hi, T,
                         ia + ik * carry, COEFFS, EMIT, REVERSE, ACC, STEPS)
        carry = out_a + out_k * carry

    if PHASE == 1:
        _store_chunk_pair(AGG, chunk, n_chunks, b, mb, B, carry, carry_b)


@triton.jit
def _block_axes(STRIPES: tl.constexpr, STEPS: tl.constexpr, WIDE: tl.constexpr):
    """A block's time offsets, ``stripe*STEPS + step``, as a ``[STEPS, STRIPES, 1]`` tensor."""
    step = tl.arange(0, STEPS)[:, None, None]
    stripe = tl.arange(0, STRIPES)[None, :, None]
    if WIDE:
        step = step.to(tl.int64)
    return stripe * STEPS + step


@triton.jit
def _block(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS: tl.constexpr, REVERSE: tl.constexpr,
           ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
           STEP_SCAN: tl.constexpr):
    """One ``[STEPS, STRIPES, BLOCK_B]`` block at times ``t``: its coefficients scanned along
    steps (``a``, ``k``), what each stripe receives from the stripes before it in scan order
    as a map ``x -> ia + ik*x`` of the block's carried-in state, and the whole block's
    composed pair ``(out_a, out_k)``. ``STEP_SCAN``: ``"registers"`` scans the steps
    one after the other in each thread, ``"shuffles"`` with ``tl.associative_scan``."""
    a, k, _, _, tile, keep = _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS, REVERSE, ACC,
                                      STEPS, STEP_SCAN == "registers")
    ia, ik, out_a, out_k = _across_stripes(_edge(a, REVERSE, STEPS, False), _edge(k, REVERSE, STEPS, False), REVERSE,
                                           ACC, STRIPES, BLOCK_B)
    return a, k, ia, ik, out_a, out_k, tile, keep


@triton.jit
def _emit_block(outs, out_strides, scalars, a, k, ia, ik, carry, keep, tile, T, EMIT: tl.constexpr,
                REVERSE: tl.constexpr, STEPS: tl.constexpr):
    """Write a block's outputs, given the state carried into it."""
    state = tl.expand_dims(ia + ik * carry, 0)
    A = a + k * state
    EMIT(outs, out_strides, scalars, A, _carried_in(A, state, REVERSE, STEPS), keep, tile, T)


@triton.jit
def block_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None,
    UNROLL: tl.constexpr = None, STEP_SCAN: tl.constexpr = "registers",
):
    """The stripe kernel's windows held in registers as ``[STEPS, STRIPES, BLOCK_B]`` blocks.

    Loads run along environments, so the compiler spreads environments and stripes across
    threads and keeps each stripe's ``STEPS`` consecutive steps inside one thread: the scan
    over steps runs in registers, and only the stripes' composed pairs are scanned across
    threads. Every input is read once (the stripe kernel reads each window twice).
    """
    chunk = tl.program_id(1)
    b, b_hi, b_lo, mb, carry, t_lo, t_hi = _program_start(
        INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
        REVERSE, PHASE, ACC, BLOCK_B, BLOCK_C, TWO_LEVEL, WIDE)
    b_hi3, b_lo3, mb3 = tl.expand_dims(b_hi, 0), tl.expand_dims(b_lo, 0), tl.expand_dims(mb, 0)
    carry_b = tl.full([1, BLOCK_B], 1, ACC)
    offset = _block_axes(STRIPES, STEPS, WIDE)
    window = STRIPES * STEPS
    n_windows = tl.cdiv(t_hi - t_lo, window)
    for i in tl.range(n_windows, num_stages=STAGES, loop_unroll_factor=UNROLL):
        w = _in_scan_order(i, n_windows, REVERSE)
        a, k, ia, ik, out_a, out_k, tile, keep = _block(
            ins, in_strides, scalars, t_lo + w * window + offset, b_hi3, b_lo3, mb3, t_hi, T,
            COEFFS, REVERSE, ACC, STRIPES, STEPS, BLOCK_B, STEP_SCAN)
        if PHASE == 1:
            carry_b = out_k * carry_b
        else:
            _emit_block(outs, out_strides, scalars, a, k, ia, ik, carry, keep, tile, T, EMIT, REVERSE, STEPS)
        carry = out_a + out_k * carry

    if PHASE == 1:
        _store_chunk_pair(AGG, chunk, n_chunks, b, mb, B, carry, carry_b)
