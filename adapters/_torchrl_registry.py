"""Swapping classes into TorchRL's value-estimator registry, and back.

TorchRL 0.14 losses build their estimator through a registry keyed by
:class:`~torchrl.objectives.utils.ValueEstimators` (a loss's default estimator, and
``loss.make_value_estimator(ValueEstimators.GAE, ...)``). Re-registering a key with
another class, under the same default hyperparameters, makes every estimator built from
then on one of that class. Estimators built before are left as they are.

The classes to register come in as ``{ValueEstimators key: class}``: the drop-ins live
in ``rlscan.adapters.torchrl``, which imports this module (never the other way).
"""
from __future__ import annotations

from torchrl.objectives.utils import get_value_estimator_entry, register_value_estimator

# ValueEstimators key -> the registry entry that register() replaced.
_replaced: dict = {}


def register(drop_ins: dict) -> None:
    """Register each class of ``drop_ins`` for its key, keeping the key's default
    hyperparameters; a key that already holds its class is left alone."""
    for kind, cls in drop_ins.items():
        entry = get_value_estimator_entry(kind)
        if entry.cls is cls:
            continue
        _replaced[kind] = entry
        register_value_estimator(kind, default_kwargs=entry.default_kwargs)(cls)


def restore(drop_ins: dict) -> None:
    """Put back the entries that :func:`register` replaced (a key registered again by
    someone else since then is left alone)."""
    while _replaced:
        kind, entry = _replaced.popitem()
        if get_value_estimator_entry(kind).cls is drop_ins[kind]:
            register_value_estimator(kind, default_kwargs=entry.default_kwargs)(entry.cls)


def registered(drop_ins: dict) -> bool:
    """Whether the registry hands out the class of ``drop_ins`` for every one of its keys."""
    return all(get_value_estimator_entry(kind).cls is cls for kind, cls in drop_ins.items())
