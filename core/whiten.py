"""``rlscan.masked_whiten``: advantages standardised over the positions a mask keeps.

The statistics are those of the kept positions (``mask = 1``) of the whole tensor::

    n = Σ m,    μ = Σ m·x / n,    σ² = Σ m·(x − μ)² / (n − 1)
    out = (x − μ) · rsqrt(σ² + eps)          (+ μ when shift_mean is False)

and the formula is applied at *every* position, kept or not (verl's ``masked_whiten``).
With ``group=``, the sums are those of every rank's kept positions: each rank adds its
``(n, Σ m·x, Σ m·x²)`` in float64, one all-reduce makes them the batch's, and
``σ² = (Σ m·x² − n μ²) / (n − 1)``.

On the Triton path this is three kernels: one pass that reduces blocks of the tensor to
their count, mean and centred sum of squares, one program that merges them in float64
(Chan et al.'s formula), and one pass that writes the result; the statistics stay on
the device. On the CPU path, float32 and float64 values whose rows (the last dimension)
are contiguous take two compiled loops: one reads the values and the mask in place and
gathers each row's count and shifted sums in float64, its additions reassociated into SIMD
lanes, checking the mask's values on the way (:func:`kept_sums_rows_loop`), and one writes
the result (``rlscan._cpu_rows.whiten``); other inputs, ``shift_mean=False`` and values that
need gradients take torch operations.
"""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np
import torch

from . import _backend, _cpu_rows
from ._cpu import njit, prange
from ._inputs import check_bool, check_device, check_float, check_shape, to_tensor, type_name
from .ops._skip import mask_tensor

_warned = []
MASK_VALUES = "mask must hold only 0 and 1 (1 where the position counts)"


def masked_whiten(values, mask, *, shift_mean: bool = True, eps: float = 1e-8, zero_skipped: bool = False,
                  group=None, out=None):
    """Standardise ``values`` with the mean and the Bessel-corrected variance of the
    positions where ``mask`` is 1 (over the whole tensor, or over every rank's with
    ``group``), applied to every position::

        out = (values − μ) · rsqrt(σ² + eps)          (· m with zero_skipped)

    Args:
        values: a floating tensor (or numpy array), any shape.
        mask: bool, integer or 0/1 floating values of ``values``' shape.
        shift_mean: False adds ``μ`` back (only the spread is normalised).
        eps: added to the variance under the square root: a finite float >= 0.
        zero_skipped: set the positions where ``mask`` is 0 to 0 (REINFORCE++'s
            advantages, ``masked_whiten(G, m) · m``), in the same pass.
        out: a tensor (a numpy array, for numpy ``values``) of ``values``' shape and dtype
            on its device to write the result into; ``values`` itself whitens in place (on
            the CPU the last pass writes there, with no fresh tensor). Not with autograd.

    Returns:
        A tensor of ``values``' shape and dtype (computed in float32, or float64); ``out``
        where given.

    Raises:
        ValueError: when fewer than two positions are kept (the variance is undefined;
            inside ``torch.compile`` this is not checked, and gives inf or NaN); with
            ``group``, on every rank alike.
    """
    x, numpy_io = to_tensor("values", values)
    check_float("values", x)
    m = mask_tensor(mask, x.device, "values")
    check_shape("mask", m, x.shape, "values")
    shift_mean = check_bool("shift_mean", shift_mean)
    zero_skipped = check_bool("zero_skipped", zero_skipped)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a float, got {type_name(eps)}")
    eps = float(eps)
    if not 0.0 <= eps < math.inf:  # also false for NaN
        raise ValueError(f"eps must be a finite float >= 0, got {eps}")
    target = None if out is None else _check_out(out, x)
    if group is not None:
        return _into(target, out, _across_ranks(x, m, shift_mean, eps, zero_skipped, group, numpy_io))
    if torch.compiler.is_compiling():  # traced as torch operations; the count is not checked (no data-dependent raise)
        return _into(target, out, _torch_form(x, m, shift_mean, eps, zero_skipped, check=False))
    result = None
    if _backend.path_for(x.device.type, "values") == "cpu" and shift_mean and not (
            torch.is_grad_enabled() and x.requires_grad):
        # the CPU row loops: the sums in one pass that also checks the mask's values, then the result
        rows = _rows(x, m, eps, zero_skipped, target)
        if rows is not None:
            if rows[1]:
                raise ValueError(MASK_VALUES)
            result = rows[0]
    if result is None and m.device.type == "cpu" and _holds_other_values(m):
        raise ValueError(MASK_VALUES)
    if (result is None and _backend.path_for(x.device.type, "values") == "triton" and x.is_contiguous()
            and m.is_contiguous() and x.numel()):
        try:
            from ._triton import whiten as kernels

            result = kernels.masked_whiten(x, m, shift_mean, eps, _check_count, zero_skipped)
        except ValueError:
            raise
        except Exception as error:  # a compiler or launcher failure: the torch form is as correct
            _warn_once(error)
    if result is None:
        result = _torch_form(x, m, shift_mean, eps, zero_skipped)
    if target is not None:
        return _into(target, out, result)
    return result.numpy() if numpy_io else result


