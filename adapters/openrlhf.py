"""OpenRLHF: rlscan's scans for its experience maker's two token loops.

One line, before the trainer makes experiences, turns them on::

    import rlscan.adapters.openrlhf; rlscan.adapters.openrlhf.patch()

:func:`patch` replaces the methods ``get_advantages_and_returns`` and
``get_cumulative_returns`` of ``openrlhf.trainer.ppo_utils.experience_maker.RemoteExperienceMaker``
with the functions below; :func:`unpatch` puts OpenRLHF's back. ``patch(module=copy)`` does
the same to a copy of that module loaded from its file, as OpenRLHF's own tests load it.
They follow OpenRLHF releases ``SUPPORTED_OPENRLHF``; :func:`patch` refuses others.

OpenRLHF's loops mask by multiplication: with the action mask ``m`` (1 on the response's
tokens, 0 on padding), ``r̃ = m·r`` and ``Ṽ = m·V``, and the recurrence runs through every
step, masked or not, with 0 after the last:

* GAE: ``δ_t = r̃_t + γ Ṽ_{t+1} − Ṽ_t``, ``A_t = δ_t + γλ A_{t+1}`` (``Ṽ_T = A_T = 0``),
  ``returns = A + Ṽ``. This is ``rlscan.gae(r̃, Ṽ, bootstrap_value=0)``.
* REINFORCE (``get_cumulative_returns``): ``G_t = r̃_t + γ G_{t+1}`` (``G_T = 0``),
  ``rlscan.discounted_returns(r̃)``.

So a masked step is not skipped as in :func:`rlscan.gae`'s ``mask=``: it is a step of
reward and value 0 that still discounts. The products ``m·r`` and ``m·V`` are OpenRLHF's own,
kept for the same numbers. OpenRLHF's experience maker runs on its driver, from CPU tensors,
so these run rlscan's CPU path there; on GPU tensors, the Triton path.

See docs/adapters/openrlhf.md.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import numbers
import re
import sys
import types

import torch

import rlscan

__all__ = ["get_advantages_and_returns", "get_cumulative_returns", "patch", "unpatch", "is_patched",
           "SUPPORTED_OPENRLHF"]

#: The OpenRLHF releases whose loops these are (pip's specifier).
SUPPORTED_OPENRLHF = ">=0.11.0,<0.12"
_RANGE = ((0, 11), (0, 12))
_MODULE = "openrlhf.trainer.ppo_utils.experience_maker"
_CLASS = "RemoteExperienceMaker"


def get_advantages_and_returns(values: torch.Tensor, rewards: torch.Tensor, action_mask, gamma, lambd):
    """OpenRLHF's ``get_advantages_and_returns``: ``(advantages, returns)``, each
    ``(batch_size, response_size)``, from the masked GAE of the module docstring.

    Args:
        values, rewards: floating tensors ``(batch_size, response_size)``.
        action_mask: 0/1 (bool, integer or floating) of the same shape, or ``None``.
        gamma, lambd: floats in [0, 1], or 0-d tensors.

    Example::

        >>> import torch
        >>> from rlscan.adapters.openrlhf import get_advantages_and_returns
        >>> values, rewards = torch.zeros(2, 4), torch.tensor([[0., 0., 1., 0.], [0., 1., 0., 0.]])
        >>> mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
        >>> adv, ret = get_advantages_and_returns(values, rewards, mask, gamma=1.0, lambd=1.0)
        >>> adv
        tensor([[1., 1., 1., 0.],
                [1., 1., 0., 0.]])
    """
    _check_tokens(rewards, action_mask, values=values)
    values, rewards = _masked(values, action_mask), _masked(rewards, action_mask)
    with torch.no_grad():
        # OpenRLHF's next value past the last step is 0: a bootstrap of zeros, no termination
        last = torch.zeros(rewards.shape[:-1], dtype=values.dtype, device=values.device)
        return tuple(rlscan.gae(rewards, values, bootstrap_value=last, gamma=_coef("gamma", gamma),
                                lmbda=_coef("lambd", lambd), time_dim=-1))


def get_cumulative_returns(rewards: torch.Tensor, action_mask, gamma):
    """OpenRLHF's ``get_cumulative_returns``: the discounted return of the masked rewards,
    ``(batch_size, response_size)`` in the rewards' dtype (the running return in float32).

    Args:
        rewards: a floating tensor ``(batch_size, response_size)``.
        action_mask: 0/1 of the same shape, or ``None``.
        gamma: a float in [0, 1], or a 0-d tensor.
    """
    _check_tokens(rewards, action_mask)
    rewards = _masked(rewards, action_mask)
    with torch.no_grad():
        return rlscan.discounted_returns(rewards, gamma=_coef("gamma", gamma), time_dim=-1)


# ----------------------------------------------------------------------------- checks


def _check_tokens(rewards, action_mask, *, values=None) -> None:
    named = [("rewards", rewards)] + ([("values", values)] if values is not None else [])
    for name, x in named:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (batch_size, response_size), got {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be floating, got {x.dtype}")
        if x.dim() != 2:
            raise ValueError(f"{name} must be 2-d (batch_size, response_size), got shape {tuple(x.shape)}")
    if values is not None and values.shape != rewards.shape:
        raise ValueError(f"values must have the rewards' shape {tuple(rewards.shape)}, got {tuple(values.shape)}")
    if action_mask is None:
        return
    if not isinstance(action_mask, torch.Tensor):
        raise TypeError(f"action_mask must be a torch.Tensor or None, got {type(action_mask).__name__}")
    if action_mask.shape != rewards.shape:
        raise ValueError(f"action_mask must have the rewards' shape {tuple(rewards.shape)}, "
                         f"got {tuple(action_mask.shape)}")


def _coef(name: str, value):
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise ValueError(f"{name} must be a float or a 0-d tensor, got a tensor of shape {tuple(value.shape)}")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1], got {type(value).__name__}")
    return float(value)


def _masked(x: torch.Tensor, action_mask):
    # OpenRLHF's product, with its promotion (a float mask of wider dtype widens the result)
    return x if action_mask is None else action_mask * x


# ----------------------------------------------------------------------------- patching

#: the experience maker class -> the methods patch() replaced on it
_saved: dict = {}


def _maker_class(module=None):
    """``RemoteExperienceMaker`` of ``module``, or of the installed experience maker (imported)."""
    what = "module"
    if module is None:
        what = _MODULE
        try:
            module = importlib.import_module(_MODULE)
        except ImportError as error:
            raise ImportError(f"rlscan.adapters.openrlhf.patch() needs OpenRLHF ({_MODULE}): {error}") from error
    elif not isinstance(module, types.ModuleType):
        raise TypeError(f"module must be a module holding OpenRLHF's {_CLASS} (a copy of {_MODULE}), "
                        f"got {type(module).__name__}")
    maker = vars(module).get(_CLASS)
    if not isinstance(maker, type) or any(name not in vars(maker) for name in _METHODS):
        raise ValueError(f"{what} must define OpenRLHF's {_CLASS} with the methods {', '.join(_METHODS)}; "
                         f"{module.__name__} does not")
    return maker


def _patched_class(module=None):
    """The class :func:`patch` would change for ``module``, where it can have: ``None`` where the
    installed experience maker was never imported (nothing is imported here)."""
    if module is not None:
        return _maker_class(module)
    module = sys.modules.get(_MODULE)
    return None if module is None else vars(module).get(_CLASS)


def check_release(version: str | None) -> None:
    """Refuse an OpenRLHF release outside :data:`SUPPORTED_OPENRLHF`, naming both."""
    if version is None:
        return
    found = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if not _RANGE[0] <= found < _RANGE[1]:
        raise ImportError(f"rlscan.adapters.openrlhf follows OpenRLHF {SUPPORTED_OPENRLHF}; "
                          f"the installed release is {version}")


def _installed() -> str | None:
    try:
        return importlib.metadata.version("openrlhf")
    except importlib.metadata.PackageNotFoundError:
        return None


def _method(fn):
    def method(self, *args, **kwargs):
        return fn(*args, **kwargs)

    method.__name__, method.__qualname__, method.__doc__ = fn.__name__, f"{_CLASS}.{fn.__name__}", fn.__doc__
    method.__wrapped__ = fn
    return method


_METHODS = {"get_advantages_and_returns": _method(get_advantages_and_returns),
            "get_cumulative_returns": _method(get_cumulative_returns)}


def patch(*, module=None) -> None:
    """Make ``RemoteExperienceMaker.get_advantages_and_returns`` and
    ``get_cumulative_returns`` rlscan's. Calling it again changes nothing.

    Args:
        module: the experience maker module whose ``RemoteExperienceMaker`` to change. By
            default ``openrlhf.trainer.ppo_utils.experience_maker``, imported. Give it a copy
            that was loaded apart from the import system, as OpenRLHF's own tests load
            ``experience_maker.py`` from its file path (``importlib.util.spec_from_file_location``):
            the default never reaches such a copy.

    Raises:
        ImportError: OpenRLHF is not importable, or its release is outside
            :data:`SUPPORTED_OPENRLHF`.
        TypeError: ``module`` is not a module.
        ValueError: ``module`` has no ``RemoteExperienceMaker`` with both methods.
    """
    check_release(_installed())
    maker = _maker_class(module)
    if maker in _saved:
        return
    _saved[maker] = {name: vars(maker)[name] for name in _METHODS}
    for name, method in _METHODS.items():
        setattr(maker, name, method)


def unpatch(*, module=None) -> None:
    """Put OpenRLHF's own methods back on the class that ``patch(module=module)`` changed,
    where rlscan's are still in place (a method someone else has set since is left as
    theirs). Where nothing was patched, nothing changes."""
    maker = _patched_class(module)
    saved = _saved.pop(maker, None)
    if saved is None:
        return
    for name, original in saved.items():
        if vars(maker).get(name) is _METHODS[name]:
            setattr(maker, name, original)


def is_patched(*, module=None) -> bool:
    """Whether ``patch(module=module)`` is in effect (by default, on the installed experience
    maker)."""
    maker = _patched_class(module)
    return maker is not None and maker in _saved
