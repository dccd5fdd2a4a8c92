"""verl: rlscan's advantage estimators in verl's registry.

One line, before the trainer computes advantages, turns them on::

    import rlscan.adapters.verl; rlscan.adapters.verl.patch()

:func:`patch` puts the functions below in verl's estimator registry
(``verl.trainer.ppo.core_algos.ADV_ESTIMATOR_REGISTRY``, which ``get_adv_estimator_fn``
reads) under verl's names, and in ``core_algos`` under verl's function names (verl's
trainer calls ``compute_gae_advantage_return`` and ``compute_grpo_outcome_advantage``
from the module); :func:`unpatch` puts verl's back. Each function takes verl's arguments
and returns verl's ``(advantages, returns)``, with verl's dtypes. They follow verl
releases ``SUPPORTED_VERL`` (:func:`patch` refuses others: REINFORCE++ differs before 0.9).

verl computes advantages on its driver process, from CPU tensors: there the estimators run
rlscan's CPU path; on a GPU, the Triton path (the group estimators: torch operations over
group ids, with no Python loop over the groups or the responses).

``patch()``, ``unpatch()`` and ``is_patched()`` change verl's registry and module functions
(the framework shape of :mod:`rlscan.adapters`).

``m`` is the response mask (1 on the response's tokens; 0 after EOS and over the observation
tokens of a multi-turn rollout). The token estimators, one recurrence per response:

* ``gae``: where ``m_t = 1``, ``δ_t = r_t + γ V' − V_t`` and ``A_t = δ_t + γλ A'``, with ``V'``
  and ``A'`` carried from the next step whose mask is 1 (0 past the end); where ``m_t = 0``,
  ``A_t = A'``. ``returns = A + V``; the advantages whitened over the kept tokens
  (:func:`rlscan.masked_whiten`). This is ``rlscan.gae(..., mask=m, whiten=True)``.
* ``reinforce_plus_plus``: ``G_t = m_t (r_t + γ G')``, ``G'`` the running return carried
  unchanged through the steps whose mask is 0; ``returns = G``,
  ``advantages = masked_whiten(G, m) · m`` (:func:`rlscan.reinforce_pp_returns`).

The outcome estimators, one score per response ``s_i = Σ_t r_{i,t}`` and its group ``g``
(``index``: the prompt's uid), ``n_g``, ``μ_g`` and the unbiased ``σ_g`` over the group's
scores; the advantage ``a_i`` is broadcast over the response, ``a_i · m_{i,t}``, and the
returns are the advantages (:mod:`rlscan.adapters._verl_groups` computes every group at once):

* ``grpo``: ``(s − μ_g) / (σ_g + ε)``, or ``s − μ_g`` without ``norm_adv_by_std_in_grpo``;
* ``grpo_passk``: ``(r_max − r_second) / (σ_g + ε)`` for one response at its group's
  maximum, 0 for the others (``config.get("norm_adv_by_std_in_grpo", True)`` decides the
  division; a group of one is an error);
* ``rloo``: ``s · n/(n − 1) − μ_g · n/(n − 1)``;
* ``opo``: ``s − Σ_g ℓ s / Σ_g ℓ``, ``ℓ = Σ_t m`` the response's length;
* ``gpg``: ``α (s − μ_g) / f_norm``, ``α = B / max(1, #{s ≠ 0})``;
* ``reinforce_plus_plus_baseline``: ``masked_whiten((s − μ_g) · m, m) · m`` (``returns``
  as well);
* ``gdpo``: ``masked_whiten(Σ_k w_k a_k · m, m) · m`` (``returns`` as well), ``a_k`` the
  ``grpo`` advantage of the ``k``-th reward (``config.gdpo_reward_keys`` of
  ``non_tensor_batch``, weights ``config.gdpo_reward_weights``; ``s`` alone without them).

In a group of one, ``μ_g = 0`` and ``σ_g = 1`` (``rloo`` and ``opo`` keep ``s``).

The optimal token baselines, ``optimal_token_baseline`` and ``tir_optimal_token_baseline``:
``G_t = Σ_{s ≥ t} r_s m_s``, ``W_t = Σ_{s ≤ t} (1 − 2 π_s + Σπ²_s) ρ_s² m_s`` and a
baseline per step and group, ``b_t = Σ_g G_t W_t m_t / (Σ_g W_t m_t + ε)``; the
advantages ``(G − b) · m``, the returns ``G``
(:mod:`rlscan.adapters._verl_token_baseline` states them in full).

See docs/adapters/verl.md.
"""
from __future__ import annotations

