"""TorchRL value estimators computed by rlscan.

Drop-in subclasses of TorchRL's own estimators (``torchrl.objectives.value``): same
constructor arguments, same tensordict keys, same outputs; only the recurrence over
time is rlscan's (a fused Triton scan on the GPU, a compiled loop on the CPU)::

    from rlscan.adapters import torchrl as rlscan_torchrl

    loss.make_value_estimator(rlscan_torchrl.GAE(gamma=0.99, lmbda=0.95, value_network=critic))

    rlscan_torchrl.patch()   # or: every loss that builds GAE / TD(λ) / TD(1) / V-trace gets rlscan's

``patch()``, ``unpatch()`` and ``is_patched()`` change TorchRL's estimator registry (the
framework shape of :mod:`rlscan.adapters`).

=====================  =========================  ============================
this module            TorchRL class              rlscan op
=====================  =========================  ============================
``GAE``                ``GAE``                    :func:`rlscan.gae`
``TDLambdaEstimator``  ``TDLambdaEstimator``      :func:`rlscan.td_lambda`
``TD1Estimator``       ``TD1Estimator``           :func:`rlscan.discounted_returns`
``VTrace``             ``VTrace``                 :func:`rlscan.vtrace`
=====================  =========================  ============================

TorchRL's rollouts are ``[*B, T, *F]`` with time at the tensordict's time dimension,
and TorchRL always has the next state's value, ``("next", "state_value")``; rlscan gets
``next_values=`` and ``time_dim=`` and never needs a shifted copy. See
docs/adapters/torchrl.md.
"""
from __future__ import annotations

from tensordict.nn import dispatch
from torchrl.objectives import value as _torchrl_value
from torchrl.objectives.utils import ValueEstimators
from torchrl.objectives.value.advantages import _self_set_grad_enabled, _self_set_skip_existing

import rlscan

from ._torchrl_inputs import (
    buffer_on,
    discount,
    episode_ends,
    log_ratios,
    require_batch_dims,
    scalar_threshold,
    standardise_advantages,
    standardise_rewards,
    state_values,
)
from ._torchrl_precision import gae_lmbda, td_lambda_next_values
from . import _torchrl_registry

__all__ = ["GAE", "TDLambdaEstimator", "TD1Estimator", "VTrace", "patch", "unpatch", "is_patched"]


class GAE(_torchrl_value.GAE):
    r"""TorchRL's :class:`~torchrl.objectives.value.GAE`, computed by :func:`rlscan.gae`::

        δ_t = r_t + γ_t (1 − terminated_t) V'_t − V_t
        Â_t = δ_t + γ_t λ (1 − done_t) Â_{t+1}          (Â_T = 0)
        value_target_t = Â_t + V_t

    with ``V'_t = ("next", value)[t]`` and ``γ_t = gamma ** steps_to_next_obs[t]`` when that
    key is present. Takes TorchRL's arguments; ``vectorized`` is accepted and has no
    effect (rlscan's result matches TorchRL's loop, which ``vectorized=False`` selects).
    """

    @_self_set_skip_existing
    @_self_set_grad_enabled
    @dispatch
    def forward(self, tensordict, *, params=None, target_params=None, time_dim=None):
        advantage, value_target = self._estimate(
            tensordict, params, target_params, time_dim, auto_reset=self.auto_reset_env
        )
        valid = tensordict.get("shifted_valid", default=None)
        if self.average_gae:
            advantage = self._normalize_advantage(advantage, valid, groups=self._group_ids(tensordict))
        tensordict.set(self.tensor_keys.advantage, advantage)
        tensordict.set(self.tensor_keys.value_target, value_target)
        self._mask_shifted_output(tensordict, valid)
        return tensordict

    def value_estimate(self, tensordict, params=None, target_params=None, time_dim=None, **kwargs):
        if self.is_stateless and params is None:
            raise RuntimeError("Expected params to be passed to advantage module but got none.")
        return self._estimate(tensordict, params, target_params, time_dim, auto_reset=False).returns

    def _estimate(self, tensordict, params, target_params, time_dim, *, auto_reset: bool) -> rlscan.GAEOutput:
        require_batch_dims(tensordict)
        gamma = discount(self, tensordict)
        value, next_value = state_values(self, tensordict, params, target_params)
        time_dim = self._get_time_dim(time_dim, tensordict)
        reward, terminated, done = episode_ends(self, tensordict, time_dim)
        reward, done, terminated = self._prepare_signals(reward, done, terminated, value)
        if auto_reset:
            # The env reset in place: the next value is the new episode's, so a truncation
            # bootstraps from V(s_t) instead, added to the reward, and no step bootstraps.
            truncated = self._broadcast_optional(tensordict.get(("next", "truncated")), value)
            reward = reward + gamma * value * truncated
            terminated = done
        return rlscan.gae(
            reward,
            value,
            next_values=next_value,
            terminated=terminated,
            truncated=done,
            gamma=gamma,
            lmbda=gae_lmbda(buffer_on(self, "lmbda", reward.device), gamma, reward),
            time_dim=time_dim,
        )


