"""The masked GAE with two λs over rows contiguous in time, in one pass (``value_lmbda``,
:mod:`rlscan.ops.gae.dual`): ``kernel.masked_rows_kernel``'s scans plus a third, ``U = Â' +
W/λ'`` (``Â'`` the advantage with ``λ' = λ_value``), in the same ``tl.associative_scan``.
Each tile is loaded once and both outputs are written from it: ``advantages = E − W/λ``,
``returns = U − W/λ' + V``."""
import triton
import triton.language as tl

from ..._triton.primitives import scalar
from ..._triton.whiten import SUM_SLOTS
from .kernel import ROW_RUN, _backward_in_time, _forward_in_time, _row_steps, _row_sums, _whole_tile


@triton.jit
def _then_three(e_later, ke_later, u_later, ku_later, w_later, kw_later, e_now, ke_now, u_now, ku_now, w_now,
                kw_now):
    """Three reverse scans' combine: each pair's step now applied after its steps later in time."""
    return (e_now + ke_now * e_later, ke_now * ke_later, u_now + ku_now * u_later, ku_now * ku_later,
            w_now + kw_now * w_later, kw_now * kw_later)


@triton.jit
def _dual_row_scan(ins, s_row, scalars, row, t, inside, ACC: tl.constexpr, BLOCK_T: tl.constexpr):
    """``kernel._row_scan`` with the third scan: ``(e, k_e, u, k_u, w, k_w)`` along the axis
    that runs back in time, then the tile's values and mask as loaded."""
    R, V, TERM, MASK, BOOT = ins
    gamma_lmbda, inv_minus_1, inv, gamma_value_lmbda, value_inv_minus_1, value_inv = scalars
    r = tl.load(R + row * s_row[0] + t, mask=inside, other=0).to(ACC)
    v = tl.load(V + row * s_row[1] + t, mask=inside, other=0).to(ACC)
    kept = tl.load(MASK + row * s_row[3] + t, mask=inside, other=0) != 0
    k_e = tl.where(kept, scalar(gamma_lmbda, ACC), 1)
    k_u = tl.where(kept, scalar(gamma_value_lmbda, ACC), 1)
    if TERM is not None:
        ended = tl.load(TERM + row * s_row[2] + t, mask=inside, other=0) != 0
        k_e = tl.where(kept & ended, 0, k_e)
        k_u = tl.where(kept & ended, 0, k_u)
    e = tl.where(kept, r + scalar(inv_minus_1, ACC) * v, 0)
    u = tl.where(kept, r + scalar(value_inv_minus_1, ACC) * v, 0)
    w = tl.where(kept, v, 0)
    series = (_backward_in_time(e, BLOCK_T), _backward_in_time(k_e, BLOCK_T), _backward_in_time(u, BLOCK_T),
              _backward_in_time(k_u, BLOCK_T), _backward_in_time(w, BLOCK_T),
              _backward_in_time((~kept).to(ACC), BLOCK_T))
    e, k_e, u, k_u, w, k_w = tl.associative_scan(series, 0, _then_three)
    return e, k_e, u, k_u, w, k_w, v, kept


@triton.jit
def dual_rows_kernel(ins, outs, s_row, T, scalars, ACC: tl.constexpr, BLOCK_T: tl.constexpr):
    """Row ``b`` walked from its end by one program, as ``kernel.masked_rows_kernel``, with
    ``U_t = m_t (r_t + (1/λ' − 1) V_t) + (m_t γλ'ν_t + 1 − m_t) U_{t+1}`` from ``U_T = W_T / λ'``
    beside ``E`` and ``W``; ``advantages = E − W/λ``, ``returns = U − W/λ' + V``. With
    ``STATS``, the kept advantages' count, sum and sum of squares added once per row."""
    ADV, RET, STATS = outs
    BOOT = ins[4]
    inv, value_inv = scalars[2], scalars[5]
    row = tl.program_id(0).to(tl.int64)
    w_after = tl.zeros([1], ACC)
    if BOOT is not None:
        w_after += tl.load(BOOT + row * s_row[4] + tl.arange(0, 1)).to(ACC)
    e_after = w_after * scalar(inv, ACC)
    u_after = w_after * scalar(value_inv, ACC)
    n_tiles = tl.cdiv(T, BLOCK_T)
    count = tl.zeros([BLOCK_T // ROW_RUN, ROW_RUN], tl.int32)
    total = tl.zeros([BLOCK_T // ROW_RUN, ROW_RUN], ACC)
    squares = tl.zeros([BLOCK_T // ROW_RUN, ROW_RUN], ACC)
    for k in range(n_tiles):
        t = _row_steps((n_tiles - 1 - k) * BLOCK_T, BLOCK_T)
        inside = t < T
        e, k_e, u, k_u, w, k_w, v, kept = _dual_row_scan(ins, s_row, scalars, row, t, inside, ACC, BLOCK_T)
        e += k_e * e_after
        u += k_u * u_after
        w += k_w * w_after
        adv = _forward_in_time(e - w * scalar(inv, ACC), BLOCK_T)
        value_adv = _forward_in_time(u - w * scalar(value_inv, ACC), BLOCK_T)
        tl.store(ADV + row * s_row[5] + t, adv, mask=inside)
        tl.store(RET + row * s_row[6] + t, value_adv + v, mask=inside)
        if STATS is not None:
            counted = kept & inside
            kept_adv = tl.where(counted, adv, 0)
            count += counted.to(tl.int32)
            total += kept_adv
            squares += kept_adv * kept_adv
        e_after = _whole_tile(e, BLOCK_T)
        u_after = _whole_tile(u, BLOCK_T)
        w_after = _whole_tile(w, BLOCK_T)
    _row_sums(STATS, tl.program_id(0) % SUM_SLOTS, count, total, squares)