import functools
import importlib
import numbers
import re
from collections.abc import Mapping

import numpy as np
import torch

import rlscan
from rlscan._call import Call
from rlscan.ops import _skip

from . import _common, _verl_groups, _verl_token_baseline

__all__ = ["compute_gae_advantage_return", "compute_reinforce_plus_plus_outcome_advantage",
           "compute_grpo_outcome_advantage", "compute_grpo_passk_outcome_advantage",
           "compute_reinforce_plus_plus_baseline_outcome_advantage", "compute_rloo_outcome_advantage",
           "compute_opo_outcome_advantage", "compute_gpg_outcome_advantage", "compute_gdpo_outcome_advantage",
           "compute_optimal_token_baseline_advantage", "compute_multi_turn_optimal_token_baseline_advantage",
           "patch", "unpatch", "is_patched", "SUPPORTED_VERL"]

#: The verl releases whose estimators these are (pip's specifier). REINFORCE++ carried the
#: running return through masked steps from 0.9.0 on; 0.8 reset it after each.
SUPPORTED_VERL = ">=0.9.0,<0.10"
_RANGE = ((0, 9), (0, 10))

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_exact = False  # patch(exact=...): the mode of the functions verl calls


# ----------------------------------------------------------------------------- token estimators


def compute_gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor,
                                 response_mask: torch.Tensor, gamma, lam, *, exact: bool | None = None):
    """verl's ``compute_gae_advantage_return``: ``(advantages, returns)``, each of the
    rewards' shape ``(bs, response_length)``; the advantages whitened over the mask.

    Args:
        token_level_rewards, values: floating tensors ``(bs, response_length)``.
        response_mask: 0/1 (bool, integer or floating) of the same shape.
        gamma, lam: floats in [0, 1], or 0-d tensors.
        exact: on the GPU, run the recurrence one step at a time in verl's order (the CPU
            path always does); default: as :func:`patch` set it (False).
    """
    _check_tokens(token_level_rewards, response_mask, values=values, needs_values=True)
    gamma, lam = _common.coef("gamma", gamma), _common.coef("lam", lam)
    # verl's products promote: a float64 mask makes the carries, and the results, float64
    dtype = _promoted(token_level_rewards, values, response_mask)
    if dtype == torch.float64 and token_level_rewards.dtype != torch.float64:
        token_level_rewards = token_level_rewards.double()  # a rare input: the float64 compute from a copy
    with torch.no_grad(), _common.errors_as(mask="response_mask"):
        adv, ret = rlscan.gae(token_level_rewards, values, mask=response_mask, whiten=True, gamma=gamma, lmbda=lam,
                              time_dim=-1, exact=_mode(exact), out_dtype=dtype)
    return adv, ret


def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  config=None, *, exact: bool | None = None, **kwargs):
    """verl's ``compute_reinforce_plus_plus_outcome_advantage``: ``(advantages, returns)``;
    ``γ`` is ``config.gamma`` (``config["gamma"]``). Other keyword arguments are accepted and
    ignored, as verl does."""
    _check_release_if_installed()
    _check_tokens(token_level_rewards, response_mask)
    gamma = _common.coef("config.gamma", _config_value(config, "gamma", "compute_reinforce_plus_plus_outcome_advantage"))
    # verl's running return is the product with the mask: float64 with a float64 mask
    wide = response_mask.dtype == torch.float64
    with torch.no_grad(), _common.errors_as(mask="response_mask"):
        advantages, returns = rlscan.reinforce_pp_returns(
            token_level_rewards, response_mask, gamma=gamma, time_dim=-1, exact=_mode(exact),
            compute_dtype=torch.float64 if wide else None)
    return advantages.to(torch.result_type(returns, response_mask)), returns  # verl's product promotes


