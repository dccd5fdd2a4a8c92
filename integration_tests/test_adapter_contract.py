"""The adapter contract of :mod:`rlscan.adapters`, checked for every adapter on its real framework.

* Every adapter module takes the shape ``rlscan.adapters.SHAPES`` gives it: it provides that
  shape's verbs (``VERBS``), none of the other shape's, and its older names are aliases of
  the new ones.
* ``enable``/``disable``/``is_enabled`` round-trip on a real object: ``enable`` again
  changes only the mode, ``disable`` twice is harmless, and afterwards the object holds
  exactly what it held before (the same class, method and attributes).
* ``patch``/``unpatch``/``is_patched`` round-trip on the real framework: every place
  ``patch`` writes holds rlscan's object, ``patch`` again changes nothing there, and after
  ``unpatch`` each place holds the very object it held before (``is``).

An adapter's case is skipped where its framework is not installed.
"""
from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

import pytest

import rlscan.adapters
from rlscan.adapters import SHAPES, VERBS

# openrlhf_timing imports OpenRLHF's class, skyrl_py311 SkyRL's ppo_utils
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

#: adapter -> the module its import needs (verl's adapter imports without verl; its patch() needs it)
FRAMEWORKS = {"sb3": "stable_baselines3", "rsl_rl": "rsl_rl", "torchrl": "torchrl", "rllib": "ray.rllib",
              "verl": None, "openrlhf": None, "skyrl": None, "areal": None, "cleanrl": None}
#: adapter -> {older name: the name it is an alias of}
OLD_NAMES = {
    "sb3": {"enable_triton_gae": "enable", "disable_triton_gae": "disable",
            "triton_buffer_class": "rlscan_buffer_class", "TritonRolloutBuffer": "RLScanRolloutBuffer",
            "TritonDictRolloutBuffer": "RLScanDictRolloutBuffer"},
    "rsl_rl": {"enable_triton_gae": "enable", "disable_triton_gae": "disable"},
}


def adapter(name: str):
    if FRAMEWORKS[name] is not None:
        pytest.importorskip(FRAMEWORKS[name])
    return importlib.import_module(f"rlscan.adapters.{name}")


# ----------------------------------------------------------------------------- shapes


def test_every_adapter_has_a_shape():
    modules = {m.name for m in pkgutil.iter_modules(rlscan.adapters.__path__) if not m.name.startswith("_")}
    assert modules == set(SHAPES)
    assert set(SHAPES.values()) == set(VERBS)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_adapter_provides_its_shape(name):
    module = adapter(name)
    for verb in VERBS[SHAPES[name]]:
        assert verb in module.__all__ and callable(getattr(module, verb)), verb
    others = {verb for shape, verbs in VERBS.items() if shape != SHAPES[name] for verb in verbs}
    assert not [verb for verb in others if hasattr(module, verb)]
    for old, new in OLD_NAMES.get(name, {}).items():
        assert old in module.__all__ and getattr(module, old) is getattr(module, new), old


# ----------------------------------------------------------------------------- round trips


def check_switch(module, obj, exact_of) -> None:
    """``enable``, again with ``exact=True``, ``disable`` twice, around ``obj``; ``exact_of``
    reads the mode an enabled ``obj`` runs in."""
    assert not module.is_enabled(obj) and not module.is_enabled(object())
    assert module.disable(obj) is obj and not module.is_enabled(obj)  # nothing to undo
    assert module.enable(obj) is obj and module.is_enabled(obj) and exact_of(obj) is False
    assert module.enable(obj, exact=True) is obj and module.is_enabled(obj) and exact_of(obj) is True
    assert module.disable(obj) is obj and not module.is_enabled(obj)
    assert module.disable(obj) is obj and not module.is_enabled(obj)


def check_patch(module, places) -> None:
    """``patch`` twice and ``unpatch`` twice; ``places()`` reads, from the framework, the
    objects that ``patch`` replaces."""
    before = places()
    assert not module.is_patched()
    module.unpatch()  # nothing to undo
    assert same(places(), before)
    try:
        module.patch()
        assert module.is_patched()
        patched = places()
        assert not [place for place in before if patched[place] is before[place]], "places patch() left alone"
        module.patch()  # again: nothing changes
        assert module.is_patched() and same(places(), patched)
    finally:
        module.unpatch()
    assert not module.is_patched() and same(places(), before)
    module.unpatch()
    assert same(places(), before)


