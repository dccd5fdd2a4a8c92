"""AReaL: rlscan's scan for its PPO actor's GAE loop, and its advantage normalisation.

One line, in every process that runs AReaL's actor (each trainer rank), turns them on::

    import rlscan.adapters.areal; rlscan.adapters.areal.patch()

:func:`patch` replaces ``PPOActor._compute_advantages`` (``areal.trainer.ppo.actor``) with
:func:`compute_advantages`, and ``Normalization.__call__`` (``areal.utils.data``, the
``adv_norm`` and ``reward_norm`` of GRPO, Dr.GRPO, RLOO and PPO) with :func:`normalize`;
:func:`unpatch` puts AReaL's back. They follow AReaL ``SUPPORTED_AREAL``; :func:`patch`
refuses other releases.

AReaL's GAE runs over every position of the padded ``[B, S]`` sequence (prompt included) with
the loss mask ``m`` (rolled one position left, as AReaL rolls it) inside the recursion, from
the last position, whose advantage is 0::

    V'_{S−1} = V_{S−1} · no_eos,   A'_{S−1} = 0                 (no_eos: the sequence fills S)
    t = S−2 … 0:  δ_t = r_t + γ V' − V_t,   A_t = m_t (δ_t + γλ A') + (1 − m_t) A'
                  V' ← m_t V_t + (1 − m_t) V',   A' ← A_t
    returns = A + V

This is ``rlscan.gae(r, V, mask=m, bootstrap_value=V'_{S−1})`` with ``m_{S−1} = 0``, bit
for bit. The normalisation is :func:`rlscan.masked_normalize` (its docstring has the
equations), with AReaL's convention for a mask that keeps nothing (``x`` is returned as it
is) and its process group for the batch level (``reduce_group``, else every rank once
``torch.distributed`` is initialised): one all-reduce of three scalars, where AReaL makes four.

See docs/adapters/areal.md.
"""
from __future__ import annotations

import importlib

import torch

import rlscan

from . import _common

__all__ = ["compute_gae", "normalize", "compute_advantages", "patch", "unpatch", "is_patched", "SUPPORTED_AREAL"]

#: The AReaL releases whose code this follows (pip's specifier). Its actor changes between
#: patch releases: others are refused until checked.
SUPPORTED_AREAL = "==1.0.4"
_RANGE = ((1, 0, 4), (1, 0, 5))
_ACTOR, _DATA = "areal.trainer.ppo.actor", "areal.utils.data"
_exact = False  # patch(exact=...): the mode of the GAE AReaL's actor calls


