"""The scan engine shared by every op: six Triton kernels, specialised per op.

An op plugs in two ``@triton.jit`` functions:

* ``COEFFS(ins, strides, scalars, tile, T, ACC) -> (alpha, beta, keep)`` loads its raw
  inputs for a tile of (time, environment) positions and builds the recurrence's
  coefficients in registers; ``keep`` is a tuple of tiles the emit step needs again.
* ``EMIT(outs, strides, scalars, A, A_in, keep, tile, T)`` writes the outputs from the
  state ``A``; ``A_in`` is the state carried into each step (``A_{t+1}`` in reverse,
  ``A_{t-1}`` forward), for ops that read it.

Each kernel solves ``A_t = alpha_t + beta_t * A_{t-1}`` (forward) or
``A_t = alpha_t + beta_t * A_{t+1}`` (``REVERSE``) for a block of environments,
carrying the state in registers, so registers stay fixed whatever ``T`` is:

* ``scan_kernel`` walks time in ``[BLOCK_T, BLOCK_B]`` tiles and scans each tile with
  ``tl.associative_scan``. It suits inputs that are contiguous along time.
* ``stripe_kernel`` walks time in windows of ``STRIPES x STEPS`` steps; each stripe of
  ``STEPS`` consecutive steps is folded one step at a time inside a thread, the
  stripes' composed pairs are scanned across, and a second pass applies the carried
  state step by step. Every load is one row of environments, so it suits inputs
  that are contiguous along environments (``[T, N]``). With ``STRIPES = STEPS = 1``
  it is the sequential (``exact``) kernel.
* ``block_kernel`` does the stripe kernel's work on ``[STEPS, STRIPES, BLOCK_B]`` blocks
  held in registers (each input read once): loads of 4 contiguous environments make the
  compiler keep each thread's steps in its registers, and the steps are scanned one after
  another there (``_scan_in_thread``), with no other thread.
* ``chained_kernel`` scans one such block per program, in a single launch, chaining the
  blocks across time by a decoupled look-back (see its docstring).
* ``chained_scan_kernel`` chains ``scan_kernel``'s tiles the same way, one per program,
  for one sequence (or a few) of very many steps.
* ``chained_stripe_kernel`` chains windows the same way but runs each as the stripe kernel
  does, in two passes over its inputs (fold, then read again and emit), so that few values
  stay live per thread while a program waits on the look-back.

The chained kernels publish each block's pairs in one of two ways (``LINK``): ``"flags"``,
pairs stored, then a flag per block raised with release semantics and read with acquire
(two round trips per look-back step, any dtype); or ``"words"``, each environment's float32
pair packed in one 64-bit word that is its own flag (one round trip, no fences).

The first three can split time into ``n_chunks`` chunks run by separate programs, in two
launches: ``PHASE=1`` reduces each chunk to its composed pair ``(a, b)``; ``PHASE=2`` folds
the pairs of the chunks that precede it in scan order into its carry, then scans and emits.
``PHASE=0`` is the single-launch case.

A ``tile`` is the tuple ``(t, b_hi, b_lo, mask, batch_mask)``; element ``(t, b)`` of a
tensor with strides ``s`` is at ``t*s[0] + b_hi*s[1] + b_lo*s[2]`` (see ``_inputs``).
Scalars arrive as float64 values split into three float32 parts (``split``), because
Triton passes Python floats as float32. (The kernel argument is ``scalars``, not
``params``: Triton 3.6's argument binder has a local of that name, which shadows it.)
"""
import triton
import triton.language as tl


@triton.jit
def compose(a_first, b_first, a_then, b_then):
    """Apply ``x -> a_first + b_first*x``, then ``x -> a_then + b_then*x``."""
    return a_then + b_then * a_first, b_then * b_first


@triton.jit
def scalar(parts, ACC: tl.constexpr):
    """A float64 scalar passed as three float32 parts, in the compute dtype."""
    hi, mid, lo = parts
    if ACC == tl.float64:
        return tl.cast(hi, tl.float64) + tl.cast(mid, tl.float64) + tl.cast(lo, tl.float64)
    else:
        return tl.cast(hi, ACC)


