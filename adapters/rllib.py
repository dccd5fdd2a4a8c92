"""Ray RLlib: rlscan's GAE in PPO's learner connector, rlscan's V-trace in IMPALA's and APPO's learners.

One line turns it on for every PPO, IMPALA and APPO algorithm built afterwards, with
local or remote learners::

    from rlscan.adapters import rllib as rlscan_rllib
    rlscan_rllib.patch(exact=True)
    algo = PPOConfig().environment("CartPole-v1").build_algo()

``patch()`` maps the learner class every ``AlgorithmConfig`` hands out (PPO's, IMPALA's
and APPO's torch learners, and subclasses of them) to a subclass made by
:func:`learner_class`. The subclass travels to remote learner actors like any learner
class, so each learner, in its own process and on its own device, then

- swaps RLlib's ``GeneralAdvantageEstimation`` piece at the end of its learner connector
  pipeline for :class:`RLScanGAE`, which computes the advantages and value targets of the
  whole batch of episodes in one :func:`rlscan.gae` call on the learner's device, and
- computes V-trace inside ``compute_loss_for_module`` with :func:`vtrace_torch`
  (:func:`rlscan.vtrace`) instead of RLlib's loop over time.

``patch()``, ``unpatch()`` and ``is_patched()`` take the framework shape of
:mod:`rlscan.adapters`. ``unpatch()`` hands out RLlib's own learner classes again;
algorithms already built keep what they were built with. That is why the V-trace
dispatch an rlscan learner installs in IMPALA's and APPO's learner modules when it is
built stays there: it is the built learners', and every other learner reaches RLlib's
own function through it. See docs/adapters/rllib.md.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Dict, List

import numpy as np
import torch

import rlscan
from rlscan._call import Call

from ._common import check_bool, check_clip, check_unit_float

try:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.algorithms.impala.torch import impala_torch_learner as _impala_module
    from ray.rllib.algorithms.impala.torch import vtrace_torch_v2 as _vtrace_module
    from ray.rllib.algorithms.impala.torch.impala_torch_learner import IMPALATorchLearner
    from ray.rllib.algorithms.ppo.ppo_learner import PPOLearner
    from ray.rllib.connectors.learner.general_advantage_estimation import GeneralAdvantageEstimation
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner
    from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
    from ray.rllib.evaluation.postprocessing import Postprocessing
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("rlscan.adapters.rllib needs Ray RLlib: pip install 'rlscan[rllib]'") from error

__all__ = ["RLScanGAE", "vtrace_torch", "learner_class", "patch", "unpatch", "is_patched"]


# ----------------------------------------------------------------------------- GAE


class RLScanGAE(GeneralAdvantageEstimation):
    """RLlib's GAE learner connector piece, computed by :func:`rlscan.gae` on the learner's device.

    A drop-in for ``GeneralAdvantageEstimation``: it runs each module's value function on
    the batch as RLlib does, and writes the same ``advantages`` (standardised over the
    batch) and ``value_targets`` columns, as float32 tensors on the value function's
    device. The batch holds every episode one after another, each already lengthened by
    one artificial step (``AddOneTsToEpisodesAndTruncate``) whose value is the bootstrap;
    RLlib runs one recurrence over the ``L`` steps of the whole batch::

        ν_t = 1 − terminated_t
        κ_t = (1 − terminated_t)(1 − truncated_t)          (κ_{L−1} = 0)
        δ_t = r_t + γ ν_t V_{t+1} − V_t                    (V_L = 0)
        Â_t = δ_t + γ λ κ_t Â_{t+1}
        value_targets = float32(Â) + V,   advantages = standardise(value_targets − V)

    ``terminated``/``truncated`` are set at an episode's last real step (a truncated
    episode or a chunk cut by the rollout bootstraps from the artificial step's value, a
    terminated one does not); the artificial step carries neither flag, exactly as in
    RLlib, so its own (masked-out) advantage reads into the next episode and takes part
    in the standardisation. rlscan computes the same recurrence in one call, with the
    episodes side by side (see ``_advantages``).

    The recurrence runs in float64, as RLlib's numpy loop does (its ``1.0 − terminateds``
    promotes the loop to float64), and is rounded to float32 once. With ``exact=True``
    the scan runs one step at a time in RLlib's order and the standardisation is numpy's
    on the host: the outputs are RLlib's bit for bit. With ``exact=False`` everything stays
    on the device; the standardisation's mean and standard deviation are then summed in
    another order than numpy's pairwise float32 sums (differences of about 1e-7).

    Args:
        gamma, lambda_: as for ``GeneralAdvantageEstimation``.
        exact: reproduce RLlib's connector bit for bit (see above).
    """

    def __init__(self, input_observation_space=None, input_action_space=None, *, gamma, lambda_, exact=False):
        super().__init__(input_observation_space, input_action_space, gamma=check_unit_float("gamma", gamma),
                         lambda_=check_unit_float("lambda_", lambda_))
        self.exact = check_bool("exact", exact)

    def get_ctor_args_and_kwargs(self):
        # RLlib rebuilds pipeline pieces from these when it restores a checkpoint.
        return (), {
            "input_observation_space": self.input_observation_space,
            "input_action_space": self.input_action_space,
            "gamma": self.gamma, "lambda_": self.lambda_, "exact": self.exact,
        }

    def __call__(self, *, rl_module, episodes: List[Any], batch: Dict[str, Any], **kwargs):
        sa_episodes = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        with torch.no_grad():
            vf_preds = rl_module.foreach_module(
                func=lambda mid, module: (
                    module.compute_values(batch[mid]) if mid in batch and isinstance(module, ValueFunctionAPI) else None
                ),
                return_dict=True,
            )
        for module_id, values in vf_preds.items():
            if values is None:
                continue
            module = rl_module[module_id]
            lengths = [len(e) for e in sa_episodes if e.module_id in (None, module_id)]
            module_batch = batch[module_id]
            advantages, value_targets = _module_gae(
                values.detach(), module_batch[Columns.REWARDS], module_batch[Columns.TERMINATEDS],
                module_batch[Columns.TRUNCATEDS], lengths, self.gamma, self.lambda_, self.exact,
                max_seq_len=module.model_config["max_seq_len"] if module.is_stateful() else None,
            )
            module_batch[Postprocessing.ADVANTAGES] = advantages
            module_batch[Postprocessing.VALUE_TARGETS] = value_targets
        return batch


def _as_tensor(x, device) -> torch.Tensor:
    return x.to(device) if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x), device=device)


def _unpad_index(lengths: List[int], row_len: int, device) -> torch.Tensor:
    """Where each episode's steps lie in a ``[rows, row_len]`` zero-padded batch, flattened.

    Each episode starts a new row and fills ``ceil(length / row_len)`` rows (RLlib's
    ``split_and_zero_pad_n_episodes``)."""
    rows = np.cumsum([0] + [-(-n // row_len) for n in lengths[:-1]])
    index = np.concatenate([r * row_len + np.arange(n) for r, n in zip(rows, lengths)] or [np.zeros(0, np.int64)])
    return torch.as_tensor(index, dtype=torch.long, device=device)


def _module_gae(values, rewards, terminateds, truncateds, lengths, gamma, lambda_, exact, max_seq_len=None):
    """One module's ``(advantages, value_targets)``; see :class:`RLScanGAE`."""
    device = values.device
    total = sum(lengths)
    padded_shape = values.shape if values.dim() == 2 else None
    if values.dim() not in (1, 2) or (padded_shape is not None and max_seq_len is None):
        raise ValueError(
            f"the value function's output must be [steps], or [rows, max_seq_len] for a stateful module; "
            f"got shape {tuple(values.shape)}"
        )
    index = None if padded_shape is None else _unpad_index(lengths, padded_shape[1], device)

    def flat(x):
        x = _as_tensor(x, device)
        return x.reshape(-1) if index is None else x.reshape(-1).index_select(0, index)

    v = flat(values)
    if v.numel() != total:
        raise ValueError(f"the batch holds {v.numel()} value predictions but its episodes {total} steps")
    # V and V' as two views of one float64 buffer: V'_t = V_{t+1}, and 0 after the batch's last step.
    buffer = torch.zeros(total + 1, dtype=torch.float64, device=device)
    buffer[:total] = v
    advantages64 = _advantages(
        flat(rewards).to(torch.float64), buffer, flat(terminateds).bool(), flat(truncateds).bool(),
        lengths, float(gamma), float(lambda_), exact,
    )
    value_targets = (advantages64.to(torch.float32) + v).to(torch.float32)
    advantages = value_targets - v
    if exact:  # numpy's pairwise float32 mean and std, as RLlib computes them
        host = advantages.cpu().numpy()
        host = (host - host.mean()) / max(1e-4, host.std())
        advantages = torch.from_numpy(host).to(device)
    else:
        advantages = (advantages - advantages.mean()) / advantages.std(correction=0).clamp_min(1e-4)
    if padded_shape is not None:
        advantages, value_targets = (_repad(x, index, padded_shape) for x in (advantages, value_targets))
    return advantages, value_targets