# ----------------------------------------------------------------------------- GAE


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, loss_mask: torch.Tensor, seq_no_eos_mask: torch.Tensor,
                discount, gae_lambda, *, exact: bool | None = None):
    """AReaL's GAE over ``[B, S]`` (the module docstring's equations): ``(advantages, returns)``
    in the promoted dtype of ``rewards``, ``values`` and ``loss_mask``.

    Args:
        rewards, values: floating tensors ``[B, S]``.
        loss_mask: 0/1 (floating, bool or integer) ``[B, S]``, already rolled as AReaL rolls it.
        seq_no_eos_mask: bool ``[B]``: the sequence fills all ``S`` positions (no EOS), so the
            value at ``S − 1`` bootstraps it.
        discount, gae_lambda: floats in [0, 1].
        exact: on the GPU, run the recurrence one step at a time in AReaL's order, bit for bit
            (the CPU path always does); default: as :func:`patch` set it (False: the scan's
            order, within float32's rounding of AReaL's).
    """
    for name, x in (("rewards", rewards), ("values", values), ("loss_mask", loss_mask)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor [B, S], got {type(x).__name__}")
        if x.dim() != 2:
            raise ValueError(f"{name} must be 2-d [B, S], got shape {tuple(x.shape)}")
    if not isinstance(seq_no_eos_mask, torch.Tensor) or seq_no_eos_mask.shape != rewards.shape[:1]:
        raise ValueError(f"seq_no_eos_mask must be a tensor [B] = {tuple(rewards.shape[:1])}, got "
                         f"{getattr(seq_no_eos_mask, 'shape', type(seq_no_eos_mask).__name__)}")
    gamma, lmbda = _common.coef("discount", discount), _common.coef("gae_lambda", gae_lambda)
    B, S = rewards.shape
    dtype = torch.promote_types(torch.promote_types(rewards.dtype, values.dtype), loss_mask.dtype)
    if S == 0:
        return torch.empty((B, 0), dtype=dtype, device=rewards.device), torch.empty((B, 0), dtype=dtype,
                                                                                   device=rewards.device)
    with torch.no_grad():
        last = values[:, S - 1] * seq_no_eos_mask  # AReaL's product (its sign of zero included)
        # the last position is not a step of AReaL's loop: where its mask is 0 (the rolled mask of
        # the first token, a prompt's), the scan passes the bootstrap and an advantage of 0
        # through it, as AReaL does, and runs over the tensors as they are
        if bool(loss_mask[:, S - 1].any()):
            loss_mask = loss_mask.clone()
            loss_mask[:, S - 1] = 0
        advantages, returns = rlscan.gae(rewards, values, mask=loss_mask, bootstrap_value=last, gamma=gamma,
                                         lmbda=lmbda, time_dim=-1, exact=_exact if exact is None else exact,
                                         out_dtype=dtype)
    return advantages, returns


# ----------------------------------------------------------------------------- normalisation


def normalize(x: torch.Tensor, loss_mask=None, *, mean_level="batch", mean_leave1out: bool = False,
              std_level="batch", std_unbiased: bool = True, eps: float = 1e-5, group_size: int = 1,
              reduce_group=None) -> torch.Tensor:
    """AReaL's ``Normalization(NormConfig(...))(x, loss_mask, reduce_group=...)``, float32:
    :func:`rlscan.masked_normalize` with AReaL's names, ``x`` itself (as float32) where
    ``loss_mask`` keeps nothing, and the batch level over ``reduce_group`` (by default every
    rank, once ``torch.distributed`` is initialised).

    A ``"group"`` level needs ``group_size`` to divide ``x``'s rows (AReaL leaves the last
    rows with a mean of 0 and a std of 0 instead). The statistics are float64 whatever AReaL's
    ``high_precision``.
    """
    levels = (mean_level, std_level)
    group = reduce_group
    if group is None and "batch" in levels and torch.distributed.is_available() \
            and torch.distributed.is_initialized():
        group = torch.distributed.group.WORLD
    out = rlscan.masked_normalize(x, loss_mask, mean=mean_level, std=std_level,
                                  group_size=group_size if "group" in levels else None,
                                  leave_one_out=mean_leave1out, unbiased=std_unbiased, eps=eps, group=group)
    return out.float()


def _normalization_call(self, x, loss_mask=None, high_precision=True, reduce_group=None):
    """``Normalization.__call__`` while patched (``high_precision`` is always on)."""
    return normalize(x, loss_mask, mean_level=self.mean_level, mean_leave1out=self.mean_leave1out,
                     std_level=self.std_level, std_unbiased=self.std_unbiased, eps=self.eps,
                     group_size=self.group_size, reduce_group=reduce_group)


# ----------------------------------------------------------------------------- the actor's method


def compute_advantages(self, data: dict) -> dict:
    """``PPOActor._compute_advantages`` while patched: AReaL's steps, in its order and with
    its own helpers (the overlong penalty, the KL estimator, the reward and advantage
    normalisations), around :func:`compute_gae` in place of its loop. ``self`` is the
    ``PPOActor``; ``data`` is updated and returned as AReaL's method does."""
    actor = importlib.import_module(_ACTOR)
    config = self.config
    if config.overlong_reward_penalty:
        if config.overlong_tokens is None or config.overlong_penalty_factor is None:
            raise ValueError("overlong_reward_penalty needs overlong_tokens and overlong_penalty_factor")
        data = actor.reward_overlong_penalty(data, overlong_tokens=config.overlong_tokens,
                                             overlong_penalty_factor=config.overlong_penalty_factor,
                                             max_response_length=config.max_new_tokens)
    bs = data["input_ids"].shape[0]
    rows = torch.arange(bs, device=data["input_ids"].device, dtype=torch.long)

    score = torch.clip((data["rewards"] + self.reward_bias) * self.reward_scaling, max=self.reward_clip,
                       min=-self.reward_clip)
    if self.reward_norm:
        score = self.reward_norm(score)

    # the loss mask and the log-probabilities shifted one token left: position t scores token t + 1
    loss_mask = torch.roll(data["loss_mask"].float(), shifts=-1, dims=-1)
    if not config.use_decoupled_loss and config.recompute_logprob:
        if data["prox_logp"] is None:
            raise ValueError("prox_logp is None but recompute_logprob=True: compute_logp() was skipped")
        old_logp = data["logprobs"] = data["prox_logp"]
    else:
        old_logp = torch.roll(data["logprobs"], shifts=-1, dims=-1)
        if not config.use_decoupled_loss:
            data["prox_logp"] = old_logp
    ref_logp = data.get("ref_logp")
    if ref_logp is None:
        ref_logp = torch.zeros_like(old_logp)
    ref_logp *= loss_mask  # in place, as AReaL (the caller's tensors change too)
    old_logp *= loss_mask

    # the KL penalty on every token, 0 after EOS, and the score on the last response token
    attn_mask = data["attention_mask"]
    seqlens = attn_mask.sum(-1).long()
    seq_no_eos_mask = seqlens == attn_mask.shape[1]
    rewards = -self.kl_ctl * self.kl_estimator(old_logp, ref_logp)
    kl_rewards = rewards.clone()
    rewards[rows, seqlens - 1] = 0
    last = torch.clip(seqlens - 2, min=0)
    if self.mask_no_eos_with_zero:
        rewards[rows, last] += torch.where(seq_no_eos_mask, 0, score)
    else:
        rewards[rows, last] += score

    values = data["values"] if "values" in data else torch.zeros_like(rewards)
    advantages, data["returns"] = compute_gae(rewards, values, loss_mask, seq_no_eos_mask, self.discount,
                                              self.gae_lambda)
    if self.adv_norm is not None:
        advantages = self.adv_norm(advantages, loss_mask)

    data["advantages"] = advantages
    data["kl_rewards"] = kl_rewards
    data["tot_rewards"] = rewards
    data["loss_mask"] = loss_mask
    data["logprobs"] = old_logp
    return data


# ----------------------------------------------------------------------------- patching

_patches = _common.Patches()  # the places patch() wrote: (module, class, attribute)
_OURS = {(_ACTOR, "PPOActor", "_compute_advantages"): compute_advantages,
         (_DATA, "Normalization", "__call__"): _normalization_call}


def _class(module: str, name: str):
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as error:
        raise ImportError(f"rlscan.adapters.areal.patch() needs AReaL ({module}): {error}") from error


def check_release(version: str | None) -> None:
    """Refuse an AReaL release outside :data:`SUPPORTED_AREAL`, naming both."""
    _common.check_release("areal", "AReaL", version, *_RANGE, SUPPORTED_AREAL)


def patch(*, exact: bool = False) -> None:
    """Make ``PPOActor._compute_advantages`` and ``Normalization.__call__`` rlscan's.

    Args:
        exact: on the GPU, the GAE runs one step at a time in AReaL's order (the CPU path
            always does). Calling ``patch`` again changes only this mode.

    Raises:
        ImportError: AReaL is not importable, or its release is outside :data:`SUPPORTED_AREAL`.
    """
    global _exact
    if not isinstance(exact, bool):
        raise TypeError(f"exact must be a bool, got {type(exact).__name__}")
    check_release(_common.installed_version("areal"))
    for key in _OURS:
        _class(*key[:2])
    _exact = exact
    _patches.apply(_OURS.items(), _get, _put)


def unpatch() -> None:
    """Put AReaL's own functions back, where rlscan's are still in place (one that someone
    else has set since is left as theirs)."""
    global _exact
    _exact = False
    _patches.restore(_get, _put)


def is_patched() -> bool:
    """Whether AReaL's actor and normalisation run rlscan's code now."""
    return _patches.in_effect(_get)


def _get(place):
    module, name, attribute = place
    return vars(_class(module, name)).get(attribute)


def _put(place, value) -> None:
    module, name, attribute = place
    setattr(_class(module, name), attribute, value)