@triton.jit
def offsets(s, t, tile):
    off = t * s[0] + tile[1] * s[1] + tile[2] * s[2]
    if len(off.shape) == 3:
        # a block_kernel block: at most 4 contiguous environments per thread, so that the
        # compiler spreads environments and stripes across all threads and keeps steps in each;
        # a one-stripe block narrower than 128 environments takes fewer per thread, so that a
        # warp's 32 threads still lie along its environments
        if off.shape[1] == 1 and off.shape[2] < 128:
            off = tl.max_contiguous(off, [1, 1, max(1, off.shape[2] // 32)])
        else:
            off = tl.max_contiguous(off, [1, 1, 4])
    return off


@triton.jit
def load(P, s, tile, ACC: tl.constexpr):
    """The tile of a ``[T, B]`` series, in the compute dtype (0 outside the mask)."""
    return tl.load(P + offsets(s, tile[0], tile), mask=tile[3], other=0).to(ACC)


@triton.jit
def load_or_zero(P, s, tile, ACC: tl.constexpr):
    """The tile of a series, or zeros where ``P`` is None (an output's gradient autograd left out)."""
    if P is None:
        return tl.zeros(tile[3].shape, ACC)
    else:
        return load(P, s, tile, ACC)


@triton.jit
def load_shifted(P, s, tile, shift: tl.constexpr, T, ACC: tl.constexpr):
    """The series at ``t + shift``, 0 where that falls outside ``[0, T)``."""
    t = tile[0] + shift
    return tl.load(P + offsets(s, t, tile), mask=tile[3] & (t >= 0) & (t < T), other=0).to(ACC)


@triton.jit
def load_batch(P, s, tile, ACC: tl.constexpr):
    """A per-environment value (a ``[*B]`` tensor) as a ``[1, BLOCK_B]`` row."""
    return tl.load(P + tile[1] * s[1] + tile[2] * s[2], mask=tile[4], other=0).to(ACC)


@triton.jit
def load_flag(P, s, tile, shift: tl.constexpr, T):
    """Where a flag is set (non-zero) at ``t + shift``; all False when ``P`` is None."""
    if P is None:
        return tl.zeros(tile[3].shape, tl.int1)
    else:
        t = tile[0] + shift
        return tl.load(P + offsets(s, t, tile), mask=tile[3] & (t >= 0) & (t < T), other=0) != 0


@triton.jit
def load_coef(P, s, tile, parts, shift: tl.constexpr, T, ACC: tl.constexpr):
    """A per-step coefficient (gamma, lambda) at ``t + shift``: the tensor when given, else the scalar."""
    if P is None:
        return scalar(parts, ACC)
    else:
        t = tile[0] + shift
        return tl.load(P + offsets(s, t, tile), mask=tile[3] & (t >= 0) & (t < T), other=0).to(ACC)


@triton.jit
def step_terms(TERM, s_term, TRUNC, s_trunc, GAMMA, s_gamma, LMBDA, s_lmbda, scalars, tile, SHIFT: tl.constexpr, T,
               ACC: tl.constexpr):
    """At ``t + SHIFT``: ``(ν, κ, γ, λ)``, the bootstrap mask ``1 − terminated``, the
    continuation (0 where terminated or truncated and at the last step), and the per-step
    coefficients (tensors, or the scalars ``scalars[0]`` and ``scalars[1]``)."""
    term = load_flag(TERM, s_term, tile, SHIFT, T)
    done = term | load_flag(TRUNC, s_trunc, tile, SHIFT, T)
    nu = (~term).to(ACC)
    kappa = ((~done) & (tile[0] + SHIFT < T - 1)).to(ACC)
    gamma = load_coef(GAMMA, s_gamma, tile, scalars[0], SHIFT, T, ACC)
    lmbda = load_coef(LMBDA, s_lmbda, tile, scalars[1], SHIFT, T, ACC)
    return nu, kappa, gamma, lmbda


@triton.jit
def value_after(V, sV, NV, sNV, BOOT, sBOOT, tile, T, ACC: tl.constexpr):
    """``V'_t``: ``next_values[t]`` if given, else ``V[t+1]``, with the bootstrap at ``t = T-1``."""
    if NV is not None:
        return load(NV, sNV, tile, ACC)
    else:
        t = tile[0]
        if V is not None:
            nxt = load_shifted(V, sV, tile, 1, T, ACC)
        else:
            nxt = tl.zeros(tile[3].shape, ACC)
        if BOOT is not None:
            nxt = tl.where(t == T - 1, load_batch(BOOT, sBOOT, tile, ACC), nxt)
        return nxt


@triton.jit
def _along_first_axis(n: tl.constexpr, like):
    """``0 .. n-1`` along the first axis of a tensor of ``like``'s rank (2 or 3)."""
    if len(like.shape) == 3:
        return tl.arange(0, n)[:, None, None]
    else:
        return tl.arange(0, n)[:, None]


@triton.jit
def row(x, i, BLOCK_T: tl.constexpr, KEEP_DIMS: tl.constexpr = True):
    """Row ``i`` along the first axis of a tile (``[BLOCK_T, BLOCK_B]``, or a block
    ``[STEPS, STRIPES, BLOCK_B]``), that axis kept with length 1 or dropped."""
    return tl.sum(tl.where(_along_first_axis(BLOCK_T, x) == i, x, 0), axis=0, keep_dims=KEEP_DIMS)


@triton.jit
def _carried_in(A, carry, REVERSE: tl.constexpr, BLOCK_T: tl.constexpr):
    """The state carried into each row of a scanned tile (or step of a block): the row after
    it in reverse, the row before it forward, and ``carry`` (broadcast) at the edge."""
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
             ACC: tl.constexpr, N: tl.constexpr, IN_THREAD: tl.constexpr = False):
    """The op's coefficients at times ``t`` (identity pairs outside ``[.., t_hi)`` and the
    environments), scanned along the first axis (``N`` long, in each thread's registers
    if ``IN_THREAD``) with no carry: ``(a, k)``, the tile, and what the op keeps for its
    outputs."""
    m = (t < t_hi) & mb
    tile = (t, b_hi, b_lo, m, mb)
    alpha, beta, keep = COEFFS(ins, in_strides, scalars, tile, T, ACC)
    alpha = tl.where(m, alpha, 0)
    beta = tl.where(m, beta, 1)
    if N == 1:
        return alpha, beta, tile, keep
    elif IN_THREAD:
        a, k = _scan_in_thread(alpha, beta, REVERSE, N)
        return a, k, tile, keep
    else:
        a, k = tl.associative_scan((alpha, beta), 0, compose, reverse=REVERSE)
        return a, k, tile, keep


@triton.jit
def scan_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr,
    TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, STAGES: tl.constexpr = None, UNROLL: tl.constexpr = None,
):
    chunk = tl.program_id(1)
    b, b_hi, b_lo, mb, carry, t_lo, t_hi = _program_start(
        INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
        REVERSE, PHASE, ACC, BLOCK_B, BLOCK_C, TWO_LEVEL, WIDE)
    carry_b = tl.full([1, BLOCK_B], 1, ACC)
    n_tiles = tl.cdiv(t_hi - t_lo, BLOCK_T)
    for i in tl.range(n_tiles, num_stages=STAGES, loop_unroll_factor=UNROLL):
        if REVERSE:
            k = n_tiles - 1 - i
        else:
            k = i
        t = t_lo + k * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
        if WIDE:
            t = t.to(tl.int64)
        a, k_, tile, keep = _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS, REVERSE, ACC,
                                     BLOCK_T)
        A = a + k_ * carry
        if PHASE == 1:
            carry_b = _edge(k_ * carry_b, REVERSE, BLOCK_T)
        else:
            EMIT(outs, out_strides, scalars, A, _carried_in(A, carry, REVERSE, BLOCK_T), keep, tile, T)
        carry = _edge(A, REVERSE, BLOCK_T)

    if PHASE == 1:
        tl.store(AGG + chunk * B + b, carry, mask=mb)
        tl.store(AGG + (n_chunks + chunk) * B + b, carry_b, mask=mb)