def _advantages(rewards, buffer, terminated, truncated, lengths, gamma, lmbda, exact) -> torch.Tensor:
    """``Â`` over the flat batch (float64), from one :func:`rlscan.gae` call.

    RLlib's recursion is cut at each episode's last real step (terminated or truncated),
    so the flat batch falls into independent stretches there: the first episode's real
    steps, then each bootstrap step with the next episode's real steps, and the last
    bootstrap step alone. They are laid out as the rows of one zero-padded ``[rows, width]``
    batch, whose scan is as wide as the number of episodes and as long as the longest one
    (instead of one sequence as long as the batch). A row's zero padding enters its last
    real step only as ``γλ · 0 · 0``, where RLlib adds ``γλ · 0 · Â`` of the next step: the
    same sum for finite values, but for the sign of a zero ``δ``. Batches whose episodes do
    not all end in a flag run as one sequence.
    """
    total = rewards.numel()
    values, next_values = buffer[:total], buffer[1:]
    device = rewards.device
    ends = torch.as_tensor(np.cumsum(lengths) - 2, device=device)  # each episode's last real step
    flagged = terminated.index_select(0, ends) | truncated.index_select(0, ends)
    if len(lengths) < 2 or min(lengths) < 2 or not bool(flagged.all()):
        return rlscan.gae(rewards, values, next_values=next_values, terminated=terminated, truncated=truncated,
                          gamma=gamma, lmbda=lmbda, exact=exact).advantages
    stretches = np.array([lengths[0] - 1] + list(lengths[1:]) + [1])
    index, inside, place = (torch.as_tensor(a, device=device) for a in _layout(stretches, total))
    rows, width = inside.shape

    def laid_out(x, fill):
        return torch.where(inside, x.index_select(0, index).view(rows, width), fill)

    advantages = rlscan.gae(
        laid_out(rewards, 0.0), laid_out(values, 0.0), next_values=laid_out(next_values, 0.0),
        terminated=laid_out(terminated, False), truncated=laid_out(truncated, False),
        gamma=gamma, lmbda=lmbda, time_dim=1, exact=exact,
    ).advantages
    return advantages.reshape(-1).index_select(0, place)


