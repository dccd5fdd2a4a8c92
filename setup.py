"""The package list, found rather than typed: ``rlscan`` is core/ and ``rlscan.adapters`` is
adapters/ (pyproject.toml's package-dir), each with every folder below it that holds Python
modules (``rlscan._triton`` has no ``__init__.py``). The rest of the build's configuration is
pyproject.toml's."""
import os

from setuptools import setup


def packages_under(folder: str, package: str) -> list:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d.isidentifier() and d != "__pycache__")
        if any(f.endswith(".py") for f in files):
            parts = os.path.relpath(root, folder).split(os.sep)
            found.append(".".join([package] + [p for p in parts if p != "."]))
    return found


setup(packages=packages_under("core", "rlscan") + packages_under("adapters", "rlscan.adapters"))