# ----------------------------------------------------------------------------- outcome estimators


def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                   epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True, config=None):
    """verl's ``compute_grpo_outcome_advantage``: ``(s − μ_g) / (σ_g + ε) · m``, twice."""
    scores, groups = _scores(token_level_rewards, response_mask, index)
    _common.check_bool("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo)
    with torch.no_grad():
        mean, std = _mean_and_std(groups, scores)
        scalars = scores - mean
        if norm_adv_by_std_in_grpo:
            scalars = scalars / (std + _eps(epsilon))
        return _broadcast(scalars, response_mask)


def compute_grpo_passk_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                         epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True, config=None,
                                         **kwargs):
    """verl's ``compute_grpo_passk_outcome_advantage``: in each group, one response at the
    largest score gets ``(r_max − r_second) / (σ_g + ε)``, the others 0. As in verl, the
    division follows ``config.get("norm_adv_by_std_in_grpo", True)``, not the argument."""
    if config is None:
        raise ValueError("compute_grpo_passk_outcome_advantage needs config (its norm_adv_by_std_in_grpo decides "
                         "the division by the group's std)")
    norm = config.get("norm_adv_by_std_in_grpo", True) if isinstance(config, Mapping) else getattr(
        config, "norm_adv_by_std_in_grpo", True)
    scores, groups = _scores(token_level_rewards, response_mask, index)
    with torch.no_grad():
        small = groups.count < 2
        if bool(small.any()):
            raise ValueError(f"compute_grpo_passk_outcome_advantage needs at least 2 responses in every group of "
                             f"index, got a group of {int(groups.count[small][0])}")
        best, r_max, r_second = _verl_groups.group_max_and_second(groups, scores)
        advantage = r_max - r_second
        if norm:
            _, var = _verl_groups.mean_and_var(groups, scores)
            std = torch.zeros(len(groups.count), dtype=torch.float64, device=scores.device).index_copy_(
                0, groups.ids, var).sqrt_().to(scores.dtype)
            advantage = advantage / (std + _eps(epsilon))
        advantages = torch.zeros_like(scores)
        advantages[best] = advantage
        return _broadcast(advantages, response_mask)


def compute_reinforce_plus_plus_baseline_outcome_advantage(token_level_rewards: torch.Tensor,
                                                           response_mask: torch.Tensor, index, epsilon: float = 1e-6,
                                                           config=None, **kwargs):
    """verl's ``compute_reinforce_plus_plus_baseline_outcome_advantage``:
    ``masked_whiten((s − μ_g) · m, m) · m``, twice. The whitening's statistics come from each
    response's count of kept tokens: the ``[B, T]`` product is never formed."""
    scores, groups = _scores(token_level_rewards, response_mask, index)
    with torch.no_grad():
        mean, _ = _mean_and_std(groups, scores, std=False)
        centred = scores - mean
        # the product's dtype, as verl tiles the scores over the tokens and multiplies by the mask
        x = centred.to(torch.result_type(centred, response_mask))
        whitened = _whitened_rows(x, response_mask, "compute_reinforce_plus_plus_baseline_outcome_advantage")
        return _broadcast(whitened, response_mask)


def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                   epsilon: float = 1e-6, config=None, **kwargs):
    """verl's ``compute_rloo_outcome_advantage``: ``s · n/(n − 1) − μ_g · n/(n − 1)`` (``s``
    in a group of one), twice."""
    scores, groups = _scores(token_level_rewards, response_mask, index)
    with torch.no_grad():
        mean, _ = _mean_and_std(groups, scores, std=False)
        n = groups.size.to(scores.dtype)
        left_out = scores * n / (n - 1) - mean * n / (n - 1)
        return _broadcast(torch.where(groups.size > 1, left_out, scores), response_mask)


