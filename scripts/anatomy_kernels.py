"""An instrumented ``chained_kernel`` for ``h200_anatomy.py`` (GPU only: it reads the
``%globaltimer`` register). It takes the shipped kernel's arguments plus ``STATS``, where
program ``ticket`` writes ``STATS_FIELDS`` int64 values, and ``MODE``:

* ``"full"``: the shipped chain (``engine._chain_carry``: flags or words, as ``LINK`` says),
  with the counts its look-back returns;
* ``"patient"``: flags only; before walking back, poll the predecessor's flag up to
  ``PATIENCE`` times for its outgoing state, then walk back as ``"full"`` does;
* ``"publish"``: publish the pair and the outgoing state, look back at nothing (wrong results:
  timing only);
* ``"nowait"``: publish nothing, carry zeros (wrong results: timing only).
"""
import triton
import triton.language as tl

from rlscan._triton.engine import (_block, _block_axes, _chain_carry, _chain_link, _emit_block, _initial,
                                   _look_back_window, _publish_pair, _publish_state)

STATS_FIELDS = 8  # j, pid_b, t_start, t_scanned, t_carried, t_emitted, positions composed, round trips


@triton.jit
def _now_after(x):
    """The global timer (ns), read once every element of ``x`` is computed."""
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64, is_pure=False, pack=1)
    return tl.max(tl.max(t, axis=1), axis=0)


@triton.jit
def chained_timed(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None,
    UNROLL: tl.constexpr = None, TEST_LOOKBACK: tl.constexpr = False, STEP_SCAN: tl.constexpr = "registers",
    LOOKBACK: tl.constexpr = 1, LINK: tl.constexpr = "flags", STATS=None, MODE: tl.constexpr = "full",
    PATIENCE: tl.constexpr = 0,
):
    B, FLAGS, n_b, j, pid_b, b, b_hi, b_lo, mb, t_lo, t_hi = _chain_link(AGG, T, B, B_lo, chunk_len, n_chunks,
                                                                         REVERSE, BLOCK_B, TWO_LEVEL, WIDE, LINK)
    t_start = _now_after(mb.to(tl.int32))
    a, k, ia, ik, out_a, out_k, tile, keep = _block(
        ins, in_strides, scalars, t_lo + _block_axes(STRIPES, STEPS, WIDE), tl.expand_dims(b_hi, 0),
        tl.expand_dims(b_lo, 0), tl.expand_dims(mb, 0), t_hi, T, COEFFS, REVERSE, ACC, STRIPES, STEPS, BLOCK_B,
        STEP_SCAN)
    t_scanned = _now_after((out_a + out_k).to(tl.int32, bitcast=True))
    composed = j * 0
    trips = j * 0
    if MODE == "full":
        carry, composed, trips = _chain_carry(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, b_hi, b_lo, mb, out_a,
                                              out_k, INIT, init_strides, ACC, BLOCK_B, TEST_LOOKBACK, LOOKBACK, LINK)
    elif MODE == "nowait":
        carry = _initial(INIT, init_strides, b_hi, b_lo, mb, ACC, BLOCK_B)
    elif j == 0:
        carry = _initial(INIT, init_strides, b_hi, b_lo, mb, ACC, BLOCK_B)
    else:  # publish, or patient
        _publish_pair(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, mb, out_a, out_k, LINK)
        carry = tl.zeros([1, BLOCK_B], ACC)
        if MODE == "patient":  # flags only
            got = j * 0
            polls = j * 0
            while polls < PATIENCE:
                f = tl.atomic_add(FLAGS + (j - 1) * n_b + pid_b, 0, sem="acquire", scope="gpu")
                trips += 1
                polls += 1
                if f == 2:
                    got = 1
                    polls = PATIENCE
            if got == 1:
                carry = tl.load(AGG + (2 * n_chunks + j - 1) * B + b, mask=mb, other=0, volatile=True)
                composed = j * 0 + 1
            else:
                carry, composed, walked = _look_back_window(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC,
                                                            BLOCK_B, LOOKBACK)
                trips += walked
    if MODE != "full" and MODE != "nowait":
        _publish_state(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, mb, out_a + out_k * carry, LINK)
    t_carried = _now_after(carry.to(tl.int32, bitcast=True))
    _emit_block(outs, out_strides, scalars, a, k, ia, ik, carry, keep, tile, T, EMIT, REVERSE, STEPS)
    t_emitted = _now_after(carry.to(tl.int32, bitcast=True) + t_carried.to(tl.int32))
    at = STATS + (j * n_b + pid_b) * 8
    tl.store(at, j)
    tl.store(at + 1, pid_b)
    tl.store(at + 2, t_start)
    tl.store(at + 3, t_scanned)
    tl.store(at + 4, t_carried)
    tl.store(at + 5, t_emitted)
    tl.store(at + 6, composed)
    tl.store(at + 7, trips)
