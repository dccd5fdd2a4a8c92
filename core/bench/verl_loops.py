"""verl's token loops, written from their semantics (docs/adapters/verl.md): what
``rlscan.adapters.verl`` replaces, for the tests and for tools/verl_timing.py.

They run as verl runs them: one step at a time over ``response_length``, each step a few
elementwise torch operations on ``[bs]`` slices, in the inputs' own dtypes (so with
bfloat16 values the carried next value is bfloat16, as in verl).
"""
from __future__ import annotations

import torch


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Mean and Bessel-corrected variance over ``mask = 1``, applied everywhere (verl's masked_whiten)."""
    n = mask.sum()
    if n < 2:
        raise ValueError("masked_whiten needs at least two kept positions")
    mean = (x * mask).sum() / n
    var = ((x - mean) ** 2 * mask).sum() / n * (n / (n - 1))
    out = (x - mean) * torch.rsqrt(var + 1e-8)
    return out if shift_mean else out + mean


def gae(token_level_rewards, values, response_mask, gamma, lam):
    """``(advantages, returns)``: masked GAE, one token at a time, then the whitening."""
    with torch.no_grad():
        next_value = 0
        next_adv = 0
        steps = []
        for t in reversed(range(token_level_rewards.shape[-1])):
            m = response_mask[:, t]
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            adv = delta + gamma * lam * next_adv
            # a masked token keeps the value and the advantage carried from the next kept token
            next_value = values[:, t] * m + (1 - m) * next_value
            next_adv = adv * m + (1 - m) * next_adv
            steps.append(next_adv)
        advantages = torch.stack(steps[::-1], dim=1)
        returns = advantages + values
        return masked_whiten(advantages, response_mask), returns


def reinforce_plus_plus(token_level_rewards, response_mask, gamma):
    """``(advantages, returns)``: the running return reset after EOS, then the whitening times the mask."""
    with torch.no_grad():
        returns = torch.zeros_like(token_level_rewards)
        running = 0
        for t in reversed(range(token_level_rewards.shape[1])):
            running = token_level_rewards[:, t] + gamma * running
            returns[:, t] = running
            running = running * response_mask[:, t]
        return masked_whiten(returns, response_mask) * response_mask, returns
