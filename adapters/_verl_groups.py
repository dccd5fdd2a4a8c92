"""verl's outcome estimators' groups: each response's group id, and each group's count,
mean and variance, for the whole batch at once.

verl's own estimators loop over the batch in Python (``for i in range(bsz)``), with a dict
of scores by group id (the prompt's ``uid``) and a few tensor operations per response and
per group. Here the ids become integers ``0 .. G-1`` once, and every statistic is one
``index_add_`` over them, summed in float64: the count ``n_g``, the mean
``μ_g = Σ s / n_g`` and the unbiased variance ``σ²_g = Σ (s − μ_g)² / (n_g − 1)`` (two
passes, so no cancellation), rounded to the scores' dtype where verl's float32 operations
take them.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


class Groups(NamedTuple):
    ids: torch.Tensor  # [B] int64, each response's group, 0 .. G-1
    count: torch.Tensor  # [G] float64
    size: torch.Tensor  # [B] float64, the size of each response's group


def group_ids(index, n: int, device) -> tuple[torch.Tensor, int]:
    """``(ids, G)``: each response's group as an integer ``0 .. G-1``, responses with equal
    ``index`` entries (as dict keys, as verl compares them) in one group.

    Args:
        index: ``n`` group labels: a numpy array (verl's ``uid``: strings in an object
            array), a sequence, or an integer tensor (grouped by value).
    """
    if isinstance(index, torch.Tensor):
        if index.is_floating_point() or index.is_complex() or index.dim() != 1:
            raise TypeError(f"index must be a 1-d integer tensor, a numpy array or a sequence of group labels, "
                            f"got a {index.dim()}-d {index.dtype} tensor")
        index = index.cpu().numpy()
    if isinstance(index, np.ndarray) and index.dtype.kind in "iub" and index.ndim == 1:
        if len(index) != n:
            raise ValueError(f"index must hold one group label per response ({n}), got {len(index)}")
        labels, ids = np.unique(index, return_inverse=True)
        return torch.from_numpy(ids.astype(np.int64, copy=False)).to(device), len(labels)
    try:
        count = len(index)
    except TypeError:
        raise TypeError(f"index must be a numpy array, a sequence or an integer tensor of group labels, "
                        f"got {type(index).__name__}") from None
    if count != n:
        raise ValueError(f"index must hold one group label per response ({n}), got {count}")
    seen: dict = {}
    ids = [seen.setdefault(label, len(seen)) for label in index]  # a dict lookup per label, as verl's loop
    return torch.tensor(ids, dtype=torch.int64, device=device), len(seen)


def groups(index, n: int, device) -> Groups:
    ids, G = group_ids(index, n, device)
    count = torch.zeros(G, dtype=torch.float64, device=device).index_add_(0, ids, torch.ones(n, dtype=torch.float64,
                                                                                               device=device))
    return Groups(ids, count, count[ids])


def group_sums(groups: Groups, x: torch.Tensor) -> torch.Tensor:
    """``[G]`` float64: the sum of ``x`` over each group."""
    return torch.zeros(len(groups.count), dtype=torch.float64, device=x.device).index_add_(
        0, groups.ids, x.to(torch.float64))


def mean_and_var(groups: Groups, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B], [B])`` float64: the mean and the unbiased variance of each response's group
    (the variance is NaN for a group of one, as ``torch.std`` gives)."""
    wide = scores.to(torch.float64)
    mean = group_sums(groups, wide)[groups.ids] / groups.size
    centred = wide - mean
    var = group_sums(groups, centred * centred)[groups.ids] / (groups.size - 1)
    return mean, var.masked_fill_(groups.size < 2, float("nan"))


def group_max_and_second(groups: Groups, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(best, r_max, r_second)``: ``[G]`` the index of a response with its group's largest
    score, that score and the second largest (equal to it where two responses share the
    maximum, as ``torch.topk(·, 2)`` gives)."""
    G = len(groups.count)
    lowest = float("-inf")
    r_max = torch.full((G,), lowest, dtype=scores.dtype, device=scores.device).scatter_reduce_(
        0, groups.ids, scores, "amax")
    at_max = scores == r_max[groups.ids]
    positions = torch.arange(len(scores), device=scores.device)
    # the first response of each group at its maximum (with a tie the advantage is 0 wherever it goes)
    best = torch.full((G,), len(scores), dtype=torch.int64, device=scores.device).scatter_reduce_(
        0, groups.ids, torch.where(at_max, positions, len(scores)), "amin")
    rest = scores.clone()
    rest[best] = lowest
    r_second = torch.full((G,), lowest, dtype=scores.dtype, device=scores.device).scatter_reduce_(
        0, groups.ids, rest, "amax")
    return best, r_max, r_second
