"""The scan engine shared by every op: two Triton kernels, specialised per op.

An op plugs in two ``@triton.jit`` functions:

* ``COEFFS(ins, strides, scalars, tile, T, ACC) -> (alpha, beta, keep)`` loads its raw
  inputs for a tile of (time, environment) positions and builds the recurrence's
  coefficients in registers; ``keep`` is a tuple of tiles the emit step needs again.
* ``EMIT(outs, strides, scalars, A, A_in, keep, tile, T)`` writes the outputs from the
  state ``A``; ``A_in`` is the state carried into each step (``A_{t+1}`` in reverse,
  ``A_{t-1}`` forward), for ops that read it.

Both kernels solve ``A_t = alpha_t + beta_t * A_{t-1}`` (forward) or
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

Long sequences with few environments are split into ``n_chunks`` chunks of time run by
separate programs, in two launches: ``PHASE=1`` reduces each chunk to its composed pair
``(a, b)``; ``PHASE=2`` folds the pairs of the chunks that precede it in scan order into
its carry, then scans and emits. ``PHASE=0`` is the single-launch case.

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
    return t * s[0] + tile[1] * s[1] + tile[2] * s[2]


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
def row(x, i, BLOCK_T: tl.constexpr):
    """Row ``i`` of a ``[BLOCK_T, BLOCK_B]`` tile, as a ``[1, BLOCK_B]`` row."""
    rows = tl.arange(0, BLOCK_T)[:, None]
    return tl.sum(tl.where(rows == i, x, 0), axis=0, keep_dims=True)


@triton.jit
def _carried_in(A, carry, REVERSE: tl.constexpr, BLOCK_T: tl.constexpr):
    """The state carried into each row of a scanned tile: the row after it in reverse,
    the row before it forward, and ``carry`` (broadcast) at the tile's edge."""
    rows = tl.arange(0, BLOCK_T)[:, None]
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
def _edge(x, REVERSE: tl.constexpr, BLOCK_T: tl.constexpr):
    """The state handed to the next tile: the first row in reverse, the last row forward."""
    if REVERSE:
        return row(x, 0, BLOCK_T)
    else:
        return row(x, BLOCK_T - 1, BLOCK_T)


@triton.jit
def _carry_from_chunks(AGG, chunk, n_chunks, b, mb, B, carry, REVERSE: tl.constexpr, BLOCK_C: tl.constexpr):
    """Fold the pairs of the chunks before ``chunk`` (in scan order) into ``carry``."""
    c = tl.arange(0, BLOCK_C)[:, None]
    if REVERSE:
        before = c > chunk
    else:
        before = c < chunk
    m = before & (c < n_chunks) & mb
    a = tl.load(AGG + c * B + b, mask=m, other=0)
    k = tl.load(AGG + (n_chunks + c) * B + b, mask=m, other=1)
    sa, sk = tl.associative_scan((a, k), 0, compose, reverse=REVERSE)
    return _edge(sa, REVERSE, BLOCK_C) + _edge(sk, REVERSE, BLOCK_C) * carry


@triton.jit
def scan_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr,
    TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr,
):
    chunk = tl.program_id(1)
    b, b_hi, b_lo, mb, carry, t_lo, t_hi = _program_start(
        INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
        REVERSE, PHASE, ACC, BLOCK_B, BLOCK_C, TWO_LEVEL, WIDE)
    carry_b = tl.full([1, BLOCK_B], 1, ACC)
    n_tiles = tl.cdiv(t_hi - t_lo, BLOCK_T)
    for i in range(n_tiles):
        if REVERSE:
            k = n_tiles - 1 - i
        else:
            k = i
        t = t_lo + k * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
        if WIDE:
            t = t.to(tl.int64)
        m = (t < t_hi) & mb
        tile = (t, b_hi, b_lo, m, mb)
        alpha, beta, keep = COEFFS(ins, in_strides, scalars, tile, T, ACC)
        alpha = tl.where(m, alpha, 0)
        beta = tl.where(m, beta, 1)
        if BLOCK_T == 1:
            a = alpha
            k_ = beta
        else:
            a, k_ = tl.associative_scan((alpha, beta), 0, compose, reverse=REVERSE)
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
def _program_start(INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
                   REVERSE: tl.constexpr, PHASE: tl.constexpr, ACC: tl.constexpr, BLOCK_B: tl.constexpr,
                   BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr):
    """This program's environments, its carry into its first step, and its time range."""
    b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)[None, :]
    if WIDE:
        b = b.to(tl.int64)
    if TWO_LEVEL:
        b_hi = b // B_lo
        b_lo = b % B_lo
    else:
        b_hi = b * 0
        b_lo = b
    mb = b < B
    if INIT is not None and PHASE != 1:
        carry = tl.load(INIT + b_hi * init_strides[1] + b_lo * init_strides[2], mask=mb, other=0).to(ACC)
    else:
        carry = tl.zeros([1, BLOCK_B], ACC)
    if PHASE == 2:
        carry = _carry_from_chunks(AGG, chunk, n_chunks, b, mb, B, carry, REVERSE, BLOCK_C)
    t_lo = chunk * chunk_len
    t_hi = tl.minimum(t_lo + chunk_len, T)
    return b, b_hi, b_lo, mb, carry, t_lo, t_hi


