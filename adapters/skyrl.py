"""SkyRL: rlscan's scans and whole-batch group statistics in SkyRL's advantage estimator registry.

In the process that computes the advantages (SkyRL's trainer), one line turns them on::

    import rlscan.adapters.skyrl; rlscan.adapters.skyrl.patch()

SkyRL looks its estimators up by name in ``AdvantageEstimatorRegistry`` (``ppo_utils`` of
``skyrl`` 0.4, ``skyrl.backends.skyrl_train.utils.ppo_utils``, and of ``skyrl-train`` 0.3,
``skyrl_train.utils.ppo_utils``): ``gae``, ``reinforce++``, ``grpo``, ``rloo`` and, from
0.4, ``maxrl``. :func:`patch` unregisters SkyRL's function under each name and registers
rlscan's (the registry refuses a name it holds), and puts rlscan's in ``ppo_utils`` under
SkyRL's function names (for code that imports them by name); :func:`unpatch` puts SkyRL's
back. Both follow the releases in :data:`SUPPORTED_SKYRL`, whichever are installed, and
refuse others.

SkyRL's registry is per process: a Ray process that imports ``ppo_utils`` registers SkyRL's
own functions, and takes a name from the registry's named Ray actor only where it has none.
So :func:`patch` must run in the process that computes the advantages: SkyRL's trainer, in
its ``skyrl_entrypoint`` Ray task (docs/adapters/skyrl.md shows where).

``m`` is ``response_mask`` (0/1). By default each function gives SkyRL's numbers:

* ``gae``: ``δ_t = r_t + γ V_{t+1} − V_t`` (``V_T = 0``), ``A_t = δ_t + γλ A_{t+1}`` at every
  token: the mask does not enter the recursion (``rlscan.gae`` with every token kept).
  ``returns = A + V``; ``advantages = masked_whiten(A, m)``, whitened over the kept tokens
  and applied at every token.
* ``reinforce++``: ``G_t = r_t + γ m_{t+1} G_{t+1}`` (``G_T = 0``): the return restarts
  before every masked token (``rlscan.reinforce_pp_returns(..., reset_at_skipped=True)``).
  ``returns = G``, ``advantages = masked_whiten(G, m) · m``.
* ``grpo``, ``rloo``, ``maxrl``: each response's score ``s = Σ_t r_t``; over its group
  ``g`` (the responses with its ``index`` label), ``n_g`` responses, mean ``μ_g`` and
  unbiased std ``σ_g``; the advantage ``a`` is broadcast, ``a · m``, and returned twice:

  - ``grpo``: ``(s − μ_g) / (σ_g + ε)``, or ``s − μ_g`` with ``grpo_norm_by_std=False``;
    a group of one: ``s / (1 + ε)`` (``s``);
  - ``rloo``: ``(s − μ_g) · n_g / (n_g − 1)``; a group of one: 0;
  - ``maxrl``: ``(s − μ_g) / (μ_g + ε)``; a group of one: ``s``.

  SkyRL loops over the responses and groups in Python; here every group's statistics come
  from a few whole-batch operations, with the arithmetic of SkyRL's (each group's mean as
  ``torch.mean`` sums its scores, the std's squares summed in float64 in order).

``skip_masked=True`` (``patch(skip_masked=True)``, or each token function's argument)
makes the masked tokens skipped steps of the token recursions, as verl 0.9 computes them:

* ``gae``: ``rlscan.gae(r, V, mask=m, whiten=True)``: where ``m_t = 0``, ``A_t = A_{t+1}``,
  and the value after a kept token is the next kept token's (0 past the last);
* ``reinforce++``: ``G_t = m_t (r_t + γ G')``, ``G'`` the next kept token's return, carried
  through masked spans, so a reward after an observation span reaches the turns before it
  (``rlscan.reinforce_pp_returns``); 0 where ``m_t = 0``.

SkyRL's trainer passes its ``response_mask``, 1 on every response token (observations of
a multi-turn rollout included) and 0 on padding; the loss mask is the one that is 0 over
observations. See docs/adapters/skyrl.md.
"""
from __future__ import annotations

