"""Reading a TorchRL rollout for rlscan: the tensors an estimator needs, taken from a
tensordict exactly as TorchRL 0.14's own estimators take them.

A TorchRL rollout of shape ``[*B, T]`` stores, per step ``t``:

* ``("next", reward)[t]``: ``r_t``;
* ``("next", done)[t]``: the episode ended at step ``t`` (terminated or truncated);
* ``("next", terminated)[t]``: it ended by termination (no bootstrap);
* ``value[t]`` and ``("next", value)[t]``: ``V(s_t)`` and ``V'_t``, the value of the
  observation that followed step ``t`` (the final observation where done).

rlscan names the same ends ``terminated`` and ``truncated``. A step flagged in both
counts as terminated (docs/semantics.md), so TorchRL's ``done`` is passed as rlscan's
``truncated`` with no ``done & ~terminated`` mask: rlscan then cuts the trace at every
done step and bootstraps from ``V'_t`` at the done steps that did not terminate.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import NamedTuple

import torch
from tensordict import is_tensor_collection
from torchrl.objectives.utils import _maybe_get_or_select, hold_out_net
from torchrl.objectives.value.advantages import _call_actor_net, _standardize_by_group


class EpisodeEnds(NamedTuple):
    """The rollout's step signals, laid out as TorchRL stores them (``[*B, T, *F]``)."""

    reward: torch.Tensor
    terminated: torch.Tensor  # rlscan's terminated: no bootstrap, trace cut
    truncated: torch.Tensor  # TorchRL's done: trace cut, bootstrap from V'_t unless terminated


def require_batch_dims(tensordict) -> None:
    if tensordict.batch_dims < 1:
        raise RuntimeError(
            "Expected the input tensordict to have at least one dimension (time), got "
            f"tensordict.batch_size = {tensordict.batch_size}"
        )


def buffer_on(estimator, name: str, device: torch.device) -> torch.Tensor:
    """A hyperparameter buffer (``gamma``, ``lmbda``) on ``device``; moved once, as TorchRL does."""
    buffer = getattr(estimator, name)
    if buffer.device != device:
        buffer = buffer.to(device)
        setattr(estimator, name, buffer)
    return buffer


def discount(estimator, tensordict) -> torch.Tensor:
    """``γ_t``: the ``gamma`` buffer, or ``gamma ** steps_to_next_obs[t]`` where a step spans
    several environment steps (multi-step returns). A tensor: rlscan broadcasts it."""
    reward = tensordict.get(("next", estimator.tensor_keys.reward))
    gamma = buffer_on(estimator, "gamma", reward.device)
    steps = tensordict.get(estimator.tensor_keys.steps_to_next_obs, None)
    if steps is not None:
        gamma = gamma ** steps.view_as(reward)
    return gamma


def state_values(estimator, tensordict, params, target_params, *, always_hold_out: bool = False):
    """``(V_t, V'_t)``: the value network on the root and ``"next"`` entries (``V'_t``
    detached), or, without a network, the values already in the tensordict.

    With ``shifted=True`` the network runs once over ``T + shifted_budget`` slots and the
    mask of the slots kept is written to ``"shifted_valid"``, as TorchRL does.
    """
    keys = estimator.tensor_keys
    if estimator.value_network is None:
        value = tensordict.get(keys.value, default=None)
        next_value = tensordict.get(("next", keys.value), default=None)
        for key, found in ((keys.value, value), (("next", keys.value), next_value)):
            if found is None:
                raise ValueError(f"The tensor with key {key} is missing, and no value network was provided.")
        return value, next_value
    if params is not None:
        params = params.detach()
        if target_params is None:
            target_params = params.clone(False)
    hold = always_hold_out or (params is None and target_params is None)
    with hold_out_net(estimator.value_network) if hold else nullcontext():
        value, next_value, valid = estimator._call_value_nets(
            data=tensordict,
            params=params,
            next_params=target_params,
            single_call=estimator.shifted,
            value_key=keys.value,
            detach_next=True,
            vmap_randomness=estimator.vmap_randomness,
        )
    if valid is not None:
        tensordict.set("shifted_valid", valid)
    return value, next_value


def episode_ends(estimator, tensordict, time_dim: int) -> EpisodeEnds:
    """Reward and end flags; with ``shifted=True`` the last slot kept is marked done and
    not terminated, so the estimate bootstraps from its next value there."""
    keys = estimator.tensor_keys
    valid = tensordict.get("shifted_valid", default=None)
    data = estimator._prepare_shifted_tensordict(tensordict, valid, time_dim)
    done = data.get(("next", keys.done))
    terminated = data.get(("next", keys.terminated), default=done)
    return EpisodeEnds(data.get(("next", keys.reward)), terminated, done)


def standardise_rewards(estimator, tensordict, eps: float) -> None:
    """``average_rewards=True``: rewards to zero mean and unit deviation (within groups
    when ``group_key`` is set), written back to the tensordict as TorchRL does."""
    key = ("next", estimator.tensor_keys.reward)
    reward = tensordict.get(key)
    groups = estimator._group_ids(tensordict)
    if groups is None:
        reward = (reward - reward.mean()) / reward.std().clamp_min(eps)
    else:
        reward = _standardize_by_group(reward, groups, eps=eps)
    tensordict.set(key, reward)


def standardise_advantages(estimator, tensordict, advantage: torch.Tensor, eps: float) -> torch.Tensor:
    groups = estimator._group_ids(tensordict)
    if groups is None:
        return (advantage - advantage.mean()) / advantage.std().clamp_min(eps)
    return _standardize_by_group(advantage, groups, eps=eps)


def log_ratios(estimator, tensordict, like: torch.Tensor) -> torch.Tensor:
    """``log π(a_t|s_t) − log μ(a_t|s_t)``: the actor's log-probability now (held out of the
    graph) minus the one stored at collection, in ``like``'s shape."""
    stored = _maybe_get_or_select(tensordict, estimator.tensor_keys.sample_log_prob)
    if is_tensor_collection(stored):
        stored = stored.sum(dim="feature", reduce=True)
    with hold_out_net(estimator.actor_network):
        current = _call_actor_net(
            actor_net=estimator.actor_network,
            data=tensordict,
            params=None,
            log_prob_key=estimator.tensor_keys.sample_log_prob,
        )
    return current.view_as(like) - stored.view_as(like)


def scalar_threshold(name: str, value) -> float:
    """A clip threshold as the float rlscan takes; read once, at construction."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"{name} must be a scalar for rlscan's V-trace, got a tensor of shape {tuple(value.shape)}"
            )
        return float(value.detach().cpu())
    return float(value)
