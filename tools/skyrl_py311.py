"""SkyRL's estimators (``ppo_utils``) from the installed releases, where SkyRL's full install
is not there: Python 3.11 and the ray the other frameworks' tests use. The tests and
``tools/skyrl_cpu_timing.py`` import SkyRL through :func:`ppo_utils`.

``skyrl`` 0.4 and ``skyrl-train`` 0.3 declare Python >= 3.12 and pin their own ray; CI installs
their wheels with ``--no-deps --ignore-requires-python``. Their ``ppo_utils`` modules run on
Python 3.11 with the ray 2.60 that CI has; three imports on the way do not, and meet a
stand-in instead, each only where the real one fails:

* the package ``skyrl.backends`` (its ``__init__`` imports the Tinker backend, whose pydantic
  models use ``typing.TypedDict``: pydantic refuses it before Python 3.12);
* the package ``skyrl_train.utils`` (its ``__init__`` imports ``PlacementGroupSchedulingStrategy``
  from ``ray.util.placement_group``, which ray 2.60 no longer exports);
* ``skyrl_gym`` (not installed: ``skyrl.train.config`` imports two environments' config
  dataclasses from it, which ``ppo_utils`` never uses).

A stand-in package has the real package's folder as its path and an empty ``__init__``: its
submodules (``ppo_utils`` itself) are SkyRL's own files. The stand-ins are modules in
``sys.modules``; :func:`install` puts them there, in this process only (a ``sitecustomize``
that calls it extends them to the processes Ray starts: ``integration_tests/test_skyrl_own_tests.py``).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types

#: distribution -> the module of its estimators
MODULES = {"skyrl": "skyrl.backends.skyrl_train.utils.ppo_utils", "skyrl-train": "skyrl_train.utils.ppo_utils"}
#: packages whose __init__ may fail here, by the distribution that installs them
PACKAGES = {"skyrl": "skyrl.backends", "skyrl-train": "skyrl_train.utils"}
#: skyrl_gym's modules that skyrl.train.config imports, and the config class it takes from each
GYM_CONFIGS = {"skyrl_gym.envs.search.env": "SearchEnvConfig", "skyrl_gym.envs.sql.env": "Text2SQLEnvConfig"}


def installed() -> dict:
    """``{distribution: version}`` of the SkyRL releases installed."""
    from importlib import metadata

    found = {}
    for dist in MODULES:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def _module(name: str, doc: str, path: list) -> types.ModuleType:
    """A package module, with a spec (``importlib.util.find_spec`` reads it) and ``path``."""
    module = types.ModuleType(name, doc)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__spec__.submodule_search_locations = module.__path__ = path
    return module


def _stand_in_package(name: str) -> None:
    top, _, rest = name.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return
    folder = os.path.join(os.path.dirname(spec.origin), *rest.split("."))
    sys.modules[name] = _module(name, f"stand-in for {name}: its folder, without its __init__ (tools/skyrl_py311.py)",
                                [folder])


def _stand_in_gym() -> None:
    for module, cls in GYM_CONFIGS.items():
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name not in sys.modules:
                sys.modules[name] = _module(name, "stand-in for skyrl_gym (tools/skyrl_py311.py)", [])
        setattr(sys.modules[module], cls, dataclasses.make_dataclass(cls, []))


def install() -> None:
    """Put in ``sys.modules`` the stand-ins this process needs (none where SkyRL's own imports work)."""
    have = installed()
    if "skyrl" in have and "skyrl_gym" not in sys.modules and importlib.util.find_spec("skyrl_gym") is None:
        _stand_in_gym()
    for dist, package in PACKAGES.items():
        if dist not in have or package in sys.modules:
            continue
        before = set(sys.modules)
        try:
            importlib.import_module(package)
        except Exception:  # noqa: BLE001 - whatever the real __init__ raises here, the stand-in replaces it
            for name in set(sys.modules) - before:
                if name == package or name.startswith(package + "."):
                    del sys.modules[name]
            _stand_in_package(package)


def ppo_utils() -> dict:
    """``{distribution: its ppo_utils module}`` for every installed SkyRL release."""
    install()
    return {dist: importlib.import_module(MODULES[dist]) for dist in installed()}