import importlib

import numpy as np
import torch

import rlscan

from . import _common

__all__ = ["compute_gae_advantage_return", "compute_reinforce_plus_plus_outcome_advantage",
           "compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage", "compute_maxrl_advantage",
           "patch", "unpatch", "is_patched", "SUPPORTED_SKYRL"]

#: The SkyRL releases whose estimators these are: distribution -> pip's specifier.
SUPPORTED_SKYRL = {"skyrl": ">=0.4.0,<0.5", "skyrl-train": ">=0.3.0,<0.4"}
#: distribution -> ((lowest, first unsupported) (major, minor), the module of its estimators)
_RELEASES = {"skyrl": (((0, 4), (0, 5)), "skyrl.backends.skyrl_train.utils.ppo_utils"),
             "skyrl-train": (((0, 3), (0, 4)), "skyrl_train.utils.ppo_utils")}

_skip_masked = False  # patch(skip_masked=...): the mode of the functions SkyRL calls


# ----------------------------------------------------------------------------- token estimators


def compute_gae_advantage_return(token_level_rewards: torch.Tensor, values: torch.Tensor,
                                 response_mask: torch.Tensor, gamma, lambd, *, skip_masked: bool | None = None,
                                 **kwargs):
    """SkyRL's ``compute_gae_advantage_return``: ``(advantages, returns)``, each
    ``(batch_size, response_len)``, the advantages whitened over ``response_mask``.

    Args:
        token_level_rewards, values: floating tensors ``(batch_size, response_len)``.
        response_mask: 0/1 (bool, integer or floating) of the same shape.
        gamma, lambd: floats in [0, 1], or 0-d tensors.
        skip_masked: masked tokens are skipped steps of the recursion (module docstring);
            default: as :func:`patch` set it (False: SkyRL's recursion, which reads no mask).
        kwargs: the registry's other arguments (``index``, ``config``, ...), unused.
    """
    r = _common.check_rows("token_level_rewards", token_level_rewards)
    v = _common.check_rows("values", values, r.shape)
    m = _common.check_mask("response_mask", response_mask, r.shape, r.device)
    gamma, lambd = _common.coef("gamma", gamma), _common.coef("lambd", lambd)
    with torch.no_grad(), _common.errors_as(mask="response_mask"):
        if _mode(skip_masked):
            adv, ret = rlscan.gae(r, v, mask=m, whiten=True, gamma=gamma, lmbda=lambd, time_dim=-1)
            return adv, ret
        # every token a step, the value after the last 0: the mask of a row of ones, broadcast (read in
        # place, no copy), takes rlscan's loop over rows contiguous in time
        adv, ret = rlscan.gae(r, v, mask=_every_token(r), gamma=gamma, lmbda=lambd, time_dim=-1)
        return rlscan.masked_whiten(adv, m, out=adv), ret  # whitened in place: no third [B, T] tensor


def compute_reinforce_plus_plus_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                                  gamma, *, skip_masked: bool | None = None, **kwargs):
    """SkyRL's ``compute_reinforce_plus_plus_outcome_advantage``: ``(advantages, returns)``,
    ``advantages = masked_whiten(G, m) · m`` and ``returns = G`` (module docstring).

    Args:
        token_level_rewards: a floating tensor ``(batch_size, response_len)``.
        response_mask: 0/1 (bool, integer or floating) of the same shape.
        gamma: a float in [0, 1], or a 0-d tensor.
        skip_masked: the return carried through masked tokens (module docstring); default: as
            :func:`patch` set it (False: SkyRL's, restarted before each masked token).
        kwargs: the registry's other arguments, unused.
    """
    r = _common.check_rows("token_level_rewards", token_level_rewards)
    m = _common.check_mask("response_mask", response_mask, r.shape, r.device)
    gamma = _common.coef("gamma", gamma)
    # SkyRL's running return is its product with the mask: float64 from a float64 mask
    wide = m.dtype == torch.float64 and r.dtype != torch.float64
    with torch.no_grad(), _common.errors_as(mask="response_mask"):
        # SkyRL's loop resets its running return after each masked token (reset_at_skipped)
        adv, ret = rlscan.reinforce_pp_returns(r, m, gamma=gamma, time_dim=-1,
                                               compute_dtype=torch.float64 if wide else None,
                                               reset_at_skipped=not _mode(skip_masked))
    return adv.to(torch.result_type(ret, m)), ret  # SkyRL's product with the mask promotes