def compute_opo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                  epsilon: float = 1e-6, config=None, **kwargs):
    """verl's ``compute_opo_outcome_advantage``: ``s − Σ_g ℓ s / Σ_g ℓ`` with ``ℓ`` each
    response's length (its count of kept tokens), twice."""
    scores, groups = _scores(token_level_rewards, response_mask, index)
    with torch.no_grad():
        length = response_mask.sum(dim=-1)
        weighted = _verl_groups.group_sums(groups, length * scores)[groups.ids]
        baseline = (weighted / _verl_groups.group_sums(groups, length)[groups.ids]).to(scores.dtype)
        baseline = torch.where(groups.size > 1, baseline, 0)
        return _broadcast(scores - baseline, response_mask)


def compute_gpg_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                  epsilon: float = 1e-6, f_norm: float = 1.0, alpha: float = 1.0, config=None,
                                  **kwargs):
    """verl's ``compute_gpg_outcome_advantage``: ``α (s − μ_g) / f_norm`` with
    ``α = B / max(1, #{s ≠ 0})`` (the ``alpha`` argument is replaced, as in verl), twice."""
    scores, groups = _scores(token_level_rewards, response_mask, index)
    if isinstance(f_norm, bool) or not isinstance(f_norm, (numbers.Real, torch.Tensor)):
        raise TypeError(f"f_norm must be a number, got {type(f_norm).__name__}")
    with torch.no_grad():
        mean, _ = _mean_and_std(groups, scores, std=False)
        alpha = len(scores) / torch.count_nonzero(scores).clamp(min=1)
        return _broadcast(alpha * (scores - mean) / f_norm, response_mask)