@triton.jit
def stripe_kernel(
    ins, in_strides, outs, out_strides, scalars,
    INIT, init_strides, AGG,
    T, B, B_lo, chunk_len, n_chunks,
    COEFFS: tl.constexpr, EMIT: tl.constexpr, REVERSE: tl.constexpr, PHASE: tl.constexpr,
    ACC: tl.constexpr, STRIPES: tl.constexpr, STEPS: tl.constexpr, BLOCK_B: tl.constexpr,
    BLOCK_C: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr,
):
    chunk = tl.program_id(1)
    b, b_hi, b_lo, mb, carry, t_lo, t_hi = _program_start(
        INIT, init_strides, AGG, chunk, T, B, B_lo, chunk_len, n_chunks,
        REVERSE, PHASE, ACC, BLOCK_B, BLOCK_C, TWO_LEVEL, WIDE)
    carry_b = tl.full([1, BLOCK_B], 1, ACC)
    stripe = tl.arange(0, STRIPES)[:, None]
    if WIDE:
        stripe = stripe.to(tl.int64)
    window = STRIPES * STEPS
    n_windows = tl.cdiv(t_hi - t_lo, window)
    for i in range(n_windows):
        if REVERSE:
            w = n_windows - 1 - i
        else:
            w = i
        first = t_lo + w * window + stripe * STEPS
        # Pass 1: fold each stripe into its composed pair, one step at a time.
        a = tl.zeros([STRIPES, BLOCK_B], ACC)
        k = tl.full([STRIPES, BLOCK_B], 1, ACC)
        for j in tl.static_range(STEPS):
            t = first + (STEPS - 1 - j if REVERSE else j)
            m = (t < t_hi) & mb
            alpha, beta, keep = COEFFS(ins, in_strides, scalars, (t, b_hi, b_lo, m, mb), T, ACC)
            beta = tl.where(m, beta, 1)
            a = tl.where(m, alpha, 0) + beta * a
            k = beta * k
        # Across stripes: the state carried into each stripe, and out of the window.
        if STRIPES == 1:
            state = a * 0 + carry
            out_a = a
            out_k = k
        else:
            sa, sk = tl.associative_scan((a, k), 0, compose, reverse=REVERSE)
            ia = _carried_in(sa, tl.zeros([1, BLOCK_B], ACC), REVERSE, STRIPES)
            ik = _carried_in(sk, tl.full([1, BLOCK_B], 1, ACC), REVERSE, STRIPES)
            state = ia + ik * carry
            out_a = _edge(sa, REVERSE, STRIPES)
            out_k = _edge(sk, REVERSE, STRIPES)
        if PHASE == 1:
            carry_b = out_k * carry_b
        else:
            # Pass 2: run each stripe from its carried-in state and write the outputs.
            for j in tl.static_range(STEPS):
                t = first + (STEPS - 1 - j if REVERSE else j)
                m = (t < t_hi) & mb
                tile = (t, b_hi, b_lo, m, mb)
                alpha, beta, keep = COEFFS(ins, in_strides, scalars, tile, T, ACC)
                state_in = state
                state = tl.where(m, alpha + beta * state, state)
                EMIT(outs, out_strides, scalars, state, state_in, keep, tile, T)
        carry = out_a + out_k * carry

    if PHASE == 1:
        tl.store(AGG + chunk * B + b, carry, mask=mb)
        tl.store(AGG + (n_chunks + chunk) * B + b, carry_b, mask=mb)


@triton.jit
def store(P, s, tile, x):
    tl.store(P + offsets(s, tile[0], tile), x, mask=tile[3])