def _check_out(out, x: torch.Tensor) -> torch.Tensor:
    """``out`` as a tensor, checked against ``values``."""
    target, _ = to_tensor("out", out)
    if target.dtype != x.dtype:
        raise TypeError(f"out must have the dtype of values, {x.dtype}, got {target.dtype}")
    check_device("out", target, x.device, "values")
    check_shape("out", target, x.shape, "values")
    if torch.is_grad_enabled() and (x.requires_grad or target.requires_grad):
        raise ValueError("out= takes no part in autograd: call masked_whiten without out, or under torch.no_grad()")
    return target


def _into(target, out, result):
    """``out`` (as the caller passed it) holding ``result``, unless it holds it already."""
    if target is None:
        return result
    if isinstance(result, np.ndarray):
        result = torch.from_numpy(result)
    if result.data_ptr() != target.data_ptr() or result.stride() != target.stride():
        target.copy_(result)
    return out


def apply_whitening(x: torch.Tensor, sums: torch.Tensor, mask=None, out=None) -> torch.Tensor:
    """``masked_whiten`` from sums gathered elsewhere (the Triton path, where a scan gathered
    them): ``sums = [3, P]`` float64 partial counts, sums and sums of squares over the kept
    positions of ``x``. Into ``out`` (default: ``x`` itself); with ``mask``, 0 where it is 0."""
    out = x if out is None else out
    if x.is_contiguous() and out.is_contiguous() and (mask is None or mask.is_contiguous()):
        try:
            from ._triton import whiten as kernels

            kernels.apply_sums(x, sums, 1e-8, out=out, mask=mask)
            _check_count(sums[0])
            return out
        except Exception as error:  # a compiler or launcher failure: the torch form is as correct
            _warn_once(error)
    n, s, q = sums.sum(dim=1)
    mean = s / n
    var = (q - n * mean * mean).clamp(min=0) / (n - 1)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = (x - mean.to(compute)) * torch.rsqrt(var + 1e-8).to(compute)
    out.copy_(y if mask is None else torch.where(mask != 0, y, 0))  # any strides
    _check_count(sums[0])
    return out


@njit(reassociate=True)
def kept_sums_rows_loop(x, mask, sums, bad):
    """Each row's ``[count, Σ(x − c), Σ(x − c)², c]`` over its kept positions (``mask``
    non-zero; ``c`` the row's first kept value, a shift against cancellation), in float64; a
    skipped position's value is left out (a NaN there too). The sums are reassociated: the
    compiler adds them in SIMD lanes, where a sum in the row's order waits on each addition.
    ``bad[b]`` counts the row's mask values other than 0 and 1."""
    B, T = x.shape
    for b in prange(B):
        c = 0.0
        for t in range(T):
            if mask[b, t] != 0:
                c = np.float64(x[b, t])
                break
        n = 0.0
        s = 0.0
        q = 0.0
        e = 0
        for t in range(T):
            k = mask[b, t]
            kept = k != 0
            e += kept & (k != 1)
            d = np.float64(x[b, t]) - c if kept else 0.0
            n += 1.0 if kept else 0.0
            s += d
            q += d * d
        sums[b, 0] = n
        sums[b, 1] = s
        sums[b, 2] = q
        sums[b, 3] = c
        bad[b] = e


def _rows(x: torch.Tensor, mask: torch.Tensor, eps: float, zero_skipped: bool, target=None):
    """``masked_whiten`` of CPU ``x`` (float32 or float64) as rows (its last dimension): one
    loop gathers the rows' sums and counts the mask's values other than 0 and 1
    (:func:`kept_sums_rows_loop`), one more writes the result into ``target`` where its rows
    are contiguous as well (``x`` itself too), else into a fresh tensor
    (``rlscan._cpu_rows.whiten``). ``(out, bad)``, or ``None`` where the rows are not read in
    place (the torch form then runs)."""
    if x.dim() == 0 or x.numel() == 0 or x.dtype not in (torch.float32, torch.float64) or mask.dtype not in \
            _cpu_rows.MASK_DTYPES:
        return None
    rows = [_last_dim_rows(t) for t in (x, mask)]
    if rows[0] is None or rows[1] is None:
        return None
    a_x, a_m = _cpu_rows.array(rows[0]), _cpu_rows.array(rows[1])
    out = None if target is None else _last_dim_rows(target)
    if out is None:
        out = _cpu_rows.new_rows(rows[0], x.dtype)
    sums = np.empty((a_x.shape[0], 4))
    bad = np.zeros(a_x.shape[0], dtype=np.int64)
    _cpu_rows.run(kept_sums_rows_loop, ("kept sums", _cpu_rows.signature(a_x, a_m)), (a_x.shape[0], a_x.size), a_x,
                  a_m, sums, bad)
    if bad.sum():
        return out, int(bad.sum())
    one = np.float64(1) if x.dtype == torch.float64 else np.float32(1)
    _cpu_rows.whiten(a_x, sums, one, a_m if zero_skipped else None, out=_cpu_rows.array(out), eps=eps)
    return out.view(x.shape) if out.is_contiguous() else out, 0