def compute_gdpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                   epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True, config=None,
                                   non_tensor_batch=None, batch=None, **kwargs):
    """verl's ``compute_gdpo_outcome_advantage``: ``masked_whiten(Σ_k w_k a_k · m, m) · m``,
    twice, with ``a_k`` GRPO's advantage of the ``k``-th reward (``(s_k − μ_g) / (σ_g + ε)``,
    or ``s_k − μ_g`` without ``norm_adv_by_std_in_grpo``; ``μ = 0``, ``σ = 1`` in a group of one).

    With ``config``, ``non_tensor_batch`` and ``batch`` all given (as verl's trainer passes
    them), the rewards are ``non_tensor_batch[key]`` for each key of
    ``config.gdpo_reward_keys`` (required), weighted by ``config.gdpo_reward_weights``
    (default 1 each); otherwise one reward, ``s = Σ_t r_t``, of weight 1. The groups are
    found once for every key, and the whitening's statistics come from each response's count
    of kept tokens: one value per response until the advantages are written over the mask."""
    fn = "compute_gdpo_outcome_advantage"
    _common.check_bool("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo)
    eps = _eps(epsilon)
    if config is not None and non_tensor_batch is not None and batch is not None:
        _check_outcome(token_level_rewards, response_mask)
        rewards, weights = _gdpo_rewards(token_level_rewards, response_mask, config, non_tensor_batch, batch)
        groups = _groups(index, len(token_level_rewards), token_level_rewards.device)
    else:
        scores, groups = _scores(token_level_rewards, response_mask, index)
        rewards, weights = [scores], [1.0]
    with torch.no_grad():
        total = None
        for scores, weight in zip(rewards, weights):
            mean, std = _mean_and_std(groups, scores, std=norm_adv_by_std_in_grpo)
            scalars = scores - mean
            if norm_adv_by_std_in_grpo:
                scalars = scalars / (std + eps)
            # verl's product with the mask sets the dtype, then its float32 weight multiplies
            scalars = scalars.to(torch.result_type(scalars, response_mask))
            term = torch.tensor(weight, dtype=torch.float32, device=scalars.device) * scalars
            total = term if total is None else total + term
        return _broadcast(_whitened_rows(total, response_mask, fn), response_mask)


def _gdpo_rewards(rewards, mask, config, non_tensor_batch, batch):
    """``([s_k], [w_k])``: GDPO's rewards, each response's ``non_tensor_batch[key]`` as float32
    (the sum of verl's row that holds it at the response's last token), and their weights."""
    fn = "compute_gdpo_outcome_advantage"
    keys = _config_get(config, "gdpo_reward_keys")
    if not keys:
        raise ValueError(f"{fn} needs config.gdpo_reward_keys (algorithm.gdpo_reward_keys): the keys of the reward "
                         f"components compute_score returns, e.g. ['format_reward', 'accuracy_reward']")
    if isinstance(keys, str):
        raise TypeError(f"{fn}: config.gdpo_reward_keys must be a list of keys, got the string {keys!r}")
    keys = list(keys)
    B, T = rewards.shape
    # verl writes each reward at column (the response's attention_mask count − 1): a column
    # that exists wherever the attention mask's response part is no wider than the rewards
    prompts, attention = batch["prompts"], batch["attention_mask"]
    response_part = attention[:, prompts.size(1):]
    if response_part.shape[0] != B:
        raise ValueError(f"{fn}: batch['attention_mask'] must have {B} rows (one per response), got "
                         f"{response_part.shape[0]}")
    if response_part.shape[1] > T and bool((response_part.sum(dim=1) > T).any()):
        raise ValueError(f"{fn}: a response's attention_mask counts more than the {T} tokens of "
                         f"token_level_rewards, so its reward has no last token to sit at")
    scores = []
    for key in keys:
        if key not in non_tensor_batch:
            raise ValueError(f"{fn}: GDPO reward key {key!r} is not in non_tensor_batch (its keys: "
                             f"{list(non_tensor_batch.keys())}); compute_score must return a dict holding it")
        score = torch.tensor(np.asarray(non_tensor_batch[key], dtype=np.float32), device=rewards.device)
        if score.shape != (B,):
            raise ValueError(f"{fn}: non_tensor_batch[{key!r}] must hold one reward per response ({B}), got shape "
                             f"{tuple(score.shape)}")
        scores.append(score + 0.0)  # a row's sum: -0.0 adds up to 0.0
    weights = _config_get(config, "gdpo_reward_weights")
    weights = [1.0] * len(keys) if weights is None else [float(w) for w in weights]
    if len(weights) < len(keys):
        raise ValueError(f"{fn}: config.gdpo_reward_weights must hold a weight for each of the {len(keys)} "
                         f"gdpo_reward_keys, got {len(weights)}")
    # verl makes the weights a float32 tensor: each weight rounded to float32
    return scores, [float(np.float32(w)) for w in weights[:len(keys)]]


def _config_get(config, key: str):
    """``config.get(key)`` as verl reads it (an ``AlgoConfig``, an OmegaConf or plain dict, or
    an object with the attribute); None where absent."""
    if isinstance(config, Mapping) or hasattr(config, "get"):
        return config.get(key, None)
    return getattr(config, key, None)


# ----------------------------------------------------------------------------- optimal token baselines


def compute_optimal_token_baseline_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                             old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor,
                                             rollout_is_weights: torch.Tensor | None = None,
                                             handle_zero_tail: bool = True, epsilon: float = 1e-8, **kwargs):
    """verl's ``compute_optimal_token_baseline_advantage``: ``((G − b) · m, G)``, the group's
    baseline ``b_t = Σ_g G_t W_t m_t / (Σ_g W_t m_t + ε)`` at each position ``t``
    (:mod:`rlscan.adapters._verl_token_baseline` states it in full). Other keyword
    arguments are accepted and ignored, as verl does."""
    return _token_baseline(token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared,
                           rollout_is_weights, handle_zero_tail, epsilon, multi_turn=False)


def compute_multi_turn_optimal_token_baseline_advantage(token_level_rewards: torch.Tensor,
                                                        response_mask: torch.Tensor, index,
                                                        old_log_probs: torch.Tensor, sum_pi_squared: torch.Tensor,
                                                        rollout_is_weights: torch.Tensor | None = None,
                                                        handle_zero_tail: bool = True, epsilon: float = 1e-8,
                                                        **kwargs):
    """verl's ``compute_multi_turn_optimal_token_baseline_advantage`` (``tir_optimal_token_baseline``):
    as :func:`compute_optimal_token_baseline_advantage`, with the group's responses aligned by
    the rank of their kept tokens instead of the position, and responses without a kept
    token left out of their group."""
    return _token_baseline(token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared,
                           rollout_is_weights, handle_zero_tail, epsilon, multi_turn=True)