def _layout(stretches: np.ndarray, total: int):
    """Host index arithmetic for stretches of these lengths laid out as ``[rows, width]`` rows:
    the flat step each place reads (padding reads any, then is zeroed), which places are
    inside a stretch, and the place of each flat step."""
    width = int(stretches.max())
    starts = np.cumsum(stretches) - stretches
    steps = np.arange(width)
    index = np.minimum(starts[:, None] + steps, total - 1).reshape(-1)
    inside = steps < stretches[:, None]
    row_of_step = np.repeat(np.arange(len(stretches)), stretches)
    place = row_of_step * width + np.arange(total) - starts[row_of_step]
    return index, inside, place


def _repad(x: torch.Tensor, index: torch.Tensor, shape) -> torch.Tensor:
    out = torch.zeros(shape[0] * shape[1], dtype=x.dtype, device=x.device)
    out.index_copy_(0, index, x)
    return out.view(shape)


# ----------------------------------------------------------------------------- V-trace


def vtrace_torch(
    *,
    target_action_log_probs,
    behaviour_action_log_probs,
    discounts,
    rewards,
    values,
    bootstrap_values,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    exact=False,
):
    """RLlib's ``vtrace_torch`` (IMPALA, APPO), computed by :func:`rlscan.vtrace` in one scan.

    With ``[T, B]`` time-major inputs, ``ρ_t = exp(target_logp_t − behaviour_logp_t)`` and
    the per-step ``discounts`` ``d_t`` (``γ`` times RLlib's terminal and loss masks)::

        δ_t     = min(ρ̄, ρ_t) (r_t + d_t V_{t+1} − V_t)            (V_T = bootstrap_values)
        (v−V)_t = δ_t + d_t min(1, ρ_t) (v−V)_{t+1}                ((v−V)_T = 0)
        vs_t    = V_t + (v−V)_t
        pg_t    = min(ρ̄ᵖᵍ, ρ_t) (r_t + d_t vs_{t+1} − V_t)          (vs_T = bootstrap_values)

    Returns ``(vs, pg_advantages)``, detached, like RLlib's. The scan adds in another
    order than RLlib's loop, and ``pg`` is formed as ``ρ̄ᵖᵍ (r + d V_{t+1} − V) + ρ̄ᵖᵍ d (v−V)_{t+1}``:
    equal to RLlib's to float32 rounding. numpy arrays in give numpy arrays out, as
    :func:`rlscan.vtrace` does; a threshold is a float, a one-element tensor or ``None`` (no clip).
    """
    # checked under RLlib's names, before rlscan.vtrace sees them under its own
    call = Call("rewards", _detached(rewards), 0)
    values = call.series("values", _detached(values), required=True)
    target = call.series("target_action_log_probs", _detached(target_action_log_probs), required=True)
    behaviour = call.series("behaviour_action_log_probs", _detached(behaviour_action_log_probs), required=True)
    if bootstrap_values is None:
        raise TypeError("bootstrap_values is required: one value per environment, got None")
    bootstrap = call.batch("bootstrap_values", _detached(bootstrap_values))
    discounts = call.coef("discounts", _detached(discounts))
    out = rlscan.vtrace(
        rewards if call.numpy_io else call.anchor, values, target - behaviour, bootstrap_value=bootstrap,
        gamma=discounts.value if discounts.tensor is None else discounts.tensor, lmbda=1.0,
        rho_clip=_threshold("clip_rho_threshold", clip_rho_threshold), c_clip=1.0,
        pg_rho_clip=_threshold("clip_pg_rho_threshold", clip_pg_rho_threshold), exact=check_bool("exact", exact),
    )
    return out.vs, out.pg_advantages


