"""TorchRL's float32 hyperparameters on float64 rollouts, reproduced.

TorchRL keeps ``gamma`` and ``lmbda`` as 0-d buffers, float32 unless the estimator was
converted (``.double()``). On a float64 rollout its loops then form some coefficients in
the buffers' precision before they meet the data:

* GAE: ``discount = lmbda * gamma * not_done`` rounds ``γ·λ`` to float32, while rlscan
  forms ``γ_t λ_t`` in the compute dtype (float64) from the same float32 values;
* TD(λ): ``(1 - lmbda) * next_value`` rounds ``1 − λ`` to float32 (exact for
  ``λ ≥ 0.5``; below, unless ``λ`` is a multiple of ``2⁻²⁴``), while rlscan forms
  ``1 − λ κ_t`` in float64. At a step that cuts the trace TorchRL's loop weighs ``V'_t`` by
  ``fl32(1 − λ) + λ``, which then differs from 1 as well.

Everything else in those loops (``γ`` itself, ``γ^steps``, TD(1), V-trace) meets the data
as an exact float32 value and is formed in float64 by both. The helpers below hand
rlscan's fused ops inputs that carry TorchRL's rounded coefficients, to float64
rounding (``1e-16`` relative), so the estimates and their gradients agree with TorchRL's
loops to about ``1e-15``. The choice depends on dtypes only: no host synchronisation,
and float32 rollouts (or float64 buffers) pass through untouched.
"""
from __future__ import annotations

import torch


def _rounds_coefficients(data: torch.Tensor, coefficient: torch.Tensor) -> bool:
    """Whether TorchRL forms a coefficient in a precision lower than the data's."""
    return data.dtype == torch.float64 and coefficient.dtype != torch.float64


def gae_lmbda(lmbda: torch.Tensor, gamma: torch.Tensor, reward: torch.Tensor) -> torch.Tensor:
    """The ``λ`` that makes rlscan's trace coefficient ``γ_t λ_t`` TorchRL's ``lmbda * gamma``::

        λ'_t = fl(λ γ_t) / γ_t        (λ where γ_t = 0)

    with ``fl(λ γ_t)`` computed as TorchRL computes it (in the buffers' dtype). Then
    ``γ_t λ'_t`` in float64 is TorchRL's coefficient to one float64 rounding, and
    ``0 ≤ λ'_t ≤ 1`` (``fl(λ γ) ≤ γ`` since ``λ ≤ 1``).
    """
    if not _rounds_coefficients(reward, lmbda * gamma):
        return lmbda
    rounded = (lmbda * gamma).to(torch.float64)
    gamma64 = gamma.to(torch.float64)
    nonzero = gamma64 != 0
    return torch.where(nonzero, rounded / torch.where(nonzero, gamma64, 1.0), lmbda.to(torch.float64))


def td_lambda_next_values(next_value: torch.Tensor, lmbda: torch.Tensor, done: torch.Tensor,
                          time_dim: int) -> torch.Tensor:
    """``V'_t`` scaled so that rlscan's weights on it are TorchRL's.

    TorchRL's loop computes ``G_t = r_t + γ_t [w V'_t + λ g_t]`` with ``w = fl(1 − λ)``
    (in the buffer's dtype) and ``g_t = V'_t`` where the trace is cut (``κ_t = 0``: done,
    or the last step), else ``G_{t+1}``. rlscan's ``td_lambda`` weighs ``V'_t`` by
    ``1 − λ κ_t``. So rlscan is given ``s_t V'_t`` with::

        s_t = w / (1 − λ)     where κ_t = 1        (1 where λ = 1: then w = 0 as well)
        s_t = w + λ           where κ_t = 0

    Both factors are exactly 1 when ``w = 1 − λ``.
    """
    one_minus = 1 - lmbda
    if not _rounds_coefficients(next_value, one_minus):
        return next_value
    w = one_minus.to(torch.float64)
    lam = lmbda.to(torch.float64)
    exact = 1 - lam
    inside_ratio = torch.where(exact != 0, w / torch.where(exact != 0, exact, 1.0), 1.0)
    T = next_value.shape[time_dim]
    last = torch.arange(T, device=next_value.device) == T - 1
    last = last.reshape((T,) + (1,) * (next_value.dim() - 1 - time_dim % next_value.dim()))
    cut = done.bool() | last
    return next_value * torch.where(cut, w + lam, inside_ratio)
