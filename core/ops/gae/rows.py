"""The masked GAE over rows contiguous in time on the CPU path (a language model's
``[B, T]`` responses, verl's layout): one loop over the inputs that carries the next kept
value and the advantage in registers and gathers the whitening's statistics
(``cpu.gae_masked_rows_loop``), then, with ``whiten``, one pass that whitens the
advantages in place (:mod:`rlscan._cpu_rows`). Each input element is read once, in place
(bfloat16 values too), and nothing but the two outputs is written.

It applies to 2-D inputs whose rows are contiguous in time, scalar ``γ`` and ``λ``, dtypes
the row loops read (:data:`rlscan._cpu_rows.VALUE_DTYPES`, ``MASK_DTYPES``) and results in
the compute dtype; elsewhere the op runs its two loops (the next kept values, then GAE) and
:func:`rlscan.masked_whiten`. Either way the steps run in the same order: the same bits.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ... import _cpu_rows
from .. import _skip


def plan(call, tensors: tuple, scalars: tuple, whiten: bool) -> Optional[tuple]:
    """The masked GAE's CPU plan variant (:class:`rlscan._spec.Masked`): :func:`advantages` on
    the op's inputs, where ``γ`` and ``λ`` are floats."""
    _, values, _, boot, term, mask, gamma_tensor, lmbda_tensor = tensors
    if gamma_tensor is not None or lmbda_tensor is not None:
        return None
    gamma, lmbda, _ = scalars
    return advantages(call, values, boot, term, mask, gamma, lmbda, whiten)


def advantages(call, values, boot, term, mask, gamma: float, lmbda: float, whiten: bool,
               value_lmbda: Optional[float] = None) -> Optional[tuple]:
    """``(advantages, returns)``, or ``None`` where this path does not apply. Raises
    ``ValueError`` where ``mask`` holds values other than 0 and 1 (the loop counts them).
    With ``value_lmbda``, ``returns`` are ``Â(value_lmbda) + V``, carried in the same loop."""
    compute = call.compute_dtype
    if call.result_dtype != compute or not _cpu_rows.readable((call.anchor, values), (mask, term)):
        return None
    time_dim = call.time_dim
    series = [_cpu_rows.rows_of(x, time_dim) for x in (call.anchor, values, mask, term) if x is not None]
    if any(x is None for x in series) or (boot is not None and (boot.dim() != 1 or boot.dtype not in
                                                                _cpu_rows.VALUE_DTYPES)):
        return None
    r, v, m = series[:3]
    t = series[3] if term is not None else None
    adv, ret = (_cpu_rows.new_rows(r, compute) for _ in range(2))
    arrays = [_cpu_rows.array(x) for x in (r, v, m)]
    t_array = None if t is None else _cpu_rows.array(t)
    b_array = None if boot is None else _cpu_rows.array(boot.detach().view(-1, 1))
    np_dtype = np.float64 if compute == torch.float64 else np.float32
    one = np_dtype(1)
    sums = np.empty((r.shape[0], 4)) if whiten else None
    a_adv, a_ret = _cpu_rows.array(adv), _cpu_rows.array(ret)
    from .cpu import gae_masked_rows_loop

    bad = np.zeros(r.shape[0], dtype=np.int64)
    dual = value_lmbda is not None
    key = ("gae_masked_rows", _cpu_rows.signature(*arrays, b_array, t_array, a_adv), whiten, dual)
    groups = -(-r.shape[0] // _cpu_rows.ROWS_AT_ONCE)
    gamma_value_lmbda = np_dtype(gamma * value_lmbda) if dual else None
    _cpu_rows.run(gae_masked_rows_loop, key, (groups, r.numel()), arrays[0], arrays[1], arrays[2], b_array, t_array,
                  np_dtype(gamma), np_dtype(gamma * lmbda), gamma_value_lmbda, one, a_adv, a_ret, sums, bad)
    _skip.check_counted_values(call, mask, bad)
    if whiten:
        _cpu_rows.whiten(a_adv, sums, one)
    if time_dim not in (1, -1):
        adv, ret = adv.t(), ret.t()
    return adv, ret
