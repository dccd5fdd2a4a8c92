"""GAE's coefficients and outputs for the scan engine (docs/semantics.md, "GAE")."""
import triton
import triton.language as tl

from ..._triton.chained_scan import _chain_carry
from ..._triton.primitives import load, load_coef, load_flag, scalar, step_terms, store, value_after
from ..._triton.whiten import SUM_SLOTS, add_sums


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``δ_t = r_t + γ_t ν_t V'_t − V_t``; ``α_t = δ_t``, ``β_t = γ_t λ_t κ_t``."""
    R, V, NV, BOOT, TERM, TRUNC, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    v = load(V, s[1], tile, ACC)
    v_next = value_after(V, s[1], NV, s[2], BOOT, s[3], tile, T, ACC)
    nu, kappa, gamma, lmbda = step_terms(TERM, s[4], TRUNC, s[5], GAMMA, s[6], LMBDA, s[7], scalars, tile, 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)  # γλ rounded once from float64, as Python computes it
    else:
        gamma_lmbda = gamma * lmbda
    delta = r + gamma * v_next * nu - v
    return delta, gamma_lmbda * kappa, (v,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    """``advantages = Â``, ``returns = Â + V``."""
    ADV, RET = outs
    (v,) = keep
    store(ADV, s, tile, A)
    store(RET, s, tile, A + v)


@triton.jit
def coeffs_masked(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """With a step-skip mask ``m`` (docs/semantics.md, "Skipped steps"):
    ``δ_t = r_t + γ_t ν_t W_{t+1} − V_t``; ``α_t = m_t δ_t``, ``β_t = m_t γ_t λ_t ν_t + 1 − m_t``."""
    R, V, W, BOOT, TERM, MASK, GAMMA, LMBDA = ins
    r = load(R, s[0], tile, ACC)
    v = load(V, s[1], tile, ACC)
    w_next = value_after(W, s[2], None, s[2], BOOT, s[3], tile, T, ACC)
    kept = load_flag(MASK, s[5], tile, 0, T)
    nu = (~load_flag(TERM, s[4], tile, 0, T)).to(ACC)
    gamma = load_coef(GAMMA, s[6], tile, scalars[0], 0, T, ACC)
    if GAMMA is None and LMBDA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = gamma * load_coef(LMBDA, s[7], tile, scalars[1], 0, T, ACC)
    delta = r + gamma * w_next * nu - v
    return tl.where(kept, delta, 0), tl.where(kept, gamma_lmbda * nu, 1), (v,)


# ----------------------------------------------------------------------------- one pass, two lanes
#
# The masked GAE in one scan (docs/semantics.md, "One pass: two lanes"): every environment
# runs as two neighbouring lanes of the engine's batch axis, reading the same inputs
# (a lane stride of 0). Lane 0 scans ``E = Â + W/λ``, lane 1 the next kept value ``W``;
# the emit step splits the pairs and writes ``Â = E − W/λ``.

@triton.jit
def coeffs_lanes(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """Lane 0: ``α = m (r + (1/λ − 1) V)``, ``β = m γλν + 1 − m``; lane 1: ``α = m V``, ``β = 1 − m``."""
    R, V, TERM, MASK, GAMMA, INIT = ins
    r = load(R, s[0], tile, ACC)
    v = load(V, s[1], tile, ACC)
    nu = (~load_flag(TERM, s[2], tile, 0, T)).to(ACC)
    kept = load_flag(MASK, s[3], tile, 0, T)
    if GAMMA is None:
        gamma_lmbda = scalar(scalars[2], ACC)
    else:
        gamma_lmbda = load_coef(GAMMA, s[4], tile, scalars[0], 0, T, ACC) * scalar(scalars[1], ACC)
    value_lane = tile[2] == 1
    alpha = tl.where(value_lane, v, r + scalar(scalars[3], ACC) * v)
    beta = tl.where(value_lane, 0, gamma_lmbda * nu)
    return tl.where(kept, alpha, 0), tl.where(kept, beta, 1), (v, kept)


@triton.jit
def _lane_pairs(x):
    """A tile's last axis split into its (lane 0, lane 1) halves."""
    if len(x.shape) == 3:
        return tl.split(tl.reshape(x, (x.shape[0], x.shape[1], x.shape[2] // 2, 2)))
    else:
        return tl.split(tl.reshape(x, (x.shape[0], x.shape[1] // 2, 2)))


@triton.jit
def emit_lanes(outs, s, scalars, A, A_in, keep, tile, T):
    """``advantages = E − W/λ``, ``returns = advantages + V``; with ``STATS`` (``[3, SUM_SLOTS]``
    float64), the count, sum and sum of squares of the kept advantages added (``add_sums``)."""
    ADV, RET, STATS = outs
    v, kept = keep
    e, w = _lane_pairs(A)
    v, _ = _lane_pairs(v)
    kept, _ = _lane_pairs(kept.to(tl.int8))
    t, _ = _lane_pairs(tile[0] + tile[1] * 0)
    env, _ = _lane_pairs(tile[1] + tile[0] * 0)
    inside, _ = _lane_pairs(tile[3].to(tl.int8))
    inside = inside != 0
    adv = e - w * scalar(scalars[4], A.dtype)
    off = t * s[0] + env * s[1]
    tl.store(ADV + off, adv, mask=inside)
    tl.store(RET + off, adv + v, mask=inside)
    if STATS is not None:
        add_sums(STATS, inside & (kept != 0), adv)


# ----------------------------------------------------------------------------- one pass, whole rows
#
# The same two scans for rows contiguous in time (a language model's ``[B, T]`` responses):
# one program per row walks it from the end in tiles of ``BLOCK_T`` steps, and one
# ``tl.associative_scan`` over four series scans ``E`` and ``W`` side by side, carrying both
# from tile to tile.

@triton.jit
def _then_two(e_later, ke_later, w_later, kw_later, e_now, ke_now, w_now, kw_now):
    """Two reverse scans' combine: each pair's step now applied after its steps later in time."""
    return e_now + ke_now * e_later, ke_now * ke_later, w_now + kw_now * w_later, kw_now * kw_later


#: the steps a thread loads together in the row kernels (flipped in registers, see _row_scan)
ROW_RUN = tl.constexpr(4)


@triton.jit
def _row_steps(base, BLOCK_T: tl.constexpr):
    """A tile's steps from ``base``, as ``[BLOCK_T / ROW_RUN, ROW_RUN]`` runs of consecutive
    steps: the runs from the tile's end, each run in order (so that loads are vectors)."""
    run = tl.arange(0, BLOCK_T // ROW_RUN)[:, None]
    return base + (BLOCK_T // ROW_RUN - 1 - run) * ROW_RUN + tl.arange(0, ROW_RUN)[None, :]


@triton.jit
def _backward_in_time(x, BLOCK_T: tl.constexpr):
    """A tile laid out by :func:`_row_steps` as one axis that runs back in time: each run
    flipped (inside a thread's registers) and the runs joined."""
    return tl.reshape(tl.flip(x, 1), [BLOCK_T])


@triton.jit
def _forward_in_time(x, BLOCK_T: tl.constexpr):
    """The inverse of :func:`_backward_in_time`: back to :func:`_row_steps`' layout."""
    return tl.flip(tl.reshape(x, [BLOCK_T // ROW_RUN, ROW_RUN]), 1)


@triton.jit
def _row_scan(ins, s_row, scalars, row, t, inside, ACC: tl.constexpr, BLOCK_T: tl.constexpr):
    """One tile of row ``row``, steps ``t`` (:func:`_row_steps`), both scans over it from its
    end alone: ``(e, k_e, w, k_w)`` along an axis that runs back in time (step ``i`` of it is
    ``i`` steps before the tile's last), with ``E = e + k_e · E_after`` and ``W = w + k_w ·
    W_after`` (``E_after``, ``W_after``: the states after the tile); the tile's values and
    mask as loaded. Element ``BLOCK_T − 1`` composes the whole tile.

    The scan is a forward one: Triton lowers ``reverse=True`` with about 2.7 times the warp
    shuffles, which made the reverse scan most of the kernel's time."""
    R, V, TERM, MASK, BOOT = ins
    gamma_lmbda, inv_minus_1, inv = scalars
    r = tl.load(R + row * s_row[0] + t, mask=inside, other=0).to(ACC)
    v = tl.load(V + row * s_row[1] + t, mask=inside, other=0).to(ACC)
    kept = tl.load(MASK + row * s_row[3] + t, mask=inside, other=0) != 0
    k_e = tl.where(kept, scalar(gamma_lmbda, ACC), 1)
    if TERM is not None:
        ended = tl.load(TERM + row * s_row[2] + t, mask=inside, other=0) != 0
        k_e = tl.where(kept & ended, 0, k_e)
    e = tl.where(kept, r + scalar(inv_minus_1, ACC) * v, 0)
    w = tl.where(kept, v, 0)
    series = (_backward_in_time(e, BLOCK_T), _backward_in_time(k_e, BLOCK_T), _backward_in_time(w, BLOCK_T),
              _backward_in_time((~kept).to(ACC), BLOCK_T))
    e, k_e, w, k_w = tl.associative_scan(series, 0, _then_two)
    return e, k_e, w, k_w, v, kept


@triton.jit
def _row_emit(outs, s_row, row, t, inside, adv, v, kept, count, total, squares, BLOCK_T: tl.constexpr):
    """Write a tile's ``advantages`` (along :func:`_row_scan`'s axis) and ``returns =
    advantages + V``; with ``STATS``, add the kept advantages to the running count, sum and
    sum of squares."""
    ADV, RET, STATS = outs
    adv = _forward_in_time(adv, BLOCK_T)
    tl.store(ADV + row * s_row[5] + t, adv, mask=inside)
    tl.store(RET + row * s_row[6] + t, adv + v, mask=inside)
    if STATS is not None:
        counted = kept & inside
        kept_adv = tl.where(counted, adv, 0)
        count += counted.to(tl.int32)
        total += kept_adv
        squares += kept_adv * kept_adv
    return count, total, squares


@triton.jit
def _row_sums(STATS, slot, count, total, squares):
    """The running count, sum and sum of squares added to slot ``slot`` of ``STATS``."""
    if STATS is not None:
        tl.atomic_add(STATS + slot, tl.sum(count).to(tl.float64), sem="relaxed")
        tl.atomic_add(STATS + SUM_SLOTS + slot, tl.sum(total).to(tl.float64), sem="relaxed")
        tl.atomic_add(STATS + 2 * SUM_SLOTS + slot, tl.sum(squares).to(tl.float64), sem="relaxed")


@triton.jit
def _whole_tile(x, BLOCK_T: tl.constexpr):
    """Element ``BLOCK_T − 1`` of a scanned tile (its whole composition), as a ``[1]`` tensor."""
    return tl.sum(tl.where(tl.arange(0, BLOCK_T) == BLOCK_T - 1, x, 0), axis=0, keep_dims=True)


@triton.jit
def masked_rows_kernel(ins, outs, s_row, T, scalars, ACC: tl.constexpr, BLOCK_T: tl.constexpr):
    """Row ``b``: ``E_t = m_t (r_t + (1/λ − 1) V_t) + (m_t γλν_t + 1 − m_t) E_{t+1}`` and
    ``W_t = m_t V_t + (1 − m_t) W_{t+1}`` from ``E_T = W_T / λ``, ``W_T`` = the bootstrap value
    (or 0); ``advantages = E − W/λ``, ``returns = advantages + V``. ``s_row``: each input's
    row stride (steps are consecutive); with ``STATS``, the kept advantages' count, sum and
    sum of squares added once per row (as ``add_sums`` adds them)."""
    BOOT = ins[4]
    inv = scalars[2]
    row = tl.program_id(0).to(tl.int64)
    w_after = tl.zeros([1], ACC)
    if BOOT is not None:
        w_after += tl.load(BOOT + row * s_row[4] + tl.arange(0, 1)).to(ACC)
    e_after = w_after * scalar(inv, ACC)
    n_tiles = tl.cdiv(T, BLOCK_T)
    count = tl.zeros([BLOCK_T // ROW_RUN, ROW_RUN], tl.int32)
    total = tl.zeros([BLOCK_T // ROW_RUN, ROW_RUN], ACC)
    squares = tl.zeros([BLOCK_T // ROW_RUN, ROW_RUN], ACC)
    for k in range(n_tiles):
        t = _row_steps((n_tiles - 1 - k) * BLOCK_T, BLOCK_T)
        inside = t < T
        e, k_e, w, k_w, v, kept = _row_scan(ins, s_row, scalars, row, t, inside, ACC, BLOCK_T)
        e += k_e * e_after
        w += k_w * w_after
        adv = e - w * scalar(inv, ACC)
        count, total, squares = _row_emit(outs, s_row, row, t, inside, adv, v, kept, count, total, squares,
                                          BLOCK_T)
        e_after = _whole_tile(e, BLOCK_T)
        w_after = _whole_tile(w, BLOCK_T)
    _row_sums(outs[2], tl.program_id(0) % SUM_SLOTS, count, total, squares)


@triton.jit
def masked_rows_chained_kernel(ins, outs, s_row, T, scalars, WORDS, B, n_chunks, ACC: tl.constexpr,
                               BLOCK_T: tl.constexpr, LOOKBACK: tl.constexpr, TEST_LOOKBACK: tl.constexpr = False):
    """:func:`masked_rows_kernel` with each row split into ``n_chunks`` tiles of ``BLOCK_T``
    steps, one per program, chained from the row's end by the engine's decoupled look-back
    on words (``chained_scan``): a row's ``E`` and ``W`` are two links, ``2b`` and ``2b + 1``,
    of each position. A ticket gives each program its position ``j`` (tiles from the end)
    and row, in the order programs start, so a program waits only on running ones. The
    row's last tile (``j = 0``) starts from the bootstrap value, and publishes its states.
    ``WORDS``: ``n_chunks · 2B`` int64 words, then an int32 ticket counter, all bits set at
    launch."""
    BOOT = ins[4]
    counter = (WORDS + n_chunks * 2 * B).to(tl.pointer_type(tl.int32), bitcast=True)
    ticket = tl.atomic_add(counter, 1, sem="relaxed", scope="gpu") + 1  # the counter starts at -1
    j = ticket // B
    row = (ticket % B).to(tl.int64)
    link = (2 * (ticket % B) + tl.arange(0, 2))[None, :]
    first_link = link % 2 == 0
    ready = link >= 0
    t = _row_steps((n_chunks - 1 - j) * BLOCK_T, BLOCK_T)
    inside = t < T
    e, k_e, w, k_w, v, kept = _row_scan(ins, s_row, scalars, row, t, inside, ACC, BLOCK_T)
    if BOOT is not None:
        w_end = tl.load(BOOT + row * s_row[4] + tl.arange(0, 1), mask=tl.arange(0, 1) + j == 0, other=0).to(ACC)
        e += k_e * (w_end * scalar(scalars[2], ACC))
        w += k_w * w_end
    out_a = tl.where(first_link, _whole_tile(e, BLOCK_T)[:, None], _whole_tile(w, BLOCK_T)[:, None])
    out_k = tl.where(first_link, _whole_tile(k_e, BLOCK_T)[:, None], _whole_tile(k_w, BLOCK_T)[:, None])
    carry, _, _ = _chain_carry(WORDS, WORDS, B, j, row, n_chunks, 2 * B, link, link * 0, link, ready, out_a, out_k,
                               None, (0, 0, 0), ACC, 2, TEST_LOOKBACK, LOOKBACK, "words")
    e_after = tl.sum(tl.where(first_link, carry, 0), axis=1)
    w_after = tl.sum(tl.where(first_link, 0, carry), axis=1)
    e += k_e * e_after
    w += k_w * w_after
    adv = e - w * scalar(scalars[2], ACC)
    zero = tl.zeros([BLOCK_T // ROW_RUN, ROW_RUN], tl.int32)
    count, total, squares = _row_emit(outs, s_row, row, t, inside, adv, v, kept, zero, zero.to(ACC), zero.to(ACC),
                                      BLOCK_T)
    _row_sums(outs[2], tl.program_id(0) % SUM_SLOTS, count, total, squares)
