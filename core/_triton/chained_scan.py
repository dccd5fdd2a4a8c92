"""The chained kernels: one launch, each program scanning one stretch of time and chained to
the stretches before it in scan order by a decoupled look-back (see ``chained_kernel``).

* ``chained_kernel`` scans one ``block_kernel`` block per program.
* ``chained_scan_kernel`` chains ``scan_kernel``'s tiles the same way, one per program,
  for one sequence (or a few) of very many steps.
* ``chained_stripe_kernel`` chains windows the same way but runs each as the stripe kernel
  does, in two passes over its inputs (fold, then read again and emit), so that few values
  stay live per thread while a program waits on the look-back.

They publish each block's pairs in one of two ways (``LINK``): ``"flags"``, pairs stored,
then a flag per block raised with release semantics and read with acquire (two round trips
per look-back step, any dtype); or ``"words"``, each environment's float32 pair packed in
one 64-bit word that is its own flag (one round trip, no fences).
"""
import triton
import triton.language as tl

from .primitives import _envs, _initial, row
from .stripe_scan import _across_stripes, _block, _block_axes, _emit_block, _fold_stripes, _run_stripes, _stripe_starts
from .tile_scan import _edge, _scanned, _state_in


@triton.jit
def _chain_link(AGG, T, B, B_lo, chunk_len, n_chunks, REVERSE: tl.constexpr, BLOCK_B: tl.constexpr,
                TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, LINK: tl.constexpr):
    """This program's link of the chain: a ticket gives its scan position ``j`` and
    environment block ``pid_b`` (in the order programs start), hence its environments and
    time range. Returns ``B`` (64-bit where ``WIDE``), the pointer to the flags (``LINK =
    "flags"``) or to the words (``"words"``), the number of environment blocks, ``j``,
    ``pid_b``, the environments ``(b, b_hi, b_lo, mb)`` and ``[t_lo, t_hi)``."""
    if WIDE:
        B = B.to(tl.int64)  # AGG's offsets reach n_chunks * B and beyond: past 2**31 when the inputs are that large
    n_b = tl.num_programs(0)
    if LINK == "words":
        FLAGS = AGG.to(tl.pointer_type(tl.int64), bitcast=True)
        counter = (FLAGS + n_chunks * B).to(tl.pointer_type(tl.int32), bitcast=True)
        ticket = tl.atomic_add(counter, 1, sem="relaxed", scope="gpu") + 1  # the counter starts at -1
    else:
        FLAGS = (AGG + 3 * n_chunks * B).to(tl.pointer_type(tl.int32), bitcast=True)
        ticket = tl.atomic_add(FLAGS + n_chunks * n_b, 1, sem="relaxed", scope="gpu")
    j = ticket // n_b
    pid_b = ticket % n_b
    b, b_hi, b_lo, mb = _envs(pid_b, B, B_lo, BLOCK_B, TWO_LEVEL, WIDE)
    if REVERSE:
        t_lo = (n_chunks - 1 - j) * chunk_len
    else:
        t_lo = j * chunk_len
    t_hi = tl.minimum(t_lo + chunk_len, T)
    return B, FLAGS, n_b, j, pid_b, b, b_hi, b_lo, mb, t_lo, t_hi


@triton.jit
def _wait_for(FLAGS, i):
    """Spin until flag ``i`` is set; its value (1: aggregate, 2: inclusive prefix)."""
    f = tl.atomic_add(FLAGS + i, 0, sem="acquire", scope="gpu")
    while f == 0:
        f = tl.atomic_add(FLAGS + i, 0, sem="acquire", scope="gpu")
    return f


@triton.jit
def _publish(FLAGS, i, flag):
    """Raise flag ``i`` to ``flag`` once every thread's stores before it are made (release):
    a program that sees the flag sees those stores."""
    tl.debug_barrier()
    tl.atomic_xchg(FLAGS + i, flag, sem="release", scope="gpu")