# ----------------------------------------------------------------------------- outcome estimators


def compute_grpo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                   epsilon: float = 1e-6, grpo_norm_by_std: bool = True, **kwargs):
    """SkyRL's ``compute_grpo_outcome_advantage``: ``(s − μ_g) / (σ_g + ε) · m``, twice.

    Args:
        token_level_rewards: a floating tensor ``(batch_size, response_len)``.
        response_mask: the 0/1 mask the advantages are multiplied by, of the same shape.
        index: each response's group label (the prompt's uid): a sequence, numpy array or
            integer tensor of at least ``batch_size`` labels (as in SkyRL's loop, the first
            ``batch_size`` are read).
        epsilon: added to the group's std.
        grpo_norm_by_std: False leaves out the division.
    """
    scores, groups = _scores(token_level_rewards, response_mask, index)
    epsilon = _common.check_float("epsilon", epsilon)
    norm = _common.check_bool("grpo_norm_by_std", grpo_norm_by_std)
    with torch.no_grad():
        mean = groups.mean(scores)
        a = scores - mean
        if norm:
            # a group of one divides by 1 + ε in float32 (SkyRL's torch.tensor(1.0) + ε)
            one = (torch.tensor(1.0) + epsilon).to(scores.dtype)
            a = a / torch.where(groups.single, one.to(scores.device), groups.std(scores, mean) + epsilon)
    return _broadcast(a, response_mask)


def compute_rloo_outcome_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                                   **kwargs):
    """SkyRL's ``compute_rloo_outcome_advantage``: ``(s − μ_g) · n_g / (n_g − 1) · m``
    (0 in a group of one), twice. ``index`` as :func:`compute_grpo_outcome_advantage`'s."""
    scores, groups = _scores(token_level_rewards, response_mask, index)
    with torch.no_grad():
        n = groups.size.double()
        factor = (n / (n - 1)).to(scores.dtype)  # SkyRL's Python float n / (n - 1), in the scores' dtype
        a = torch.where(groups.single, 0.0, (scores - groups.mean(scores)) * factor)
    return _broadcast(a, response_mask)


def compute_maxrl_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index,
                            epsilon: float = 1e-6, **kwargs):
    """SkyRL's ``compute_maxrl_advantage`` (skyrl 0.4): ``(s − μ_g) / (μ_g + ε) · m`` (``s``
    in a group of one), twice. ``index`` as :func:`compute_grpo_outcome_advantage`'s."""
    scores, groups = _scores(token_level_rewards, response_mask, index)
    epsilon = _common.check_float("epsilon", epsilon)
    with torch.no_grad():
        mean = groups.mean(scores)
        a = torch.where(groups.single, scores, (scores - mean) / (mean + epsilon))
    return _broadcast(a, response_mask)