@triton.jit
def _envs(pid_b, B, B_lo, BLOCK_B: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr):
    """Environment block ``pid_b``: indices ``b``, their two-level split, and the mask ``b < B``."""
    b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)[None, :]
    if WIDE:
        b = b.to(tl.int64)
    if TWO_LEVEL:
        b_hi = b // B_lo
        b_lo = b % B_lo
    else:
        b_hi = b * 0
        b_lo = b
    return b, b_hi, b_lo, b < B


@triton.jit
def _initial(INIT, init_strides, b_hi, b_lo, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr):
    """The state carried into the first step in scan order: ``INIT``, or zeros."""
    if INIT is not None:
        return tl.load(INIT + b_hi * init_strides[1] + b_lo * init_strides[2], mask=mb, other=0).to(ACC)
    else:
        return tl.zeros([1, BLOCK_B], ACC)


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
def _stripe_starts(STRIPES: tl.constexpr, STEPS: tl.constexpr, WIDE: tl.constexpr):
    """A window's stripes' first time offsets, ``stripe*STEPS``, as a ``[STRIPES, 1]`` tensor."""
    stripe = tl.arange(0, STRIPES)[:, None]
    if WIDE:
        stripe = stripe.to(tl.int64)
    return stripe * STEPS


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
        if REVERSE:
            w = n_windows - 1 - i
        else:
            w = i
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
        tl.store(AGG + chunk * B + b, carry, mask=mb)
        tl.store(AGG + (n_chunks + chunk) * B + b, carry_b, mask=mb)