@triton.jit
def _look_back(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr):
    """The state carried into the block at scan position ``j``: walk back over the blocks
    before it, composing their published pairs, until one has published its outgoing state.
    Position 0 always publishes that state, so the walk ends. Also returns the positions
    composed and the round trips taken, for measuring the walk; the shipped kernels drop
    them (so does the compiled code)."""
    acc_a = tl.zeros([1, BLOCK_B], ACC)
    acc_k = tl.full([1, BLOCK_B], 1, ACC)
    carry = tl.zeros([1, BLOCK_B], ACC)
    composed = j * 0
    p = j - 1
    while p >= 0:
        f = _wait_for(FLAGS, p * n_b + pid_b)
        composed += 1
        if f == 2:
            state = tl.load(AGG + (2 * n_chunks + p) * B + b, mask=mb, other=0, volatile=True)
            carry = acc_a + acc_k * state
            p = -1
        else:
            a = tl.load(AGG + p * B + b, mask=mb, other=0, volatile=True)
            k = tl.load(AGG + (n_chunks + p) * B + b, mask=mb, other=1, volatile=True)
            acc_a = acc_a + acc_k * a
            acc_k = acc_k * k
            p = p - 1
    return carry, composed, composed


@triton.jit
def _look_back_window(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr,
                      W: tl.constexpr):
    """:func:`_look_back`, ``W`` blocks at a time: read the flags of positions ``p, p-1, ..,
    p-W+1`` together, then the pairs of those that have published, up to and including the
    nearest that has published its outgoing state (taken as the pair ``(state, 0)``), and
    compose them, nearest first. A walk of ``n`` blocks waits on about ``n / W`` round trips
    to memory instead of ``2n``. Also returns the positions composed and the windows read."""
    r = tl.arange(0, W)
    rows = r[:, None]
    acc_a = tl.zeros([1, BLOCK_B], ACC)
    acc_k = tl.full([1, BLOCK_B], 1, ACC)
    composed = j * 0
    trips = j * 0
    p = j - 1
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
def _word(a, k):
    """The float32 pair ``(a, k)`` as one int64 word, ``a`` in the low half. A NaN ``k`` is
    stored as the canonical NaN, so no word has all bits set (-1, "not ready")."""
    k = tl.where(k == k, k, float("nan"))
    return (k.to(tl.uint32, bitcast=True).to(tl.int64) << 32) | a.to(tl.uint32, bitcast=True).to(tl.int64)


@triton.jit
def _unword(w):
    """The pair ``(a, k)`` of a word made by :func:`_word`."""
    return w.to(tl.int32).to(tl.float32, bitcast=True), (w >> 32).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _walk_on(a_far, k_far, code_far, a_near, k_near, code_near):
    """Two runs of a look-back window's rows composed, the nearer (lower rows) applied last.
    ``code`` packs what a run says about the walk: ``4n + 2·goes_on + ends``, ``n`` rows taken.
    The farther run counts only where the walk goes on past the nearer."""
    on = (code_near & 2) != 0
    return (tl.where(on, a_near + k_near * a_far, a_near), tl.where(on, k_near * k_far, k_near),
            tl.where(on, (code_near & ~3) + code_far, code_near))


@triton.jit
def _add3(a1, b1, c1, a2, b2, c2):
    return a1 + a2, b1 + b2, c1 + c2


@triton.jit
def _walk_steps(words):
    """Each word of a look-back window as a run of one row (:func:`_walk_on`): its pair, and
    whether it is taken and the walk ends there or goes on; a word not ready is the identity,
    not taken."""
    a, k = _unword(words)
    ready = words != -1
    code = tl.where(ready, tl.where(k == 0, 5, 6), 0)
    return tl.where(ready, a, 0), tl.where(ready, k, 1), code


@triton.jit
def _walk_window(words, W: tl.constexpr):
    """A look-back window's ``W`` rows of words composed by :func:`_walk_on`, as one
    ``[1, BLOCK_B]`` run: folded row by row for a few rows, by a scan across the window for
    more (at W = 2 the scan costs 2-4% more than the fold)."""
    if W == 1:
        return _walk_steps(words)
    elif W <= 4:
        fa, fk, fc = _walk_steps(row(words, W - 1, W))
        for i in tl.static_range(W - 2, -1, -1):
            a, k, code = _walk_steps(row(words, i, W))
            fa, fk, fc = _walk_on(fa, fk, fc, a, k, code)
        return fa, fk, fc
    else:
        a, k, code = tl.associative_scan(_walk_steps(words), 0, _walk_on, reverse=True)
        first = tl.arange(0, W)[:, None] == 0
        return tl.reduce((tl.where(first, a, 0), tl.where(first, k, 0), tl.where(first, code, 0)), 0, _add3,
                         keep_dims=True)