def same(now: dict, before: dict) -> bool:
    return now.keys() == before.keys() and all(now[k] is before[k] for k in before)


def test_sb3_round_trip():
    sb3 = adapter("sb3")
    from stable_baselines3 import PPO
    from stable_baselines3.common.buffers import RolloutBuffer

    model = PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8, device="cpu")
    buffer, attributes = model.rollout_buffer, set(vars(model.rollout_buffer))
    check_switch(sb3, model, lambda m: m.rollout_buffer.rlscan_exact)
    assert model.rollout_buffer is buffer and type(buffer) is RolloutBuffer and set(vars(buffer)) == attributes


def test_rsl_rl_round_trip():
    rsl_rl = adapter("rsl_rl")
    from rsl_rl.algorithms import PPO
    from rsl_rl_env import make_runner, train_cfg

    alg = make_runner(train_cfg()).alg
    attributes = set(vars(alg))
    check_switch(rsl_rl, alg, lambda a: a.rlscan_exact)
    assert alg.compute_returns.__func__ is PPO.compute_returns and set(vars(alg)) == attributes


def test_torchrl_round_trip():
    torchrl = adapter("torchrl")
    from torchrl.objectives.utils import ValueEstimators, get_value_estimator_entry

    keys = (ValueEstimators.GAE, ValueEstimators.TDLambda, ValueEstimators.TD1, ValueEstimators.VTrace)
    check_patch(torchrl, lambda: {key: get_value_estimator_entry(key).cls for key in keys})


def test_rllib_round_trip():
    rllib = adapter("rllib")
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    check_patch(rllib, lambda: {"learner_class": vars(AlgorithmConfig)["learner_class"]})
    assert PPOConfig().learner_class is PPOTorchLearner


def test_verl_round_trip():
    verl = adapter("verl")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos",
                                     reason="verl is not installed (the README's test command installs verl==0.9.1)")
    names = ("gae", "reinforce_plus_plus", "grpo", "grpo_passk", "reinforce_plus_plus_baseline", "rloo", "opo", "gpg",
             "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline")
    functions = [name for name in verl.__all__ if name.startswith("compute_")]
    assert len(functions) == len(names)

    def places():
        registry = core_algos.ADV_ESTIMATOR_REGISTRY
        return {**{("registry", n): registry[n] for n in names},
                **{("attr", f): getattr(core_algos, f) for f in functions}}

    check_patch(verl, places)


def test_openrlhf_round_trip():
    openrlhf = adapter("openrlhf")
    pytest.importorskip("openrlhf", reason="OpenRLHF is not installed (the README's test command installs 0.11.2)")
    from openrlhf_timing import experience_maker

    maker = experience_maker()
    check_patch(openrlhf, lambda: {name: vars(maker)[name]
                                   for name in ("get_advantages_and_returns", "get_cumulative_returns")})


def test_skyrl_round_trip():
    skyrl = adapter("skyrl")
    from skyrl_py311 import ppo_utils

    modules = ppo_utils()
    if not modules:
        pytest.skip("SkyRL is not installed (the README's test command installs skyrl==0.4.0 and skyrl-train==0.3.1)")

    def places():
        found = {}
        for dist, module in modules.items():
            for name, (attr, _) in skyrl._ESTIMATORS.items():
                if hasattr(module, attr):
                    found[(dist, "registry", name)] = module.AdvantageEstimatorRegistry.get(name)
                    found[(dist, "attr", attr)] = getattr(module, attr)
        return found

    check_patch(skyrl, places)


def test_areal_round_trip():
    areal = adapter("areal")
    if importlib.util.find_spec("areal") is None:
        pytest.skip("AReaL is not installed (the README's test command installs 1.0.4)")
    from areal_cpu_timing import areal_modules

    actor, data, _ = areal_modules()
    check_patch(areal, lambda: {"actor": vars(actor.PPOActor)["_compute_advantages"],
                                "normalization": vars(data.Normalization)["__call__"]})