def _last_dim_rows(t: torch.Tensor):
    """``t`` as ``[B, T]`` rows along its last dimension read in place (a view), or ``None``."""
    return t.view(-1, t.shape[-1]) if t.is_contiguous() else _cpu_rows.rows_of(t, -1)


def _holds_other_values(m: torch.Tensor) -> bool:
    return m.dtype != torch.bool and m.numel() > 0 and not bool(((m == 0) | (m == 1)).all())


def _warn_once(error: Exception) -> None:
    if not _warned:
        _warned.append(True)
        warnings.warn(f"rlscan.masked_whiten: the Triton kernels failed ({error!r}); using torch operations",
                      stacklevel=3)


def _check_count(n) -> None:
    """verl's check, of a count or of partial counts (a synchronisation, for counts on the
    GPU: made after the launches, so that the device is not kept waiting)."""
    n = int(n.sum()) if isinstance(n, torch.Tensor) and n.dim() else int(n)
    if n < 2:
        raise ValueError(f"masked_whiten needs at least two positions with mask = 1 for the variance, got {n}")


def _across_ranks(x: torch.Tensor, m: torch.Tensor, shift_mean: bool, eps: float, zero_skipped: bool, group,
                  numpy_io: bool):
    """``masked_whiten`` with the statistics of every rank of ``group``: one all-reduce of
    ``(n, Σ m·x, Σ m·x²)`` in float64. The mask's values and the count are checked after it,
    so that every rank raises alike (a rank that raised before would leave the others
    waiting): a rank whose mask holds other values than 0 and 1 sends a NaN count."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("group: torch.distributed is not initialised (call torch.distributed.init_process_group)")
    if torch.compiler.is_compiling():
        raise ValueError("group: whitening across ranks runs outside torch.compile (a collective per call)")
    keep = m != 0
    wide = torch.where(keep, x.to(torch.float64), 0)
    count = keep.sum(dtype=torch.float64)
    if _holds_other_values(m):
        count = torch.full_like(count, math.nan)
    sums = torch.stack([count, wide.sum(), (wide * wide).sum()])
    dist.all_reduce(sums, group=group)
    n, total, squares = sums.tolist()
    if math.isnan(n):
        raise ValueError(MASK_VALUES + " (on this rank or another of the group)")
    _check_count(n)
    mean = total / n
    var = max(squares - n * mean * mean, 0.0) / (n - 1)
    out = _apply(x, keep, torch.tensor(mean, dtype=torch.float64), torch.tensor(var, dtype=torch.float64),
                 shift_mean, eps, zero_skipped)
    return out.numpy() if numpy_io else out


def _torch_form(x: torch.Tensor, m: torch.Tensor, shift_mean: bool, eps: float, zero_skipped: bool = False,
                check: bool = True) -> torch.Tensor:
    """The same statistics with torch operations (float64 sums)."""
    keep = m != 0
    n = keep.sum()
    if check:
        _check_count(n)
    wide = x.to(torch.float64)
    mean = torch.where(keep, wide, 0).sum() / n
    var = torch.where(keep, (wide - mean) ** 2, 0).sum() / (n - 1)
    return _apply(x, keep, mean, var, shift_mean, eps, zero_skipped)


def _apply(x: torch.Tensor, keep: torch.Tensor, mean: torch.Tensor, var: torch.Tensor, shift_mean: bool, eps: float,
           zero_skipped: bool) -> torch.Tensor:
    """``(x − μ) · rsqrt(σ² + eps)`` (``+ μ`` without ``shift_mean``; 0 where not ``keep`` with
    ``zero_skipped``), in float32 (float64 for float64 ``x``), in ``x``'s dtype."""
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    mean, scale = mean.to(x.device, compute), torch.rsqrt(var + eps).to(x.device, compute)
    out = (x.to(compute) - mean) * scale
    if not shift_mean:
        out = out + mean
    if zero_skipped:
        out = torch.where(keep, out, 0)
    return out.to(x.dtype)


__all__ = ["masked_whiten"]