@triton.jit
def _look_back_words(WORDS, j, B, b, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr, W: tl.constexpr):
    """The state carried into position ``j``, with each environment's pair published as one
    word: ``(a, k)`` composed over its block, then ``(state, 0)`` once the outgoing state is
    known; -1 until either. Each environment walks back on its own, reading the words of
    ``W`` positions per round trip. It takes them nearest first, up to the first that is not
    ready (read again next round) or up to and including the first with ``k = 0``, where its
    walk ends: that word is an outgoing state, or a block cut by a finished episode. Position
    0 publishes its outgoing state, so every walk ends. A window's words are composed
    together (:func:`_walk_window`). One round trip per ``W`` positions, against two for
    :func:`_look_back_window` (flags, then pairs). While a word is not ready, the program
    polls that one word rather than reading the whole window again. Also returns the most
    positions one environment composed, and the round trips (polls included)."""
    r = tl.arange(0, W)[:, None]
    acc_a = tl.zeros([1, BLOCK_B], ACC)
    acc_k = tl.full([1, BLOCK_B], 1, ACC)
    p = tl.zeros([1, BLOCK_B], tl.int32) + (j - 1)  # each environment's nearest position not yet composed
    walking = mb
    trips = j * 0
    while tl.sum(walking.to(tl.int32)) > 0:
        q = p - r
        words = tl.load(WORDS + q * B + b, mask=walking & (q >= 0), other=-1, volatile=True)
        a, k, code = _walk_window(words, W)
        acc_a = acc_a + acc_k * a
        acc_k = acc_k * k
        taken = code >> 2
        p = p - taken
        walking = walking & ((code & 1) == 0)
        trips += 1
        stalled = walking & (taken == 0)
        if tl.sum(stalled.to(tl.int32)) > 0:
            # wait on one word, not the whole window's, until its program publishes
            at = tl.max(tl.where(stalled, p, -1))
            env = tl.min(tl.where(stalled & (p == at), b, B))
            one = tl.load(WORDS + at * B + env, volatile=True)
            while one == -1:
                one = tl.load(WORDS + at * B + env, volatile=True)
                trips += 1
    return acc_a, tl.max(tl.where(mb, j - 1 - p, 0)), trips


@triton.jit
def _publish_pair(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, mb, a, k, LINK: tl.constexpr):
    """Publish link ``j``'s composed pair ``(a, k)``: one word per environment, or the pairs
    stored and the block's flag raised to 1."""
    if LINK == "words":
        tl.atomic_xchg(FLAGS + j * B + b, _word(a, k), mask=mb, sem="relaxed", scope="gpu")
    else:
        tl.store(AGG + j * B + b, a, mask=mb)
        tl.store(AGG + (n_chunks + j) * B + b, k, mask=mb)
        _publish(FLAGS, j * n_b + pid_b, 1)


@triton.jit
def _publish_state(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, mb, state, LINK: tl.constexpr):
    """Publish link ``j``'s outgoing state: the word ``(state, 0)``, or the states stored and
    the block's flag raised to 2."""
    if LINK == "words":
        tl.atomic_xchg(FLAGS + j * B + b, _word(state, tl.zeros_like(state)), mask=mb, sem="relaxed", scope="gpu")
    else:
        tl.store(AGG + (2 * n_chunks + j) * B + b, state, mask=mb)
        _publish(FLAGS, j * n_b + pid_b, 2)


