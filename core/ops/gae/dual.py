"""``rlscan.gae(..., value_lmbda=)``: the advantages with ``λ``, the value targets with a second
``λ_value`` (VAPO's decoupled λ: the policy's advantages with ``λ_policy`` ≈ 0.95, the critic's
targets with ``λ_value`` = 1)::

    advantages = Â(λ)                   (whitened with ``whiten=True``)
    returns    = Â(λ_value) + V

Each output's per-step arithmetic is the single-λ op's: ``returns`` are the bits of
``gae(..., lmbda=value_lmbda).returns`` wherever that call is exact (the CPU path, or
``exact=True``), and ``advantages`` those of ``gae(..., lmbda=lmbda).advantages``.

One pass where it applies: on the CPU, masked ``[B, T]`` rows contiguous in time with float
``γ``, ``λ`` and ``λ_value`` (:mod:`rlscan.ops.gae.rows`) run one loop that carries the second
advantage beside the first, so each input element is read once. Elsewhere (another layout,
a tensor ``λ``, no mask, ``out=``, ``group=``, gradients to record, ``torch.compile``, the
Triton path) the op runs twice, once with each ``λ``, and keeps one output of each call:
correct, and twice the reads.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..._dispatch import path_of
from .. import _skip


def gae(call, values, boot, term, next_values, truncated, mask, g, lam, value_lam, whiten: bool, exact: bool, out,
        group, again):
    """``(advantages, returns)`` of the dual-λ GAE. ``call`` and the tensors are the op's checked
    arguments, ``lam`` and ``value_lam`` the checked ``λ``s (:class:`rlscan._call.Coef`);
    ``again(lmbda, whiten, group, out)`` calls ``rlscan.gae`` on the caller's own
    arguments with these replaced (the fallback's two calls)."""
    from .op import GAEOutput

    if mask is not None and out is None and group is None:
        result = _one_pass(call, values, boot, term, next_values, truncated, mask, g, lam, value_lam, whiten)
        if result is not None:
            return GAEOutput(*call.finish(result))
    return GAEOutput(*_two_calls(again, lam, value_lam, whiten, group, out))


def _one_pass(call, values, boot, term, next_values, truncated, mask, g, lam, value_lam, whiten) -> Optional[tuple]:
    """The one-pass forms (as :func:`rlscan._dispatch.run_masked` picks a plan variant), or ``None``."""
    if g.tensor is not None or lam.tensor is not None or value_lam.tensor is not None:
        return None
    inputs = (call.anchor, values, boot)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        return None  # autograd records the two calls
    if torch.compiler.is_compiling() or 0 in call.shape or path_of(call) != "cpu":
        return None
    mask = _skip.check_mask(call, "gae", mask, next_values, truncated, values=False)
    from . import rows

    return rows.advantages(call, values, boot, term, mask, g.value, lam.value, whiten, value_lam.value)


def _two_calls(again, lam, value_lam, whiten: bool, group, out) -> tuple:
    """The advantages of a call with ``λ`` and the returns of one with ``λ_value``. With ``out``,
    each call writes its other output into one scratch tensor, so that nothing is copied."""
    lmbda = lam.value if lam.tensor is None else lam.tensor
    value_lmbda = value_lam.value if value_lam.tensor is None else value_lam.tensor
    if out is None:
        advantages = again(lmbda, whiten, group, None).advantages
        return advantages, again(value_lmbda, False, None, None).returns
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        return again(lmbda, whiten, group, out)  # the op's own check of out= raises
    scratch = np.empty_like(out[1]) if isinstance(out[1], np.ndarray) else torch.empty_like(out[1])
    advantages = again(lmbda, whiten, group, (out[0], scratch)).advantages
    return advantages, again(value_lmbda, False, None, (scratch, out[1])).returns