class _Groups:
    """The groups of ``index``: each response's group id, each group's size, and each group's
    responses side by side in their order in the batch (``order[start[g]:start[g] + n_g]``)."""

    def __init__(self, index, n: int, device):
        self.ids, G = _common.group_ids(index, n, device)
        self.count = torch.bincount(self.ids, minlength=G)
        self.size = self.count[self.ids]
        self.single = self.size == 1
        self.order = torch.argsort(self.ids, stable=True)
        self.start = torch.cumsum(self.count, 0) - self.count

    def mean(self, scores: torch.Tensor) -> torch.Tensor:
        """Each response's group mean, 0 in a group of one: for each size ``n`` of group, the
        groups of ``n`` as the rows of a ``[G_n, n]`` matrix of their scores in order, summed
        along the rows and divided by ``n`` (``torch.mean`` of one group's ``[n]`` scores is
        that same sum and division: the same bits)."""
        mean = torch.zeros(len(self.count), dtype=scores.dtype, device=scores.device)
        for n in torch.unique(self.count).tolist():  # the groups' sizes: one or a few
            if n > 1:
                which = (self.count == n).nonzero().squeeze(1)
                members = self.order[self.start[which, None] + torch.arange(n, device=scores.device)]
                mean[which] = scores[members].sum(dim=1) / n
        return mean[self.ids]

    def std(self, scores: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
        """Each response's group's unbiased std as ``torch.std`` takes it on the CPU: the
        squares of ``s − μ`` summed in float64 in the batch's order, over ``n − 1``, the square
        root (correctly rounded) rounded to the scores' dtype (NaN in a group of one)."""
        dx = scores.double() - mean.double()
        squares = torch.zeros(len(self.count), dtype=torch.float64, device=scores.device).index_add_(0, self.ids,
                                                                                                     dx * dx)
        var = squares / (self.count - 1)
        # C's sqrt, as torch.std's: torch.sqrt of float64 CPU tensors can be an ulp away from it
        std = torch.from_numpy(np.sqrt(var.numpy())) if var.device.type == "cpu" else torch.sqrt(var)
        return std.to(scores.dtype)[self.ids]


def _scores(rewards, mask, index):
    r = _common.check_rows("token_level_rewards", rewards)
    _common.check_mask("response_mask", mask, r.shape, r.device)
    if index is None:
        raise ValueError("index (each response's group label: the prompt's uid) is required by the group estimators")
    scores = r.sum(dim=-1)
    if hasattr(index, "__len__") and not isinstance(index, (str, bytes)) and len(index) > len(scores):
        index = index[:len(scores)]  # SkyRL's loop reads index[i] for i < batch_size: the labels after are unread
    return scores, _Groups(index, len(scores), scores.device)


def _broadcast(a: torch.Tensor, mask: torch.Tensor):
    """SkyRL's ``scores.unsqueeze(-1) * response_mask``, as both results (its dtype and bits),
    the mask's 0/1 values checked as it is read."""
    with _common.errors_as(mask="response_mask"):
        out = rlscan.masked_broadcast(a, mask)
    return out, out


def _every_token(x: torch.Tensor) -> torch.Tensor:
    """A mask that keeps every token of ``x``'s ``[B, T]``: one row of ones, broadcast."""
    return torch.ones(1, x.shape[-1], dtype=torch.bool, device=x.device).expand(x.shape)


def _mode(skip_masked) -> bool:
    return _skip_masked if skip_masked is None else _common.check_bool("skip_masked", skip_masked)


# ----------------------------------------------------------------------------- patch()


#: registry name -> (ppo_utils' function name, rlscan's function)
_ESTIMATORS = {
    "gae": ("compute_gae_advantage_return", compute_gae_advantage_return),
    "reinforce++": ("compute_reinforce_plus_plus_outcome_advantage", compute_reinforce_plus_plus_outcome_advantage),
    "grpo": ("compute_grpo_outcome_advantage", compute_grpo_outcome_advantage),
    "rloo": ("compute_rloo_outcome_advantage", compute_rloo_outcome_advantage),
    "maxrl": ("compute_maxrl_advantage", compute_maxrl_advantage),
}
_ABSENT = object()  # a registry name that was not registered before patch()
_patches = _common.Patches()  # the places patch() wrote: (distribution, "registry" or "attr", name)


def check_release(distribution: str, version) -> None:
    """Raise ``ImportError`` for a release of ``distribution`` (``skyrl`` or ``skyrl-train``)
    outside :data:`SUPPORTED_SKYRL` (``None``: not installed)."""
    if version is None:
        return
    (low, high), _ = _RELEASES[distribution]
    if not _common.in_range(str(version), low, high):
        raise ImportError(f"rlscan.adapters.skyrl follows {distribution} {SUPPORTED_SKYRL[distribution]}; "
                          f"{distribution} {version} is installed. Install a release in that range, or call "
                          "rlscan's functions directly.")


def _modules() -> dict:
    """``{distribution: its ppo_utils module}`` for every installed SkyRL release."""
    installed = {dist: _common.installed_version(dist) for dist in _RELEASES}
    if not any(installed.values()):
        raise ImportError("rlscan.adapters.skyrl.patch() needs SkyRL: skyrl " + SUPPORTED_SKYRL["skyrl"] +
                          " or skyrl-train " + SUPPORTED_SKYRL["skyrl-train"])
    modules = {}
    for dist, version in installed.items():
        if version is None:
            continue
        check_release(dist, version)
        name = _RELEASES[dist][1]
        try:
            modules[dist] = importlib.import_module(name)
        except ImportError as error:
            raise ImportError(f"rlscan.adapters.skyrl.patch() could not import {name} ({dist} {version}): "
                              f"{error}") from error
    return modules


def _places(modules: dict):
    """``((distribution, where, name), rlscan's function)`` for every place :func:`patch` writes."""
    for dist, module in modules.items():
        for name, (attr, fn) in _ESTIMATORS.items():
            if hasattr(module, attr):  # skyrl-train 0.3 has no maxrl
                yield (dist, "registry", name), fn
                yield (dist, "attr", attr), fn


def _accessors(modules: dict):
    """``(get, put)`` of a place ``(distribution, where, name)`` in ``modules``."""
    return (lambda place: _get(modules[place[0]], *place[1:]),
            lambda place, value: _put(modules[place[0]], *place[1:], value))


def _get(module, where: str, name: str):
    if where == "attr":
        return getattr(module, name)
    registry = module.AdvantageEstimatorRegistry
    return registry.get(name) if name in registry.list_available() else _ABSENT


def _put(module, where: str, name: str, value) -> None:
    if where == "attr":
        setattr(module, name, value)
        return
    registry = module.AdvantageEstimatorRegistry
    if name in registry.list_available():
        registry.unregister(name)  # register() refuses a name it holds
    if value is not _ABSENT:
        registry.register(name, value)


def patch(*, skip_masked: bool = False) -> None:
    """Make SkyRL's ``gae``, ``reinforce++``, ``grpo``, ``rloo`` and ``maxrl`` rlscan's, in
    this process's registry and ``ppo_utils`` of every installed release.

    Args:
        skip_masked: the token estimators skip masked tokens in their recursions (module
            docstring); False: SkyRL's numbers. Calling ``patch`` again changes the mode.

    Raises:
        ImportError: no SkyRL release is importable, or an installed one is outside
            :data:`SUPPORTED_SKYRL`.
    """
    global _skip_masked
    _common.check_bool("skip_masked", skip_masked)
    modules = _modules()
    _skip_masked = skip_masked
    _patches.apply(_places(modules), *_accessors(modules))


def unpatch() -> None:
    """Put back SkyRL's own estimators: each place :func:`patch` wrote gets what it held
    before, unless someone else has replaced rlscan's function there since."""
    global _skip_masked
    _skip_masked = False
    if _patches:
        _patches.restore(*_accessors(_modules()))


def is_patched() -> bool:
    """Whether SkyRL hands out rlscan's estimators now, in its registry and ``ppo_utils``."""
    return bool(_patches) and _patches.in_effect(_accessors(_modules())[0])