@triton.jit
def _chain_carry(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, b_hi, b_lo, mb, out_a, out_k, INIT, init_strides,
                 ACC: tl.constexpr, BLOCK_B: tl.constexpr, TEST_LOOKBACK: tl.constexpr, LOOKBACK: tl.constexpr,
                 LINK: tl.constexpr):
    """The state carried into link ``j``, whose composed pair is ``(out_a, out_k)``: publish
    the pair, look back for the state, publish the outgoing state ``out_a + out_k · carry``
    (as flagged pairs, or as words: :func:`_look_back_words`). Also returns the look-back's
    positions composed and round trips."""
    composed = j * 0
    trips = j * 0
    if j == 0:
        carry = _initial(INIT, init_strides, b_hi, b_lo, mb, ACC, BLOCK_B)
    else:
        _publish_pair(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, mb, out_a, out_k, LINK)
        if LINK == "words":
            carry, composed, trips = _look_back_words(FLAGS, j, B, b, mb, ACC, BLOCK_B, LOOKBACK)
        elif LOOKBACK == 1:
            carry, composed, trips = _look_back(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC, BLOCK_B)
        else:
            carry, composed, trips = _look_back_window(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC, BLOCK_B,
                                                       LOOKBACK)
    if not TEST_LOOKBACK or j % 2 == 0:
        _publish_state(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, mb, out_a + out_k * carry, LINK)
    return carry, composed, trips


@triton.jit
def chained_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None,
    UNROLL: tl.constexpr = None, TEST_LOOKBACK: tl.constexpr = False, STEP_SCAN: tl.constexpr = "registers",
    LOOKBACK: tl.constexpr = 1, LINK: tl.constexpr = "flags",
):
    """One pass over the inputs: each program scans one ``[STEPS, STRIPES, BLOCK_B]`` block
    (``chunk_len = STEPS * STRIPES`` steps) and is chained to the blocks before it in scan
    order by a decoupled look-back: it publishes its composed pair, waits for the state
    carried into it (composing its predecessors' pairs until one has published its
    outgoing state), publishes its own outgoing state, and writes its outputs.

    ``AGG`` holds rows of ``B`` values: the pairs' ``a`` (rows ``[0, n)``) and ``k``
    (``[n, 2n)``) and the outgoing states (``[2n, 3n)``), ``n = n_chunks``, then, as int32,
    one flag per (position, environment block) and a ticket counter, all zero at launch
    (``LINK = "flags"``). With ``LINK = "words"`` it holds one int64 word per position and
    environment (:func:`_word`), then the counter, every bit set at launch.
    Programs take positions from the counter in the order they start, so a program waits
    only on programs already running: the chain cannot deadlock.

    ``TEST_LOOKBACK`` (tests only): odd positions never publish their outgoing state, so
    the look-back must compose published pairs. (Triton's interpreter runs programs one
    after another, where every predecessor has published its state.)
    """
    B, FLAGS, n_b, j, pid_b, b, b_hi, b_lo, mb, t_lo, t_hi = _chain_link(AGG, T, B, B_lo, chunk_len, n_chunks,
                                                                         REVERSE, BLOCK_B, TWO_LEVEL, WIDE, LINK)
    a, k, ia, ik, out_a, out_k, tile, keep = _block(
        ins, in_strides, scalars, t_lo + _block_axes(STRIPES, STEPS, WIDE), tl.expand_dims(b_hi, 0),
        tl.expand_dims(b_lo, 0), tl.expand_dims(mb, 0), t_hi, T, COEFFS, REVERSE, ACC, STRIPES, STEPS, BLOCK_B,
        STEP_SCAN)
    carry, _, _ = _chain_carry(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, b_hi, b_lo, mb, out_a, out_k, INIT,
                               init_strides, ACC, BLOCK_B, TEST_LOOKBACK, LOOKBACK, LINK)
    _emit_block(outs, out_strides, scalars, a, k, ia, ik, carry, keep, tile, T, EMIT, REVERSE, STEPS)