def _detached(x):
    """A tensor without its graph; anything else as it is, for the checks to name."""
    return x.detach() if isinstance(x, torch.Tensor) else x


def _threshold(name: str, value) -> float:
    """One of RLlib's ρ clips: a float, a one-element tensor, or ``None`` for no clip."""
    if value is None:
        return float("inf")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a float or a one-element tensor, got a tensor of shape "
                             f"{tuple(value.shape)}")
        value = value.item()
    return check_clip(name, value)


_STOCK_VTRACE = _vtrace_module.vtrace_torch
_active = threading.local()  # the exact flag of the rlscan learner computing its loss in this thread


def _vtrace_for_learners(**kwargs):
    """What RLlib's IMPALA/APPO learner modules call: rlscan's V-trace inside an rlscan learner's loss, else RLlib's."""
    exact = getattr(_active, "exact", None)
    if exact is None:
        return _STOCK_VTRACE(**kwargs)
    return vtrace_torch(**kwargs, exact=exact)


def _install_vtrace_dispatch() -> None:
    """Point IMPALA's and APPO's torch learner modules at :func:`_vtrace_for_learners`.

    Only learners of :func:`learner_class` turn rlscan on (for their own loss, in their own
    thread), so every other learner in the process still runs RLlib's function."""
    from ray.rllib.algorithms.appo.torch import appo_torch_learner

    for module in (_impala_module, appo_torch_learner):
        if module.vtrace_torch is _STOCK_VTRACE:
            module.vtrace_torch = _vtrace_for_learners
        elif module.vtrace_torch is not _vtrace_for_learners:
            raise RuntimeError(
                f"{module.__name__}.vtrace_torch has been replaced by {module.vtrace_torch!r}; "
                "rlscan will not override another patch"
            )


@contextlib.contextmanager
def _rlscan_vtrace(exact: bool):
    previous = getattr(_active, "exact", None)
    _active.exact = exact
    try:
        yield
    finally:
        _active.exact = previous


# ----------------------------------------------------------------------------- learners


def _supported(base) -> bool:
    return isinstance(base, type) and issubclass(base, TorchLearner) and issubclass(base, (PPOLearner, IMPALATorchLearner))