def _token_baseline(rewards, mask, index, old_log_probs, sum_pi_squared, rollout_is_weights, handle_zero_tail,
                    epsilon, multi_turn: bool):
    _common.check_rows("token_level_rewards", rewards)
    _common.check_mask("response_mask", mask, rewards.shape, rewards.device)
    _common.check_rows("old_log_probs", old_log_probs, rewards.shape, rewards.device)
    _common.check_rows("sum_pi_squared", sum_pi_squared, rewards.shape, rewards.device)
    if rollout_is_weights is not None:
        _common.check_rows("rollout_is_weights", rollout_is_weights, rewards.shape, rewards.device)
    _common.check_bool("handle_zero_tail", handle_zero_tail)
    eps = _common.check_float("epsilon", epsilon)
    if index is None:
        raise ValueError("index (each response's group: the prompt's uid) is required by the optimal token baselines")
    ids, n_groups = _verl_groups.group_ids(index, len(rewards), rewards.device)
    with torch.no_grad():
        return _verl_token_baseline.token_baseline(rewards, mask, ids, n_groups, old_log_probs, sum_pi_squared,
                                                   rollout_is_weights, handle_zero_tail, eps, multi_turn)


# ----------------------------------------------------------------------------- shared steps


def _scores(rewards, mask, index):
    """``(s, groups)``: each response's score, summed as verl sums it, and the groups of ``index``."""
    _check_outcome(rewards, mask)
    scores = rewards.sum(dim=-1)
    return scores, _groups(index, len(scores), scores.device)


def _check_outcome(rewards, mask) -> None:
    # the mask's 0/1 values are checked where the advantages are written over it (_broadcast)
    _check_tokens(rewards, mask)
    if rewards.dim() != 2:
        raise ValueError(f"token_level_rewards must be (bs, response_length), got shape {tuple(rewards.shape)}")


def _groups(index, n: int, device):
    if index is None:
        raise ValueError("index (each response's group: the prompt's uid) is required by the outcome estimators")
    return _verl_groups.groups(index, n, device)


def _mean_and_std(groups, scores, std: bool = True):
    """Each response's group mean and unbiased std in the scores' dtype; 0 and 1 in a group of one."""
    mean, var = _verl_groups.mean_and_var(groups, scores)
    single = groups.size < 2
    mean = mean.masked_fill_(single, 0).to(scores.dtype)
    if not std:
        return mean, None
    return mean, var.sqrt_().masked_fill_(single, 1).to(scores.dtype)


def _whitened_rows(x: torch.Tensor, mask, fn: str) -> torch.Tensor:
    """``masked_whiten(x · m, m)`` of one value per response, ``x``: ``[B]``, as ``[B]`` values
    in ``x``'s dtype (each response's kept tokens all hold it). The statistics come from each
    response's count of kept tokens ``ℓ`` in float64: ``n = Σ ℓ``, ``μ = Σ ℓ x / n`` and
    ``σ² = Σ ℓ (x − μ)² / (n − 1)``; the ``[B, T]`` product is never formed."""
    kept = _kept_per_row(mask)
    n = kept.sum()
    if n < 2:
        raise ValueError(f"{fn} needs at least two tokens with response_mask = 1 for the whitening's variance, "
                         f"got {int(n)}")
    wide = x.to(torch.float64)
    mu = (kept * wide).sum() / n
    var = (kept * (wide - mu) ** 2).sum() / (n - 1)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    return ((x.to(compute) - mu.to(compute)) * torch.rsqrt(var + 1e-8).to(compute)).to(x.dtype)


def _kept_per_row(mask) -> torch.Tensor:
    """Each response's count of kept tokens (of a 0/1 mask), float64. Summed in the mask's
    own dtype and the ``[B]`` counts widened after: ``sum(dtype=torch.float64)`` would
    convert each of the ``[B, T]`` elements first."""
    return mask.sum(dim=-1).to(torch.float64)