class TDLambdaEstimator(_torchrl_value.TDLambdaEstimator):
    r"""TorchRL's :class:`~torchrl.objectives.value.TDLambdaEstimator`, computed by
    :func:`rlscan.td_lambda`::

        G_t = r_t + γ_t (1 − terminated_t) [(1 − λ κ_t) V'_t + λ κ_t G_{t+1}]

    with ``κ_t = 0`` where done and at the last step. TorchRL's ``forward`` is kept; this
    class replaces :meth:`value_estimate`. ``vectorized`` has no effect.
    """

    def value_estimate(self, tensordict, target_params=None, next_value=None, time_dim=None, **kwargs):
        gamma = discount(self, tensordict)
        if self.average_rewards:
            standardise_rewards(self, tensordict, eps=1e-4)
        if next_value is None:
            next_value = self._next_value(tensordict, target_params, kwargs=kwargs)
        time_dim = self._get_time_dim(time_dim, tensordict)
        reward, terminated, done = episode_ends(self, tensordict, time_dim)
        lmbda = buffer_on(self, "lmbda", reward.device)
        return rlscan.td_lambda(
            reward,
            None,  # V_t is not read: every V'_t comes from next_values
            next_values=td_lambda_next_values(next_value, lmbda, done, time_dim),
            terminated=terminated,
            truncated=done,
            gamma=gamma,
            lmbda=lmbda,
            time_dim=time_dim,
        )


class TD1Estimator(_torchrl_value.TD1Estimator):
    r"""TorchRL's :class:`~torchrl.objectives.value.TD1Estimator`, computed by
    :func:`rlscan.discounted_returns`::

        G_t = r_t + γ_t (1 − terminated_t) [(1 − κ_t) V'_t + κ_t G_{t+1}]

    TorchRL's ``forward`` is kept; this class replaces :meth:`value_estimate`.
    """

    def value_estimate(self, tensordict, target_params=None, next_value=None, time_dim=None, **kwargs):
        gamma = discount(self, tensordict)
        if self.average_rewards:
            standardise_rewards(self, tensordict, eps=1e-5)
        if next_value is None:
            next_value = self._next_value(tensordict, target_params, kwargs=kwargs)
        time_dim = self._get_time_dim(time_dim, tensordict)
        reward, terminated, done = episode_ends(self, tensordict, time_dim)
        return rlscan.discounted_returns(
            reward,
            next_values=next_value,
            terminated=terminated,
            truncated=done,
            gamma=gamma,
            time_dim=time_dim,
        )