@triton.jit
def _block(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS: tl.constexpr, REVERSE: tl.constexpr,
           ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
           STEP_SCAN: tl.constexpr):
    """One ``[STEPS, STRIPES, BLOCK_B]`` block at times ``t``: its coefficients scanned along
    steps (``a``, ``k``), what each stripe receives from the stripes before it in scan order
    as a map ``x -> ia + ik*x`` of the block's carried-in state, and the whole block's
    composed pair ``(out_a, out_k)``. ``STEP_SCAN``: ``"registers"`` scans the steps
    one after the other in each thread, ``"shuffles"`` with ``tl.associative_scan``."""
    a, k, tile, keep = _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS, REVERSE, ACC, STEPS,
                                STEP_SCAN == "registers")
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
def _block_axes(STRIPES: tl.constexpr, STEPS: tl.constexpr, WIDE: tl.constexpr):
    """A block's time offsets, ``stripe*STEPS + step``, as a ``[STEPS, STRIPES, 1]`` tensor."""
    step = tl.arange(0, STEPS)[:, None, None]
    stripe = tl.arange(0, STRIPES)[None, :, None]
    if WIDE:
        step = step.to(tl.int64)
    return stripe * STEPS + step


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
        if REVERSE:
            w = n_windows - 1 - i
        else:
            w = i
        a, k, ia, ik, out_a, out_k, tile, keep = _block(
            ins, in_strides, scalars, t_lo + w * window + offset, b_hi3, b_lo3, mb3, t_hi, T,
            COEFFS, REVERSE, ACC, STRIPES, STEPS, BLOCK_B, STEP_SCAN)
        if PHASE == 1:
            carry_b = out_k * carry_b
        else:
            _emit_block(outs, out_strides, scalars, a, k, ia, ik, carry, keep, tile, T, EMIT, REVERSE, STEPS)
        carry = out_a + out_k * carry

    if PHASE == 1:
        tl.store(AGG + chunk * B + b, carry, mask=mb)
        tl.store(AGG + (n_chunks + chunk) * B + b, carry_b, mask=mb)


@triton.jit
def _wait_for(FLAGS, i):
    """Spin until flag ``i`` is set; its value (1: aggregate, 2: inclusive prefix)."""
    f = tl.atomic_add(FLAGS + i, 0, sem="acquire", scope="gpu")
    while f == 0:
        f = tl.atomic_add(FLAGS + i, 0, sem="acquire", scope="gpu")
    return f


@triton.jit
def _look_back(AGG, FLAGS, j, pid_b, n_b, n_chunks, B, b, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr):
    """The state carried into the block at scan position ``j``: walk back over the blocks
    before it, composing their published pairs, until one has published its outgoing state.
    Position 0 always publishes that state, so the walk ends. Also returns the positions
    composed and the round trips taken: ``scripts/h200_anatomy.py`` records them, and the
    shipped kernels drop them (so does the compiled code)."""
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
def _publish(FLAGS, i, flag):
    """Raise flag ``i`` to ``flag`` once every thread's stores before it are made (release):
    a program that sees the flag sees those stores."""
    tl.debug_barrier()
    tl.atomic_xchg(FLAGS + i, flag, sem="release", scope="gpu")


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
    more (a scan cost 2-4% more at W = 2, run 50)."""
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
    a, k, tile, keep = _scanned(ins, in_strides, scalars, t, b_hi, b_lo, mb, t_hi, T, COEFFS, REVERSE, ACC, BLOCK_T)
    carry, _, _ = _chain_carry(AGG, FLAGS, n_b, j, pid_b, n_chunks, B, b, b_hi, b_lo, mb, _edge(a, REVERSE, BLOCK_T),
                               _edge(k, REVERSE, BLOCK_T), INIT, init_strides, ACC, BLOCK_B, TEST_LOOKBACK, LOOKBACK,
                               LINK)
    A = a + k * carry
    EMIT(outs, out_strides, scalars, A, _carried_in(A, carry, REVERSE, BLOCK_T), keep, tile, T)


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


@triton.jit
def store(P, s, tile, x):
    tl.store(P + offsets(s, tile[0], tile), x, mask=tile[3])