def _broadcast(scalars: torch.Tensor, mask: torch.Tensor):
    """``a_i · m_{i,t}`` in the product's dtype, as both results (verl returns one tensor twice),
    the mask's 0/1 values checked as it is read (on the CPU)."""
    with _common.errors_as(mask="response_mask"):
        out = rlscan.masked_broadcast(scalars, mask)
    return out, out


def _eps(epsilon) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise TypeError(f"epsilon must be a float, got {type(epsilon).__name__}")
    return float(epsilon)


def _check_tokens(rewards, mask, values=None, needs_values: bool = False) -> None:
    """The arguments checked under verl's names, before rlscan checks them under its own, with
    rlscan's messages (docs/errors.md). The mask's 0/1 values are left to the scan, which checks
    them as it reads the mask (``_common.errors_as`` gives its error verl's name)."""
    for name, x in (("token_level_rewards", rewards), ("values", values), ("response_mask", mask)):
        if (x is not None or name != "values" or needs_values) and not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {_common.kind(x)}")
    call = Call("token_level_rewards", rewards, -1)
    call.series("values", values, required=needs_values)
    _skip.check_mask(call, "verl", mask, None, None, values=False, argument="response_mask")


def _promoted(*tensors) -> torch.dtype:
    out = tensors[0].dtype
    for t in tensors[1:]:
        out = torch.promote_types(out, t.dtype)
    return out


def _config_value(config, key: str, fn: str):
    """``config.<key>`` (an object, verl's ``AlgoConfig``, an OmegaConf or plain dict)."""
    if config is None:
        raise ValueError(f"{fn} needs config (its {key!r} is required)")
    if isinstance(config, Mapping):
        if key not in config:
            raise ValueError(f"{fn}: config has no {key!r} (verl's AlgoConfig has {key})")
        return config[key]
    if not hasattr(config, key):
        raise ValueError(f"{fn}: config has no attribute {key!r} (verl's AlgoConfig has {key})")
    return getattr(config, key)


def _mode(exact) -> bool:
    if exact is None:
        return _exact
    _common.check_bool("exact", exact)
    return exact


# ----------------------------------------------------------------------------- the release


def _parse(version: str):
    match = re.match(r"(\d+)\.(\d+)", version)
    return None if match is None else (int(match[1]), int(match[2]))


@functools.lru_cache(maxsize=None)
def _installed_verl():
    """The installed verl's version string, or None."""
    from importlib import metadata

    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None


def check_release(version) -> None:
    """Raise ``ImportError`` for a verl release outside :data:`SUPPORTED_VERL` (``None``: none installed)."""
    if version is None:
        return
    parsed = _parse(str(version))
    if parsed is None or not _RANGE[0] <= parsed < _RANGE[1]:
        raise ImportError(f"rlscan.adapters.verl follows verl {SUPPORTED_VERL}; verl {version} is installed "
                          "(its REINFORCE++ differs: before 0.9 the running return restarted after every masked "
                          "token). Install a verl in that range, or call rlscan's functions directly.")


def _check_release_if_installed() -> None:
    check_release(_installed_verl())


# ----------------------------------------------------------------------------- patch()


