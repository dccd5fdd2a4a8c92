"""Instrumented copies of ``chained_kernel`` for ``h200_anatomy.py`` (GPU only: they read the
``%globaltimer`` register). Each takes the shipped kernel's arguments plus ``STATS``, where
program ``ticket`` writes ``STATS_FIELDS`` int64 values, and ``MODE``:

* ``"full"``: the shipped chain (flags or words, as ``LINK`` says), its look-back counted;
* ``"patient"``: flags only; before walking back, poll the predecessor's flag up to
  ``PATIENCE`` times for its outgoing state, then walk back as ``"full"`` does;
* ``"publish"``: publish the pair and the outgoing state, look back at nothing (wrong results:
  timing only);
* ``"nowait"``: publish nothing, carry zeros (wrong results: timing only).
"""
import triton
import triton.language as tl

from rlscan._triton.engine import (_block, _block_axes, _chain_link, _emit_block, _initial, _publish, _unword,
                                   _word, row)

STATS_FIELDS = 8  # j, pid_b, t_start, t_scanned, t_carried, t_emitted, positions composed, round trips


@triton.jit
def _now_after(x):
    """The global timer (ns), read once every element of ``x`` is computed."""
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [x], dtype=tl.int64, is_pure=False, pack=1)
    return tl.max(tl.max(t, axis=1), axis=0)


@triton.jit
def _counted_window(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr,
                    W: tl.constexpr):
    """engine._look_back_window, also returning the positions composed and the round trips."""
    r = tl.arange(0, W)
    rows = r[:, None]
    acc_a = tl.zeros([1, BLOCK_B], ACC)
    acc_k = tl.full([1, BLOCK_B], 1, ACC)
    p = j - 1
    composed = j * 0
    trips = j * 0
    while p >= 0:
        q = p - r
        f = tl.atomic_add(FLAGS + q * n_b + pid_b, 0, mask=q >= 0, sem="acquire", scope="gpu")
        f = tl.where(q >= 0, f, 0)
        n_ready = tl.min(tl.where(f == 0, r, W), axis=0)
        n_use = tl.minimum(tl.min(tl.where(f == 2, r, W), axis=0) + 1, n_ready)
        ends = tl.expand_dims(f == 2, 1)
        use = (rows < n_use) & mb
        qq = tl.expand_dims(q, 1)
        a = tl.load(AGG + qq * B + b, mask=use & ~ends, other=0, volatile=True)
        k = tl.load(AGG + (n_chunks + qq) * B + b, mask=use & ~ends, other=1, volatile=True)
        state = tl.load(AGG + (2 * n_chunks + qq) * B + b, mask=use & ends, other=0, volatile=True)
        a = tl.where(ends, state, a)
        k = tl.where(ends & use, 0, k)
        for i in tl.static_range(W):
            acc_a = acc_a + acc_k * row(a, i, W)
            acc_k = acc_k * row(k, i, W)
        composed += n_use
        trips += 1
        if tl.max(tl.where(r < n_use, f, 0), axis=0) == 2:
            p = -1
        else:
            p = p - n_use
    return acc_a, composed, trips


@triton.jit
def _counted_words(WORDS, j, B, b, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr, W: tl.constexpr):
    """engine._look_back_words, also returning the positions composed (by the environment that
    composed most) and the round trips."""
    r = tl.arange(0, W)[:, None]
    acc_a = tl.zeros([1, BLOCK_B], ACC)
    acc_k = tl.full([1, BLOCK_B], 1, ACC)
    p = tl.zeros([1, BLOCK_B], tl.int32) + (j - 1)
    walking = mb
    trips = j * 0
    while tl.sum(walking.to(tl.int32)) > 0:
        q = p - r
        words = tl.load(WORDS + q * B + b, mask=walking & (q >= 0), other=-1, volatile=True)
        taking = walking
        start = p
        for i in tl.static_range(W):
            w = row(words, i, W)
            a, k = _unword(w)
            taking = taking & (w != -1)
            acc_a = tl.where(taking, acc_a + acc_k * a, acc_a)
            acc_k = tl.where(taking, acc_k * k, acc_k)
            p = tl.where(taking, p - 1, p)
            walking = walking & ~(taking & (k == 0))
            taking = taking & (k != 0)
        trips += 1
        stalled = walking & (p == start)
        if tl.sum(stalled.to(tl.int32)) > 0:
            at = tl.max(tl.where(stalled, p, -1))
            env = tl.min(tl.where(stalled & (p == at), b, B))
            one = tl.load(WORDS + at * B + env, volatile=True)
            while one == -1:
                one = tl.load(WORDS + at * B + env, volatile=True)
                trips += 1
    composed = tl.max(tl.where(mb, j - 1 - p, 0))
    return acc_a, composed, trips


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
    if MODE == "nowait":
        carry = _initial(INIT, init_strides, b_hi, b_lo, mb, ACC, BLOCK_B)
    elif j == 0:
        carry = _initial(INIT, init_strides, b_hi, b_lo, mb, ACC, BLOCK_B)
    elif LINK == "words":
        tl.atomic_xchg(FLAGS + j * B + b, _word(out_a, out_k), mask=mb, sem="relaxed", scope="gpu")
        if MODE == "publish":
            carry = tl.zeros([1, BLOCK_B], ACC)
        else:
            carry, composed, trips = _counted_words(FLAGS, j, B, b, mb, ACC, BLOCK_B, LOOKBACK)
    else:
        tl.store(AGG + j * B + b, out_a, mask=mb)
        tl.store(AGG + (n_chunks + j) * B + b, out_k, mask=mb)
        _publish(FLAGS, j * n_b + pid_b, 1)
        if MODE == "publish":
            carry = tl.zeros([1, BLOCK_B], ACC)
        else:
            got = j * 0
            if MODE == "patient":
                polls = j * 0
                while polls < PATIENCE:
                    f = tl.atomic_add(FLAGS + (j - 1) * n_b + pid_b, 0, sem="acquire", scope="gpu")
                    if f == 2:
                        got = 1
                        polls = PATIENCE
                    else:
                        polls += 1
                trips = polls
            if got == 1:
                state = tl.load(AGG + (2 * n_chunks + j - 1) * B + b, mask=mb, other=0, volatile=True)
                carry = state
                composed = 1
            else:
                carry, composed, trips2 = _counted_window(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC,
                                                          BLOCK_B, LOOKBACK)
                trips += trips2
    if MODE != "nowait":
        if LINK == "words":
            state = _word(out_a + out_k * carry, tl.zeros([1, BLOCK_B], ACC))
            tl.atomic_xchg(FLAGS + j * B + b, state, mask=mb, sem="relaxed", scope="gpu")
        else:
            tl.store(AGG + (2 * n_chunks + j) * B + b, out_a + out_k * carry, mask=mb)
            _publish(FLAGS, j * n_b + pid_b, 2)
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