@triton.jit
def chained_scan_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr,
    TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None, UNROLL: tl.constexpr = None,
    TEST_LOOKBACK: tl.constexpr = False, LOOKBACK: tl.constexpr = 1, LINK: tl.constexpr = "flags",
    STATE_IN: tl.constexpr = "gather",
):
    """:func:`chained_kernel` with one of ``scan_kernel``'s ``[BLOCK_T, BLOCK_B]`` tiles per
    program (``chunk_len = BLOCK_T``), scanned across all its threads by
    ``tl.associative_scan``: for one sequence (or a few), whose steps the blocks of
    :func:`chained_kernel` would spread over threads it cannot scan across cheaply. A long
    chain of such tiles wants a wide look-back (``LOOKBACK`` words per round trip)."""
    B, FLAGS, n_b, j, pid_b, b, b_hi, b_lo, mb, t_lo, t_hi = _chain_link(AGG, T, B, B_lo, chunk_len, n_chunks,
                                                                         REVERSE, BLOCK_B, TWO_LEVEL, WIDE, LINK)
    t = t_lo + tl.arange(0, BLOCK_T)[:, None]
    if WIDE:
        t = t.to(tl.int64)
    a, k, ea, ek, tile, keep = _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS, REVERSE, ACC,
                                        BLOCK_T, False, STATE_IN == "exclusive")
    carry, _, _ = _chain_carry(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, b_hi, b_lo, mb, _edge(a, REVERSE, BLOCK_T),
                               _edge(k, REVERSE, BLOCK_T), INIT, init_strides, ACC, BLOCK_B, TEST_LOOKBACK, LOOKBACK,
                               LINK)
    A = a + k * carry
    A_in = _state_in(A, ea, ek, carry, outs, out_strides, tile, t_hi, REVERSE, REVERSE, BLOCK_T, STATE_IN, ACC)
    EMIT(outs, out_strides, scalars, A, A_in, keep, tile, T)


@triton.jit
def _opaque(x, OPAQUE: tl.constexpr):
    """``x``, through a copy the compiler cannot see through (``OPAQUE``; the interpreter
    runs no assembly): loads at addresses built from it are not merged with earlier loads
    of the same addresses, so a window's second pass reads its inputs again instead of
    keeping the first pass's loads in registers while it waits on the look-back."""
    if OPAQUE:
        if x.dtype == tl.int64:
            return tl.inline_asm_elementwise("mov.b64 $0, $1;", "=l,l", [x], dtype=tl.int64, is_pure=False, pack=1)
        else:
            return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=False, pack=1)
    else:
        return x


@triton.jit
def chained_stripe_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None,
    UNROLL: tl.constexpr = None, TEST_LOOKBACK: tl.constexpr = False, LOOKBACK: tl.constexpr = 1,
    OPAQUE: tl.constexpr = False, LINK: tl.constexpr = "flags",
):
    """:func:`chained_kernel` with the stripe kernel's two passes in place of a block held in
    registers: each program folds its window's stripes into pairs (pass 1), is chained to the
    windows before it by the same look-back, then reads its window again, from cache, to run
    the stripes and write the outputs (pass 2). Only a few values per thread stay live, so
    many programs share each SM and hide one another's waits."""
    B, FLAGS, n_b, j, pid_b, b, b_hi, b_lo, mb, t_lo, t_hi = _chain_link(AGG, T, B, B_lo, chunk_len, n_chunks,
                                                                         REVERSE, BLOCK_B, TWO_LEVEL, WIDE, LINK)
    first = t_lo + _stripe_starts(STRIPES, STEPS, WIDE)
    a, k = _fold_stripes(ins, in_strides, scalars, first, b_hi, b_lo, mb, t_hi, T, COEFFS, REVERSE, ACC, STRIPES,
                         STEPS, BLOCK_B)
    ia, ik, out_a, out_k = _across_stripes(a, k, REVERSE, ACC, STRIPES, BLOCK_B)
    carry, _, _ = _chain_carry(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, b_hi, b_lo, mb, out_a, out_k, INIT,
                               init_strides, ACC, BLOCK_B, TEST_LOOKBACK, LOOKBACK, LINK)
    _run_stripes(ins, in_strides, outs, out_strides, scalars, _opaque(first, OPAQUE), b_hi, b_lo, mb, t_hi, T,
                 ia + ik * carry, COEFFS, EMIT, REVERSE, ACC, STEPS)
