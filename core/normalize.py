"""``rlscan.masked_normalize``: values standardised over the batch or over groups of rows
(GRPO's responses to one prompt), with the statistics of the positions a mask keeps.

With ``k`` the mask (1 where a position counts; 1 everywhere without one) and ``P`` the set
a statistic is taken over (the whole batch, or the ``group_size`` consecutive rows of a
position's group)::

    n = Σ_P k,   μ = Σ_P k·x / n,   Q = Σ_P k·(x − μ_t)²
    σ = sqrt(Q / (n − 1))  (unbiased),   sqrt(Q / n)  (biased)
    out = (x − μ_t) · k / (σ + eps)

``μ_t = μ``, or with ``leave_one_out`` the mean of the others, ``(Σ_P k·x − x_t) / (n − 1)``,
where ``k_t = 1`` (``μ`` where ``k_t = 0``). A level of ``None`` takes ``μ = 0``, or
``σ = 1`` with no ``eps``. Degenerate sets as AReaL's ``Normalization`` takes them: a mean
over ``n = 0`` (or a leave-one-out mean over ``n ≤ 1``) is 0; ``σ`` is 1 where ``n ≤ 1``
(unbiased) or ``n = 0`` (biased); with ``group_size = 1`` a leave-one-out mean is 0 and an
unbiased ``σ`` is 1. A call whose mask keeps nothing returns ``x`` unchanged.

The statistics are float64. Those of a group are rounded to ``x``'s dtype before use and
the arithmetic of ``out`` follows (AReaL stores them in tensors of ``x``'s dtype); those of
the batch are used in float64 and ``out`` rounded once.

With ``group=`` (a ``torch.distributed`` process group) the batch's statistics are those of
every rank's kept positions: one all-reduce of three float64 scalars per call (a rank's
count and either its sum and sum of squares, or its sum and the sum of squares about the
group means). Groups of rows stay within a rank.

On the CPU, two compiled loops over the rows: one gathers each row's count, sum and
centred sum of squares (float64, about the row's first kept value), one writes ``out``;
the rows' sums merge into the groups' and the batch's (Chan et al.'s formula). Elsewhere
torch operations compute the same statistics, in two passes.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch

from . import _backend, _cpu_rows
from ._inputs import check_bool, check_device, check_shape, to_tensor, type_name
from .ops._skip import MASK_DTYPES

LEVELS = ("batch", "group", None)
MASK_VALUES = "mask must hold only 0 and 1 (1 where the position counts)"


def masked_normalize(x, mask=None, *, mean="batch", std="batch", group_size=None, leave_one_out: bool = False,
                     unbiased: bool = True, eps: float = 1e-5, group=None):
    """Standardise ``x`` over the batch or over groups of ``group_size`` consecutive rows,
    with the mean and standard deviation of the positions where ``mask`` is 1::

        out = (x − μ) · mask / (σ + eps)

    (the module docstring has every case). GRPO is ``mean="group", std="group"``; Dr.GRPO
    ``std=None``; RLOO ``mean="group", leave_one_out=True, std=None``.

    Args:
        x: a float32 or float64 tensor (or numpy array) ``[B, ...]``: rows along the first dimension.
        mask: bool, integer or 0/1 floating values of ``x``'s shape, or ``None`` (every position counts).
        mean, std: ``"batch"``, ``"group"`` or ``None`` (no centring; no scaling, and no ``eps``).
        group_size: rows per group (a positive int dividing ``B``), required by a ``"group"`` level.
        leave_one_out: each kept position's mean leaves it out.
        unbiased: ``σ`` with Bessel's correction ``n − 1``.
        eps: added to ``σ``: a finite float >= 0.
        group: a ``torch.distributed`` process group: the batch level's statistics over every
            rank's positions (every rank of the group calls, whatever its mask).

    Returns:
        A tensor of ``x``'s shape and dtype (numpy in, numpy out).
    """
    x, numpy_io = to_tensor("x", x)
    if x.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"x must be a float32 or float64 tensor, got {x.dtype} (convert it with x.float())")
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (its rows), got a 0-d tensor")
    m = None
    if mask is not None:
        m, _ = to_tensor("mask", mask)
        check_device("mask", m, x.device, "x")
        if m.dtype not in MASK_DTYPES:
            raise TypeError(f"mask must be a bool, integer or floating tensor of 0/1 values, got {m.dtype}")
        check_shape("mask", m, x.shape, "x")
    for name, level in (("mean", mean), ("std", std)):
        if level not in LEVELS:
            raise ValueError(f"{name} must be 'batch', 'group' or None, got {level!r}")
    leave_one_out, unbiased = check_bool("leave_one_out", leave_one_out), check_bool("unbiased", unbiased)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a float, got {type_name(eps)}")
    eps = float(eps)
    if not 0.0 <= eps < math.inf:
        raise ValueError(f"eps must be a finite float >= 0, got {eps}")
    B = x.shape[0]
    if "group" in (mean, std):
        if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral) or group_size < 1:
            raise ValueError(f"group_size must be a positive int with a 'group' level, got {group_size!r}")
        group_size = int(group_size)
        if B % group_size:
            raise ValueError(f"group_size ({group_size}) must divide the batch's {B} rows (each group is "
                             "group_size consecutive rows)")
    else:
        group_size = max(B, 1)
    if group is not None:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("group: torch.distributed is not initialised (call torch.distributed.init_process_group)")
    levels = _Levels(mean, std, group_size, leave_one_out, unbiased, eps, x.dtype)
    out = _normalize(x, m, levels, group if "batch" in (mean, std) else None)
    return out.numpy() if numpy_io else out


class _Levels:
    __slots__ = ("mean", "std", "size", "loo", "unbiased", "eps", "dtype")

    def __init__(self, mean, std, size, loo, unbiased, eps, dtype):
        self.mean, self.std, self.size, self.loo, self.unbiased, self.eps, self.dtype = (
            mean, std, size, loo, unbiased, eps, dtype)


def _normalize(x: torch.Tensor, m, levels: _Levels, group) -> torch.Tensor:
    B = x.shape[0]
    rows = x.reshape(B, -1) if x.numel() else x.reshape(B, 0)
    mrows = None if m is None else m.reshape(B, -1) if m.numel() else m.reshape(B, 0)
    cpu = (_backend.path_for(x.device.type, "x") == "cpu" and _cpu_rows.rows_of(rows, -1) is not None
           and (mrows is None or _cpu_rows.rows_of(mrows, -1) is not None))
    if cpu and "batch" not in (levels.mean, levels.std) and rows.shape[0]:
        return _groups_cpu(x, rows, mrows, levels)
    sums = _row_sums_cpu(rows, mrows) if cpu else _row_sums_torch(rows, mrows)
    params = _parameters(sums, levels, group, x.device)
    if cpu:
        out = _cpu_rows.new_rows(rows, x.dtype)
        narrow32 = levels.dtype == torch.float32
        round_c = narrow32 and levels.mean != "batch"
        _cpu_rows.normalize_rows(rows, mrows, out, *params, round_c, narrow32 and levels.mean == "group",
                                 round_c and levels.std != "batch")
        return out.view(x.shape)
    return _apply_torch(rows, mrows, params, levels).view(x.shape)


def _groups_cpu(x, rows, mrows, levels: _Levels) -> torch.Tensor:
    """Group levels only, on the CPU: one loop per group gathers its statistics and writes its
    rows while they are in the cache (one read of the inputs from memory, as the copy's)."""
    out = _cpu_rows.new_rows(rows, x.dtype)
    stats = _cpu_rows.normalize_groups(rows, mrows, out, levels.size, levels.mean == "group", levels.loo,
                                       levels.std == "group", levels.unbiased, levels.eps,
                                       levels.dtype == torch.float32)
    if stats[:, 1].sum() > 0:
        raise ValueError(MASK_VALUES)
    if stats[:, 0].sum() == 0:  # the mask keeps nothing: x as it is
        return x.clone()
    return out.view(x.shape)


# ----------------------------------------------------------------------------- the rows' sums


def _row_sums_cpu(rows, mrows) -> torch.Tensor:
    """``[B, 4]`` float64: each row's count, sum, centred sum of squares, and its count of mask
    values other than 0 and 1."""
    return torch.from_numpy(_cpu_rows.moment_rows(rows, mrows))


def _row_sums_torch(rows, mrows) -> torch.Tensor:
    wide = rows.to(torch.float64)
    if mrows is None:
        keep = torch.ones_like(wide)
        bad = torch.zeros(rows.shape[0], dtype=torch.float64, device=rows.device)
    else:
        keep = (mrows != 0).to(torch.float64)
        bad = ((mrows != 0) & (mrows != 1)).sum(dim=1, dtype=torch.float64)
    n = keep.sum(dim=1)
    # x·k, as the mask multiplies (a NaN at a skipped position makes the sums NaN)
    total = (wide * keep).sum(dim=1)
    centre = torch.where(n > 0, total / n, 0)
    m2 = (((wide - centre[:, None]) * keep) ** 2).sum(dim=1)
    return torch.stack([n, total, m2, bad], dim=1)


# ----------------------------------------------------------------------------- statistics


def _merge(n, total, m2, size: int):
    """Each group's ``(n, Σx, M2)`` from its ``size`` rows' (Chan et al.'s formula)."""
    G = n.shape[0] // size
    n_r, s_r, m2_r = n.view(G, size), total.view(G, size), m2.view(G, size)
    n_g, s_g = n_r.sum(dim=1), s_r.sum(dim=1)
    mean_r = torch.where(n_r > 0, s_r / n_r, 0)
    mean_g = torch.where(n_g > 0, s_g / n_g, 0)
    m2_g = m2_r.sum(dim=1) + (n_r * (mean_r - mean_g[:, None]) ** 2).sum(dim=1)
    return n_g, s_g, m2_g


def _rounded(v: torch.Tensor, dtype) -> torch.Tensor:
    """``v`` (float64) as a statistic stored in a tensor of ``x``'s dtype."""
    return v.to(dtype).to(torch.float64)


def _mean_of(n, s, loo: bool, single: bool):
    """The mean AReaL takes of a set: 0 for ``n = 0``, and with ``leave_one_out`` for ``n ≤ 1``
    or groups of one row."""
    if loo and single:
        return torch.zeros_like(s), torch.zeros_like(n, dtype=torch.bool)
    usable = n > 1 if loo else n > 0
    return torch.where(usable, s / torch.where(n > 0, n, 1), 0), usable


def _sigma(n, q, unbiased: bool, single: bool):
    if unbiased:
        if single:
            return torch.ones_like(q)
        return torch.where(n > 1, (q / torch.where(n > 1, n - 1, 1)).sqrt(), 1)
    return torch.where(n > 0, (q / torch.where(n > 0, n, 1)).sqrt(), 1)


def _squares_about(n, s, m2, mean, mean_used, loo: bool, loo_n=None):
    """``Q = Σ k (x − μ_t)²`` of a set with ``(n, Σx, M2)``, about the mean ``mean`` used where
    ``mean_used`` (0 elsewhere); with ``leave_one_out``, each kept position's own mean over a
    set of ``loo_n`` kept positions: ``(loo_n / (loo_n − 1))²`` times the squares about ``mean``."""
    own = torch.where(n > 0, s / torch.where(n > 0, n, 1), 0)
    centre = torch.where(mean_used, mean, 0)
    q = m2 + n * (own - centre) ** 2
    if loo:
        ratio = torch.where(mean_used, loo_n / torch.where(loo_n > 1, loo_n - 1, 1), 1)
        q = q * ratio * ratio
    return q


def _parameters(sums: torch.Tensor, levels: _Levels, group, device):
    """The second pass's per-row arguments ``(mu, total, count, loo, denominator, keep_all)``:
    the mean each row subtracts (float64, rounded as AReaL stores it); for a leave-one-out
    mean, the sum and count of the row's set and whether the row takes it (``loo``); the
    divisor ``σ + eps``; and whether the call's mask keeps nothing (``out = x``)."""
    n_b, s_b, m2_b, bad = sums.to(device).unbind(dim=1)
    size, dtype, B = levels.size, levels.dtype, n_b.shape[0]
    n_g, s_g, m2_g = _merge(n_b, s_b, m2_b, size)
    n_B, s_B, m2_B = _merge(n_g, s_g, m2_g, n_g.shape[0]) if B else (n_g.sum(), s_g.sum(), m2_g.sum())
    n_B, s_B, m2_B = n_B.reshape(()), s_B.reshape(()), m2_B.reshape(())
    keep_all = bool(n_B == 0)
    q_B = None  # the batch's squares about the group means, summed over the ranks
    if group is None:
        if bool(bad.sum() > 0):
            raise ValueError(MASK_VALUES)
    else:
        n_B, s_B, m2_B, q_B = _across_ranks(n_B, s_B, m2_B, bad.sum(), n_g, s_g, m2_g, levels, group)

    def per_group(v):
        return v.repeat_interleave(size)

    mean_B, used_B = _mean_of(n_B, s_B, levels.loo, False)
    if levels.mean == "batch":
        mu, used = mean_B.expand(B), used_B.expand(B)
        loo_total, loo_count = s_B.expand(B), n_B.expand(B)
    elif levels.mean == "group":
        mean, used = _mean_of(n_g, s_g, levels.loo, size == 1)
        mu, used = per_group(_rounded(mean, dtype)), per_group(used)
        loo_total, loo_count = per_group(s_g), per_group(n_g)
    else:
        mu = loo_total = loo_count = torch.zeros(B, dtype=torch.float64, device=device)
        used = torch.zeros(B, dtype=torch.bool, device=device)
    loo = used if levels.loo else torch.zeros_like(used)

    if levels.std is None:
        denominator = torch.ones(B, dtype=torch.float64, device=device)
    elif levels.std == "group":
        if levels.mean == "batch":
            q_g = _squares_about(n_g, s_g, m2_g, mean_B.expand_as(n_g), used_B.expand_as(n_g), levels.loo,
                                 n_B.expand_as(n_g))
        else:
            q_g = _group_squares(n_g, s_g, m2_g, levels)
        sigma = _rounded(_sigma(n_g, q_g, levels.unbiased, size == 1), dtype)
        eps = _rounded(torch.tensor(levels.eps, dtype=torch.float64, device=device), dtype)
        denominator = per_group(_rounded(sigma + eps, dtype))
    else:
        if levels.mean == "batch":
            q = _squares_about(n_B, s_B, m2_B, mean_B, used_B, levels.loo, n_B)
        else:
            q = q_B if q_B is not None else _group_squares(n_g, s_g, m2_g, levels).sum()
        denominator = (_sigma(n_B, q, levels.unbiased, False) + levels.eps).expand(B)
    return mu, loo_total, loo_count, loo, denominator, keep_all


def _across_ranks(n, s, m2, bad, n_g, s_g, m2_g, levels: _Levels, group):
    """The batch's ``(n, Σx, M2, Q)`` over every rank of ``group``, from one all-reduce of three
    float64 scalars: the count (NaN from a rank whose mask holds other values than 0 and 1, so
    that every rank raises), and what the batch levels need: the sum and the sum of squares
    (``M2 = Σx² − (Σx)²/n``), or the sum alone, or the squares about the group means ``Q``."""
    import torch.distributed as dist

    count = torch.where(bad > 0, math.nan, n)
    zero = torch.zeros_like(s)
    if levels.mean == "batch":
        squares = m2 + s * torch.where(n > 0, s / torch.where(n > 0, n, 1), 0) if levels.std == "batch" else zero
        reduced = torch.stack([count, s, squares])
    else:
        reduced = torch.stack([count, zero, _group_squares(n_g, s_g, m2_g, levels).sum()])
    dist.all_reduce(reduced, group=group)
    n, s, third = reduced.unbind()
    if math.isnan(float(n)):
        raise ValueError(MASK_VALUES + " (on this rank or another of the group)")
    if levels.mean == "batch":
        return n, s, (third - s * s / torch.where(n > 0, n, 1)).clamp(min=0), None
    return n, s, zero, third


def _group_squares(n_g, s_g, m2_g, levels: _Levels):
    """Each group's ``Σ k (x − μ_t)²`` about the mean its rows subtract (a group mean, rounded
    to ``x``'s dtype, or none)."""
    if levels.mean == "group":
        mean, used = _mean_of(n_g, s_g, levels.loo, levels.size == 1)
        if not levels.loo:
            mean = _rounded(mean, levels.dtype)
        return _squares_about(n_g, s_g, m2_g, mean, used, levels.loo, n_g)
    return _squares_about(n_g, s_g, m2_g, torch.zeros_like(s_g), torch.zeros_like(n_g, dtype=torch.bool), False)


# ----------------------------------------------------------------------------- the torch form of the second pass


def _apply_torch(rows, mrows, params, levels: _Levels) -> torch.Tensor:
    mu, loo_total, loo_count, loo_rows, denominator, keep_all = params
    if keep_all:
        return rows.clone()
    wide = rows.to(torch.float64)
    keep = torch.ones_like(wide) if mrows is None else (mrows != 0).to(torch.float64)
    mean = mu[:, None].expand_as(wide)
    if levels.loo:
        others = (loo_total[:, None] - wide * keep) / (loo_count[:, None] - keep).clamp(min=1)
        regular = torch.where(loo_count > 0, loo_total / torch.where(loo_count > 0, loo_count, 1), 0)[:, None]
        own = torch.where(keep > 0, others, regular)
        if levels.mean == "group":
            own = _rounded(own, levels.dtype)
        mean = torch.where(loo_rows[:, None], own, mean)
    centred = wide - mean
    if levels.dtype == torch.float32 and levels.mean != "batch":
        centred = centred.float().double()
    return ((centred * keep) / denominator[:, None]).to(levels.dtype)


__all__ = ["masked_normalize"]
