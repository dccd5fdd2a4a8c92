"""rsl_rl's returns and advantages computed by :func:`rlscan.gae`, from the storage's tensors.

Kept apart from ``rlscan.adapters.rsl_rl`` (which imports rsl_rl) so that a benchmark can
run the adapter's own computation where rsl_rl is not installed.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
import torch

import rlscan


def returns_and_advantages(rewards, values, dones, last_values, gamma, lam, *, exact: bool, normalize: bool):
    """``(returns, advantages)`` as rsl_rl 5's ``PPO.compute_returns`` forms them::

        δ_t = r_t + γ (1 − done_t) V_{t+1} − V_t          (V_T = last_values)
        Â_t = δ_t + γλ (1 − done_t) Â_{t+1}               (Â_T = 0)
        returns = Â + V,  advantages = returns − V        (normalised when ``normalize``)

    ``rewards``, ``values`` and ``dones`` are the storage's ``[T, N, 1]`` tensors,
    ``last_values`` the critic's ``[N, 1]`` values after the last step.
    """
    if last_values.dtype != values.dtype:
        raise TypeError(
            f"rlscan's rsl_rl GAE: the critic returned {last_values.dtype} values for a storage of "
            f"{values.dtype}; rsl_rl's loop would mix the two dtypes (convert the critic, or the storage)"
        )
    g, lmbda = coefficients(gamma, lam, values.dtype)
    returns = rlscan.gae(
        rewards, values, bootstrap_value=last_values, terminated=dones, gamma=g, lmbda=lmbda, exact=exact
    ).returns
    # rsl_rl's advantages are returns − V, which can differ from Â in the last bit.
    advantages = returns - values
    if normalize:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return returns, advantages


def coefficients(gamma, lam, dtype: torch.dtype) -> tuple:
    """``(γ, λ)`` as floats for :func:`rlscan.gae`, so that it forms rsl_rl's coefficients.

    rsl_rl multiplies ``1 − done``, a float32 tensor whatever the storage's dtype, by the
    Python floats: ``(1 − done) · γ`` is the float32 ``γ₃₂``, and ``(1 − done) · γ · λ`` is
    ``c = fl32(γ₃₂ λ₃₂)``. For a float32 storage ``(γ₃₂, λ₃₂)`` does it: rlscan forms their
    product in float64, exactly (two 24-bit mantissas), and rounds it once to float32.
    For a float64 storage rlscan keeps ``γλ`` in float64, so ``λ`` is replaced by a float64
    ``λ'`` whose product with ``γ₃₂`` is exactly ``c``: ``c / γ₃₂`` or a neighbour. One
    exists whenever ``c ≥ 0.5``; otherwise the nearest is off by one float64 rounding.
    """
    for name, value in (("gamma", gamma), ("lam", lam)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"alg.{name} must be a float, got {type(value).__name__}")
    g, lam32 = float(np.float32(gamma)), float(np.float32(lam))
    if dtype == torch.float32 or g == 0.0:
        return g, lam32
    c = float(np.float32(g * lam32))
    x = c / g
    candidates = [x, math.nextafter(x, 0.0), math.nextafter(x, 2.0)]
    candidates += [math.nextafter(candidates[1], 0.0), math.nextafter(candidates[2], 2.0)]
    return g, next((y for y in candidates if g * y == c and 0.0 <= y <= 1.0), min(x, 1.0))
