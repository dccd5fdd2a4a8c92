"""``patch()`` / ``unpatch()``: put rlscan's estimators in TorchRL's value-estimator registry.

TorchRL 0.14 losses build their estimator through a registry keyed by
:class:`~torchrl.objectives.utils.ValueEstimators` (a loss's default estimator, and
``loss.make_value_estimator(ValueEstimators.GAE, ...)``). Re-registering a key with
rlscan's class, under the same default hyperparameters, makes every estimator built
from then on an rlscan one. Estimators built before the patch are left as they are.
"""
from __future__ import annotations

from torchrl.objectives.utils import ValueEstimators, get_value_estimator_entry, register_value_estimator

# ValueEstimators key -> the registry entry that patch() replaced.
_replaced: dict = {}


def _drop_ins() -> dict:
    from . import torchrl as drop_in

    return {
        ValueEstimators.GAE: drop_in.GAE,
        ValueEstimators.TDLambda: drop_in.TDLambdaEstimator,
        ValueEstimators.TD1: drop_in.TD1Estimator,
        ValueEstimators.VTrace: drop_in.VTrace,
    }


def patch() -> None:
    """Register rlscan's ``GAE``, ``TDLambdaEstimator``, ``TD1Estimator`` and ``VTrace`` for
    their :class:`~torchrl.objectives.utils.ValueEstimators` keys, keeping TorchRL's default
    hyperparameters. Every loss that builds one of these estimators afterwards gets
    rlscan's. Calling it twice is harmless; :func:`unpatch` undoes it."""
    for kind, cls in _drop_ins().items():
        entry = get_value_estimator_entry(kind)
        if entry.cls is cls:
            continue
        _replaced[kind] = entry
        register_value_estimator(kind, default_kwargs=entry.default_kwargs)(cls)


def unpatch() -> None:
    """Restore the estimators that :func:`patch` replaced (a key registered again by
    someone else since then is left alone)."""
    ours = _drop_ins()
    while _replaced:
        kind, entry = _replaced.popitem()
        if get_value_estimator_entry(kind).cls is ours[kind]:
            register_value_estimator(kind, default_kwargs=entry.default_kwargs)(entry.cls)


def is_patched() -> bool:
    """Whether the registry currently hands out rlscan's estimators."""
    return all(get_value_estimator_entry(kind).cls is cls for kind, cls in _drop_ins().items())
