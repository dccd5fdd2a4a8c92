"""CleanRL's GAE loop as one rlscan call.

CleanRL's PPO scripts (``ppo.py``, ``ppo_atari.py``, ``ppo_continuous_action.py``, ...)
end every rollout with the same loop over time. :func:`gae` replaces it, taking the
script's tensors as they are::

    advantages, returns = gae(rewards, values, dones, next_value, next_done,
                              args.gamma, args.gae_lambda)

CleanRL stores ``dones[t] = 1`` when the observation ``obs[t]`` *started* an episode
(the previous step ended one), and ``next_done`` for the observation after the
window. rlscan's flags say that an episode *ended* at step ``t``, so the episode
ended after step ``t`` iff ``dones[t+1]`` (``next_done`` for the last step), and
CleanRL treats every end as a termination (no bootstrap)::

    terminated[t] = dones[t+1]   (t < T-1),    terminated[T-1] = next_done
    bootstrap_value = next_value

:func:`gae_with_truncation` is the correct treatment of time limits that the scripts
leave out: a truncated step bootstraps from the value of the episode's final
observation.

These are plain functions, without the ``enable``/``patch`` verbs of the other adapters
(:mod:`rlscan.adapters`): CleanRL has no object or registry that computes its GAE, only
the loop written into each script, so the script calls rlscan in its place. See
docs/adapters/cleanrl.md.
"""
from __future__ import annotations

from typing import Optional

import torch

import rlscan

from ._common import check_dense, check_unit_float, kind

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_FLAGS = (torch.bool, torch.uint8) + _FLOATS

__all__ = ["gae", "gae_with_truncation"]


def gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda, *, exact=False) -> rlscan.GAEOutput:
    """CleanRL's GAE, with CleanRL's arguments::

        ν_t = 1 − dones[t+1]                     (1 − next_done at t = T−1)
        V'_t = values[t+1]                       (next_value at t = T−1)
        δ_t = rewards[t] + γ V'_t ν_t − values[t]
        Â_t = δ_t + γ λ ν_t Â_{t+1}              (Â_T = 0)
        returns = Â + values

    Args:
        rewards, values: floating tensors of shape ``(num_steps, num_envs)``.
        dones: ``(num_steps, num_envs)`` flags (bool, uint8 or 0/1 floats); ``dones[t]``
            is set when ``obs[t]`` started an episode. ``dones[0]`` is not read.
            ``None`` (with ``next_done=None``) for a stream that never resets, such as
            the intrinsic rewards of ``ppo_rnd_envpool.py``.
        next_value: the value of the observation after the window, ``(1, num_envs)``
            as CleanRL computes it (``agent.get_value(next_obs).reshape(1, -1)``) or
            ``(num_envs,)``.
        next_done: ``(num_envs,)`` flags, set when the observation after the window
            started an episode; ``None`` together with ``dones``.
        gamma, gae_lambda: floats in [0, 1].
        exact: evaluate the loop one step at a time, in its order: bit for bit
            CleanRL's float32 loop on every device. The CPU loop always is.

    Returns:
        ``GAEOutput(advantages, returns)``, which unpacks as ``advantages, returns``,
        each of shape ``(num_steps, num_envs)``.
    """
    num_envs = _check_rollout(rewards, values)
    bootstrap = _check_next_value(next_value, rewards, num_envs)
    terminated = _terminated_after_each_step(dones, next_done, rewards)
    return rlscan.gae(
        rewards, values, bootstrap_value=bootstrap, terminated=terminated,
        gamma=check_unit_float("gamma", gamma), lmbda=check_unit_float("gae_lambda", gae_lambda), exact=exact,
    )


def gae_with_truncation(
    rewards, values, terminations, truncations, next_value, final_values, gamma, gae_lambda, *, exact=False
) -> rlscan.GAEOutput:
    """GAE that bootstraps at time-limit truncations from the final observation's value::

        V'_t = final_values[t]                   where truncations[t] and not terminations[t]
             = values[t+1]                       else (next_value at t = T−1)
        δ_t = rewards[t] + γ V'_t (1 − terminations[t]) − values[t]
        Â_t = δ_t + γ λ (1 − done_t) Â_{t+1}    (Â_T = 0,  done_t = terminations[t] or truncations[t])
        returns = Â + values

    The flags are the ones ``envs.step`` returned at each step, unshifted:
    ``terminations[t]`` / ``truncations[t]`` say that the episode ended *after* step
    ``t``. A step that is both counts as terminated.

    Args:
        rewards, values: floating tensors of shape ``(num_steps, num_envs)``.
        terminations, truncations: ``(num_steps, num_envs)`` flags from ``envs.step``.
        next_value: the value of the observation after the window, ``(1, num_envs)``
            or ``(num_envs,)``.
        final_values: ``(num_steps, num_envs)``; where ``truncations[t]`` is set, the
            value of that episode's final observation (same-step autoreset:
            ``infos["final_obs"]``, or ``infos["final_observation"]`` before
            Gymnasium 1.0). Other entries are not read (zeros, say). With
            next-step autoreset (Gymnasium 1.x's default, envpool) the final
            observation is the next step's: ``torch.cat([values[1:], next_value])``,
            and the dummy step after each episode end must be left out of the loss.
        gamma, gae_lambda: floats in [0, 1].
        exact: evaluate one step at a time in the loop's order (the CPU loop always does).

    Returns:
        ``GAEOutput(advantages, returns)``, each of shape ``(num_steps, num_envs)``.
    """
    num_envs = _check_rollout(rewards, values)
    bootstrap = _check_next_value(next_value, rewards, num_envs)
    _check_flags("terminations", terminations, rewards)
    _check_flags("truncations", truncations, rewards)
    _check_series("final_values", final_values, rewards)
    after_window = torch.cat([values[1:], bootstrap.unsqueeze(0)])
    cut = (truncations != 0) & (terminations == 0)  # a step both terminated and truncated is terminated
    next_values = torch.where(cut, final_values, after_window)
    return rlscan.gae(
        rewards, values, next_values=next_values, terminated=terminations, truncated=truncations,
        gamma=check_unit_float("gamma", gamma), lmbda=check_unit_float("gae_lambda", gae_lambda), exact=exact,
    )