_ESTIMATORS = {
    # enum member: (registry name, core_algos function name, rlscan's function)
    "GAE": ("gae", "compute_gae_advantage_return", compute_gae_advantage_return),
    "REINFORCE_PLUS_PLUS": ("reinforce_plus_plus", "compute_reinforce_plus_plus_outcome_advantage",
                            compute_reinforce_plus_plus_outcome_advantage),
    "GRPO": ("grpo", "compute_grpo_outcome_advantage", compute_grpo_outcome_advantage),
    "GRPO_PASSK": ("grpo_passk", "compute_grpo_passk_outcome_advantage", compute_grpo_passk_outcome_advantage),
    "REINFORCE_PLUS_PLUS_BASELINE": ("reinforce_plus_plus_baseline",
                                     "compute_reinforce_plus_plus_baseline_outcome_advantage",
                                     compute_reinforce_plus_plus_baseline_outcome_advantage),
    "RLOO": ("rloo", "compute_rloo_outcome_advantage", compute_rloo_outcome_advantage),
    "OPO": ("opo", "compute_opo_outcome_advantage", compute_opo_outcome_advantage),
    "GPG": ("gpg", "compute_gpg_outcome_advantage", compute_gpg_outcome_advantage),
    "GDPO": ("gdpo", "compute_gdpo_outcome_advantage", compute_gdpo_outcome_advantage),
    "OPTIMAL_TOKEN_BASELINE": ("optimal_token_baseline", "compute_optimal_token_baseline_advantage",
                               compute_optimal_token_baseline_advantage),
    "TIR_OPTIMAL_TOKEN_BASELINE": ("tir_optimal_token_baseline",
                                   "compute_multi_turn_optimal_token_baseline_advantage",
                                   compute_multi_turn_optimal_token_baseline_advantage),
}
_ABSENT = object()  # an attribute or registry entry that was not there before patch()
# the places patch() wrote, (where, name): where is "attr" for core_algos' module functions and
# "registry" for ADV_ESTIMATOR_REGISTRY's entries
_patches = _common.Patches()


def _core_algos():
    try:
        return importlib.import_module("verl.trainer.ppo.core_algos")
    except ImportError as error:
        raise ImportError("rlscan.adapters.verl.patch() needs verl (verl.trainer.ppo.core_algos)") from error


def _release(core_algos) -> str | None:
    installed = _installed_verl()
    if installed is not None:
        return installed
    return getattr(importlib.import_module("verl"), "__version__", None)


def _registry_name(core_algos, member: str, default: str) -> str:
    enum = getattr(core_algos, "AdvantageEstimator", None)
    return getattr(getattr(enum, member, None), "value", default)


def _places(core_algos):
    """``((where, name), rlscan's function)`` for every place :func:`patch` writes."""
    for member, (default, attr, fn) in _ESTIMATORS.items():
        yield ("attr", attr), fn
        if getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", None) is not None:
            yield ("registry", _registry_name(core_algos, member, default)), fn


def _get(core_algos, place):
    where, name = place
    if where == "attr":
        return getattr(core_algos, name, _ABSENT)
    return core_algos.ADV_ESTIMATOR_REGISTRY.get(name, _ABSENT)


def _put(core_algos, place, value) -> None:
    where, name = place
    if where == "attr":
        if value is _ABSENT:
            delattr(core_algos, name)
        else:
            setattr(core_algos, name, value)
    elif value is _ABSENT:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(name, None)
    else:
        # register_adv_est refuses to replace an entry, so the registry is written directly
        core_algos.ADV_ESTIMATOR_REGISTRY[name] = value


def patch(*, exact: bool = False) -> None:
    """Make verl's estimators rlscan's: ``gae``, ``reinforce_plus_plus``, ``grpo``,
    ``grpo_passk``, ``reinforce_plus_plus_baseline``, ``rloo``, ``opo``, ``gpg``, ``gdpo``,
    ``optimal_token_baseline`` and ``tir_optimal_token_baseline``.

    Args:
        exact: on the GPU, the token estimators run one step at a time in verl's order (the
            CPU path always does). Calling ``patch`` again changes the mode.

    Raises:
        ImportError: verl is not importable, or its release is outside :data:`SUPPORTED_VERL`.
    """
    global _exact
    _common.check_bool("exact", exact)
    core_algos = _core_algos()
    check_release(_release(core_algos))
    _exact = exact
    _patches.apply(_places(core_algos), functools.partial(_get, core_algos), functools.partial(_put, core_algos))


def unpatch() -> None:
    """Put back verl's own estimators: each place :func:`patch` wrote gets what it held
    before, unless someone else has replaced rlscan's function there since."""
    global _exact
    _exact = False
    if _patches:
        core_algos = _core_algos()
        _patches.restore(functools.partial(_get, core_algos), functools.partial(_put, core_algos))


def is_patched() -> bool:
    """Whether verl hands out rlscan's estimators now, in its registry and in ``core_algos``."""
    return bool(_patches) and _patches.in_effect(functools.partial(_get, _core_algos()))
