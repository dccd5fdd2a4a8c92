"""GAE's coefficients and outputs for the scan engine (docs/semantics.md, "GAE")."""
import triton
import triton.language as tl

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


@triton.jit
def masked_rows_kernel(ins, outs, s_row, T, scalars, ACC: tl.constexpr, BLOCK_T: tl.constexpr):
    """Row ``b``: ``E_t = m_t (r_t + (1/λ − 1) V_t) + (m_t γλν_t + 1 − m_t) E_{t+1}`` and
    ``W_t = m_t V_t + (1 − m_t) W_{t+1}`` from ``E_T = W_T / λ``, ``W_T`` = the bootstrap value
    (or 0); ``advantages = E − W/λ``, ``returns = advantages + V``. ``s_row``: each input's
    row stride (steps are consecutive); with ``STATS``, the kept advantages' count, sum and
    sum of squares added once per row (as ``add_sums`` adds them)."""
    R, V, TERM, MASK, BOOT = ins
    ADV, RET, STATS = outs
    gamma_lmbda, inv_minus_1, inv = scalars
    row = tl.program_id(0).to(tl.int64)
    w_after = tl.zeros([1], ACC)
    if BOOT is not None:
        w_after += tl.load(BOOT + row * s_row[4] + tl.arange(0, 1)).to(ACC)
    e_after = w_after * scalar(inv, ACC)
    step = tl.arange(0, BLOCK_T)
    n_tiles = tl.cdiv(T, BLOCK_T)
    count = tl.zeros([BLOCK_T], tl.int32)
    total = tl.zeros([BLOCK_T], ACC)
    squares = tl.zeros([BLOCK_T], ACC)
    for k in range(n_tiles):
        t = (n_tiles - 1 - k) * BLOCK_T + step
        inside = t < T
        r = tl.load(R + row * s_row[0] + t, mask=inside, other=0).to(ACC)
        v = tl.load(V + row * s_row[1] + t, mask=inside, other=0).to(ACC)
        kept = tl.load(MASK + row * s_row[3] + t, mask=inside, other=0) != 0
        k_e = tl.where(kept, scalar(gamma_lmbda, ACC), 1)
        if TERM is not None:
            ended = tl.load(TERM + row * s_row[2] + t, mask=inside, other=0) != 0
            k_e = tl.where(kept & ended, 0, k_e)
        e = tl.where(kept, r + scalar(inv_minus_1, ACC) * v, 0)
        w = tl.where(kept, v, 0)
        e, k_e, w, k_w = tl.associative_scan((e, k_e, w, (~kept).to(ACC)), 0, _then_two, reverse=True)
        e += k_e * e_after
        w += k_w * w_after
        adv = e - w * scalar(inv, ACC)
        tl.store(ADV + row * s_row[5] + t, adv, mask=inside)
        tl.store(RET + row * s_row[6] + t, adv + v, mask=inside)
        if STATS is not None:
            counted = kept & inside
            kept_adv = tl.where(counted, adv, 0)
            count += counted.to(tl.int32)
            total += kept_adv
            squares += kept_adv * kept_adv
        e_after = tl.sum(tl.where(step == 0, e, 0), axis=0, keep_dims=True)
        w_after = tl.sum(tl.where(step == 0, w, 0), axis=0, keep_dims=True)
    if STATS is not None:
        slot = tl.program_id(0) % SUM_SLOTS
        tl.atomic_add(STATS + slot, tl.sum(count).to(tl.float64), sem="relaxed")
        tl.atomic_add(STATS + SUM_SLOTS + slot, tl.sum(total).to(tl.float64), sem="relaxed")
        tl.atomic_add(STATS + 2 * SUM_SLOTS + slot, tl.sum(squares).to(tl.float64), sem="relaxed")