def _swap_gae(pipeline, exact: bool) -> None:
    """Replace RLlib's GAE piece(s) in a learner connector pipeline by :class:`RLScanGAE`."""
    if pipeline is None:
        return
    for i, piece in enumerate(pipeline.connectors):
        if type(piece) is GeneralAdvantageEstimation:
            pipeline.connectors[i] = RLScanGAE(
                piece.input_observation_space, piece.input_action_space,
                gamma=piece.gamma, lambda_=piece.lambda_, exact=exact,
            )


_LEARNER_CLASSES: dict = {}


def learner_class(base: type, *, exact: bool = False) -> type:
    """The subclass of the torch learner class ``base`` (PPO's, IMPALA's, APPO's or a
    subclass of them) whose GAE connector and V-trace run in rlscan.

    Use it where you name a learner class yourself:
    ``config.learners(learner_class=learner_class(MyPPOLearner, exact=True))``. Made once
    per ``(base, exact)``; an rlscan learner class given as ``base`` is re-based on its
    RLlib class.
    """
    exact = check_bool("exact", exact)
    base = getattr(base, "_rlscan_base", base)
    if not _supported(base):
        raise TypeError(
            f"base must be a torch learner class of PPO, IMPALA or APPO (a subclass of PPOLearner or "
            f"IMPALATorchLearner and of TorchLearner), got {base!r}"
        )
    key = (base, exact)
    if key not in _LEARNER_CLASSES:

        class RLScanLearner(base):
            _rlscan_base = base
            rlscan_exact = exact

            def build(self) -> None:
                if issubclass(base, IMPALATorchLearner):
                    _install_vtrace_dispatch()
                super().build()
                _swap_gae(self._learner_connector, self.rlscan_exact)

            def compute_loss_for_module(self, **kwargs):
                with _rlscan_vtrace(self.rlscan_exact):
                    return super().compute_loss_for_module(**kwargs)

        name = f"RLScan{base.__name__}" + ("Exact" if exact else "")
        RLScanLearner.__name__ = name
        RLScanLearner.__qualname__ = f"learner_class.<locals>.{name}"  # pickled by value for remote learners
        RLScanLearner.__doc__ = f"{base.__qualname__} with rlscan's GAE connector and V-trace (exact={exact})."
        _LEARNER_CLASSES[key] = RLScanLearner
    return _LEARNER_CLASSES[key]


# ----------------------------------------------------------------------------- the switch

# The learner_class property that patch() replaced on AlgorithmConfig (RLlib's own unless
# someone else had replaced it before); rlscan's property reads the learner class from it.
_replaced = vars(AlgorithmConfig)["learner_class"]
_patched_exact = None  # patch(exact=...): the mode of the learner classes handed out; None when unpatched


def _patched_learner_class(config):
    cls = _replaced.__get__(config, type(config))
    if _patched_exact is None or not _supported(getattr(cls, "_rlscan_base", cls)):
        return cls
    if getattr(cls, "_rlscan_base", None) is not None:
        return cls  # the user chose an rlscan learner class (and its exact mode) already
    return learner_class(cls, exact=_patched_exact)


_PATCHED = property(_patched_learner_class, doc=_replaced.__doc__)


def patch(*, exact: bool = False) -> None:
    """Every PPO, IMPALA and APPO algorithm built from now on computes GAE and V-trace with rlscan.

    Replaces the ``learner_class`` property of ``AlgorithmConfig`` by one that hands out
    :func:`learner_class` of the class RLlib's property names.

    Args:
        exact: reproduce RLlib's GAE connector bit for bit (see :class:`RLScanGAE`) and run
            V-trace's scan one step at a time. Calling ``patch`` again changes the mode for
            algorithms built afterwards.
    """
    global _patched_exact, _replaced
    _patched_exact = check_bool("exact", exact)
    if not is_patched():
        _replaced = vars(AlgorithmConfig)["learner_class"]
        AlgorithmConfig.learner_class = _PATCHED


def unpatch() -> None:
    """Put back the ``learner_class`` property that :func:`patch` replaced (unless someone else
    has replaced rlscan's since): algorithms built from now on use RLlib's own learners; those
    already built keep theirs."""
    global _patched_exact
    _patched_exact = None
    if is_patched():
        AlgorithmConfig.learner_class = _replaced


def is_patched() -> bool:
    """Whether ``AlgorithmConfig`` hands out rlscan's learner classes now."""
    return vars(AlgorithmConfig).get("learner_class") is _PATCHED