# ----------------------------------------------------------------------------- mapping


def _terminated_after_each_step(dones, next_done, rewards) -> Optional[torch.Tensor]:
    """``terminated[t] = dones[t+1]``, and ``next_done`` for the last step."""
    if (dones is None) != (next_done is None):
        given, missing = ("dones", "next_done") if next_done is None else ("next_done", "dones")
        raise ValueError(
            f"{missing} is None but {given} is not: pass both (episodes reset) or neither "
            "(a stream that never resets, like RND's intrinsic rewards)"
        )
    if dones is None:
        return None
    _check_flags("dones", dones, rewards)
    num_envs = rewards.shape[1]
    _check_tensor("next_done", next_done, rewards)
    _check_dtype("next_done", next_done, _FLAGS, "a bool, uint8 or floating tensor of 0/1 flags")
    if next_done.shape != (num_envs,):
        raise ValueError(f"next_done must have shape (num_envs,) = ({num_envs},), got {tuple(next_done.shape)}")
    return torch.cat([dones[1:], next_done.unsqueeze(0)])


# ----------------------------------------------------------------------------- checks


def _check_rollout(rewards, values) -> int:
    """``num_envs``, after checking ``rewards`` and ``values``."""
    if not isinstance(rewards, torch.Tensor):
        raise TypeError(f"rewards must be a torch.Tensor, got {kind(rewards)}")
    check_dense("rewards", rewards)
    _check_dtype("rewards", rewards, _FLOATS, "a floating tensor")
    if rewards.ndim != 2 or rewards.shape[0] == 0:
        raise ValueError(
            f"rewards must have shape (num_steps, num_envs) with num_steps >= 1, got {tuple(rewards.shape)}"
        )
    _check_series("values", values, rewards)
    return rewards.shape[1]


def _check_series(name: str, x, rewards) -> None:
    _check_tensor(name, x, rewards)
    _check_dtype(name, x, _FLOATS, "a floating tensor")
    _check_same_shape(name, x, rewards)


def _check_flags(name: str, x, rewards) -> None:
    _check_tensor(name, x, rewards)
    _check_dtype(name, x, _FLAGS, "a bool, uint8 or floating tensor of 0/1 flags")
    _check_same_shape(name, x, rewards)


def _check_next_value(next_value, rewards, num_envs: int) -> torch.Tensor:
    """``next_value`` as one value per environment, ``(num_envs,)``."""
    _check_tensor("next_value", next_value, rewards)
    _check_dtype("next_value", next_value, _FLOATS, "a floating tensor")
    if next_value.shape not in ((1, num_envs), (num_envs,)):
        hint = " (reshape it with .reshape(1, -1), as CleanRL does)" if next_value.shape == (num_envs, 1) else ""
        raise ValueError(
            f"next_value must have shape (1, num_envs) = (1, {num_envs}) or (num_envs,), "
            f"got {tuple(next_value.shape)}{hint}"
        )
    return next_value.reshape(num_envs)


def _check_tensor(name: str, x, rewards) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {kind(x)}")
    check_dense(name, x)
    if x.device != rewards.device:
        raise ValueError(f"{name} is on {x.device} but rewards is on {rewards.device}: all tensors must be on one device")


def _check_dtype(name: str, x: torch.Tensor, allowed: tuple, what: str) -> None:
    if x.dtype not in allowed:
        raise TypeError(f"{name} must be {what}, got {x.dtype}")


def _check_same_shape(name: str, x: torch.Tensor, rewards: torch.Tensor) -> None:
    if x.shape != rewards.shape:
        raise ValueError(
            f"{name} must have the shape of rewards, (num_steps, num_envs) = {tuple(rewards.shape)}, "
            f"got {tuple(x.shape)}"
        )