class VTrace(_torchrl_value.VTrace):
    r"""TorchRL's :class:`~torchrl.objectives.value.VTrace`, computed by :func:`rlscan.vtrace`
    with ``ρ̄ = c̄ᵖᵍ = rho_thresh``, ``c̄ = c_thresh`` and ``λ = 1``::

        ρ_t = π(a_t|s_t) / μ(a_t|s_t)
        vs_t = V_t + min(ρ̄, ρ_t) δ_t + γ_t min(c̄, ρ_t) (1 − done_t) (vs_{t+1} − V_{t+1})
        advantage_t = min(ρ̄, ρ_t) (r_t + γ_t (1 − terminated_t) v̂_t − V_t)

    where ``v̂_t = vs_{t+1}``, or ``("next", value)[t]`` where done and at the last step
    (TorchRL 0.14's semantics at a truncation). ``value_target`` is ``vs``.

    ``rho_thresh`` and ``c_thresh`` must be scalars. They are read as floats when the
    module is built and when a state dict is loaded into it; an in-place change of the
    buffers is not seen.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._read_thresholds()
        self.register_load_state_dict_post_hook(_reread_thresholds)

    @property
    def in_keys(self):
        # TorchRL's keys, listed without its ``super().in_keys``, which Dynamo (torch 2.13)
        # cannot trace; dispatch reads in_keys on every call.
        keys = self.tensor_keys
        net_keys = getattr(self.value_network, "in_keys", None)
        in_keys = []
        if net_keys is not None:
            signals = [("next", keys.reward), ("next", keys.done), ("next", keys.terminated)]
            in_keys = list(net_keys) + signals + [("next", key) for key in net_keys]
        if self.group_key is not None and self.group_key not in in_keys:
            in_keys.append(self.group_key)
        return in_keys + [keys.sample_log_prob]

    def _read_thresholds(self) -> None:
        self._rho_clip = scalar_threshold("rho_thresh", self.rho_thresh)
        self._c_clip = scalar_threshold("c_thresh", self.c_thresh)

    @_self_set_skip_existing
    @_self_set_grad_enabled
    @dispatch
    def forward(self, tensordict, *, params=None, target_params=None, time_dim=None):
        require_batch_dims(tensordict)
        gamma = discount(self, tensordict)
        value, next_value = state_values(self, tensordict, params, target_params, always_hold_out=True)
        log_rhos = log_ratios(self, tensordict, value)
        time_dim = self._get_time_dim(time_dim, tensordict)
        reward, terminated, done = episode_ends(self, tensordict, time_dim)
        vs, advantage = rlscan.vtrace(
            reward,
            value,
            log_rhos,
            next_values=next_value,
            terminated=terminated,
            truncated=done,
            gamma=gamma,
            lmbda=1.0,
            rho_clip=self._rho_clip,
            c_clip=self._c_clip,
            pg_rho_clip=self._rho_clip,
            time_dim=time_dim,
        )
        if self.average_adv:
            advantage = standardise_advantages(self, tensordict, advantage, eps=1e-5)
        tensordict.set(self.tensor_keys.advantage, advantage)
        tensordict.set(self.tensor_keys.value_target, vs)
        self._mask_shifted_output(tensordict, tensordict.get("shifted_valid", default=None))
        return tensordict


def _reread_thresholds(module: VTrace, incompatible_keys) -> None:
    module._read_thresholds()


# the registry keys that patch() gives rlscan's estimators
_DROP_INS = {
    ValueEstimators.GAE: GAE,
    ValueEstimators.TDLambda: TDLambdaEstimator,
    ValueEstimators.TD1: TD1Estimator,
    ValueEstimators.VTrace: VTrace,
}


def patch() -> None:
    """Register rlscan's ``GAE``, ``TDLambdaEstimator``, ``TD1Estimator`` and ``VTrace`` for
    their :class:`~torchrl.objectives.utils.ValueEstimators` keys, keeping TorchRL's default
    hyperparameters. Every loss that builds one of these estimators afterwards gets
    rlscan's. Calling it twice is harmless; :func:`unpatch` undoes it."""
    _torchrl_registry.register(_DROP_INS)


def unpatch() -> None:
    """Restore the estimators that :func:`patch` replaced (a key registered again by
    someone else since then is left alone)."""
    _torchrl_registry.restore(_DROP_INS)


def is_patched() -> bool:
    """Whether the registry hands out rlscan's estimators now, for all four keys."""
    return _torchrl_registry.registered(_DROP_INS)
