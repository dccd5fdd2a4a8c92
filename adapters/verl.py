"""verl: rlscan's masked GAE and REINFORCE++ returns as verl's advantage estimators.

One line, before the trainer runs, turns it on::

    import rlscan.adapters.verl; rlscan.adapters.verl.patch()

:func:`patch` puts :func:`compute_gae_advantage_return` and
:func:`compute_reinforce_plus_plus_outcome_advantage` in verl's estimator registry
(``verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY``) under ``"gae"`` and
``"reinforce_plus_plus"``, and in ``core_algos`` under their own names (older trainers
call the module's functions directly); :func:`unpatch` puts verl's back. The functions
take verl's arguments and return verl's results; they can also be called directly.

verl's loops, token by token over ``[batch, response_length]`` tensors (``m`` is the
response mask, 0 after EOS and over observation tokens of multi-turn rollouts):

* GAE: where ``m_t = 1``, ``δ_t = r_t + γ V' − V_t`` and ``A_t = δ_t + γλ A'``, with
  ``V'`` and ``A'`` carried from the next step whose mask is 1 (0 past the end); where
  ``m_t = 0``, ``A_t = A'`` and ``V'`` is not replaced. ``returns = A + V`` everywhere;
  the advantages are whitened over the kept tokens (:func:`rlscan.masked_whiten`).
  This is ``rlscan.gae(..., mask=response_mask, whiten=True)``: on the GPU one scan
  over the inputs that also gathers the whitening's sums, then one pass that whitens.
* REINFORCE++: ``G_t = r_t + γ m_{t+1} G_{t+1}`` (the running return is reset after
  EOS), the returns unwhitened, ``advantages = masked_whiten(G) · m``. On the GPU this
  is one scan that also gathers the whitening's sums, then one pass that whitens
  (``rlscan.ops.discounted_returns.cut_after_skips``); elsewhere it is
  ``rlscan.discounted_returns`` with the trace cut where the next token is masked.

See docs/adapters/verl.md.
"""
from __future__ import annotations

import importlib
import numbers

import torch

import rlscan
from rlscan._call import Call
from rlscan._inputs import type_name
from rlscan.ops import _skip
from rlscan.ops.discounted_returns import cut_after_skips

__all__ = ["compute_gae_advantage_return", "compute_reinforce_plus_plus_outcome_advantage", "patch", "unpatch"]


def compute_gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor,
                                 response_mask: torch.Tensor, gamma, lam):
    """verl's ``compute_gae_advantage_return``: ``(advantages, returns)``, each of the
    rewards' shape ``(bs, response_length)``; the advantages whitened over the mask.

    Args:
        token_level_rewards, values: floating tensors ``(bs, response_length)``.
        response_mask: 0/1 (bool, integer or floating) of the same shape.
        gamma, lam: floats in [0, 1], or 0-d tensors.
    """
    _check_tokens(token_level_rewards, response_mask, values=values)
    gamma, lam = _coef("gamma", gamma), _coef("lam", lam)
    with torch.no_grad():
        return tuple(rlscan.gae(token_level_rewards, values, mask=response_mask, whiten=True, gamma=gamma, lmbda=lam,
                                time_dim=-1))


def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  config=None, **kwargs):
    """verl's ``compute_reinforce_plus_plus_outcome_advantage``: ``(advantages, returns)``;
    ``γ`` is ``config.gamma``. Other keyword arguments are accepted and ignored, as verl does."""
    if config is None:
        raise ValueError("compute_reinforce_plus_plus_outcome_advantage needs config (its gamma is the discount)")
    _check_tokens(token_level_rewards, response_mask)
    gamma = _coef("config.gamma", config["gamma"] if isinstance(config, dict) else config.gamma)
    with torch.no_grad():
        fused = cut_after_skips.returns_and_advantages(token_level_rewards, response_mask, gamma)
        if fused is not None:
            advantages, returns = fused
        else:
            # the running return is multiplied by m_t after step t: the trace into step t-1 is cut where m_t = 0
            cut = torch.empty(response_mask.shape, dtype=torch.bool, device=response_mask.device)
            torch.eq(response_mask[..., 1:], 0, out=cut[..., :-1])
            cut[..., -1] = False
            returns = rlscan.discounted_returns(token_level_rewards, terminated=cut, gamma=gamma, time_dim=-1)
            advantages = rlscan.masked_whiten(returns, response_mask, zero_skipped=True)
    return advantages.to(torch.result_type(returns, response_mask)), returns  # verl's product promotes


def _check_tokens(rewards, mask, values=None) -> None:
    """The arguments checked under verl's names, before rlscan checks them under its own."""
    for name, x in (("token_level_rewards", rewards), ("values", values), ("response_mask", mask)):
        if (x is not None or name != "values") and not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type_name(x)}")
    call = Call("token_level_rewards", rewards, -1)
    call.series("values", values)
    _skip.check_mask(call, "verl", mask, None, None, argument="response_mask")


def _coef(name: str, value) -> float:
    """A float in [0, 1] from a float or a one-element (0-d) tensor."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a float or a 0-d tensor, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float or a 0-d tensor, got {type_name(value)}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value}")
    return value


_ESTIMATORS = {
    "GAE": ("gae", "compute_gae_advantage_return", compute_gae_advantage_return),
    "REINFORCE_PLUS_PLUS": ("reinforce_plus_plus", "compute_reinforce_plus_plus_outcome_advantage",
                            compute_reinforce_plus_plus_outcome_advantage),
}
_saved: dict = {}


def _core_algos():
    try:
        return importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError as error:
        raise ImportError("rlscan.adapters.verl.patch() needs verl (verl.trainer.ppo.core_algos)") from error


def _registry_name(core_algos, member: str, default: str) -> str:
    enum = getattr(core_algos, "AdvantageEstimator", None)
    return getattr(getattr(enum, member, None), "value", default)


def patch() -> None:
    """Make verl's "gae" and "reinforce_plus_plus" estimators rlscan's (idempotent)."""
    core_algos = _core_algos()
    if _saved:
        return
    registry = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", None)
    for member, (default, attr, fn) in _ESTIMATORS.items():
        name = _registry_name(core_algos, member, default)
        _saved[("attr", attr)] = getattr(core_algos, attr, None)
        setattr(core_algos, attr, fn)
        if registry is not None:
            # register_adv_est refuses to replace an entry, so the registry is written directly
            _saved[("registry", name)] = registry.get(name)
            registry[name] = fn


def unpatch() -> None:
    """Put verl's own estimators back."""
    if not _saved:
        return
    core_algos = _core_algos()
    registry = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", None)
    for (kind, key), original in list(_saved.items()):
        if kind == "attr":
            if original is None:
                delattr(core_algos, key)
            else:
                setattr(core_algos, key, original)
        elif registry is not None:
            if original is None:
                registry.pop(key, None)
            else:
                registry[key] = original
    _saved.clear()
