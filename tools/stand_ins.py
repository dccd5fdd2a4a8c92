"""Empty modules in place of packages a timing script's framework imports at the top but never
calls here (CUDA-only builds, trainer-only services): :func:`stand_ins`."""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


class Empty(types.ModuleType):
    """A module whose every attribute is another empty module: enough for ``from x import y``
    and a base class at import time; calling one raises, saying why it is a stand-in."""

    why = "a stand-in, not installed here"

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(self)(f"{self.__name__}.{name}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is {self.why}")

    def __mro_entries__(self, bases):
        return (object,)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names, module: type):
        self.names, self.module = set(names), module

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return self.module(spec.name)

    def exec_module(self, module):
        pass


@contextlib.contextmanager
def stand_ins(names, module: type = Empty, forget: bool = False):
    """Within it, importing any of ``names`` that is not installed gives an empty ``module`` of
    that name (modules imported meanwhile keep theirs); ``forget``: the stand-ins leave
    ``sys.modules`` afterwards, so that later imports do not meet them."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    finder = _Finder(missing, module) if missing else None
    if finder is not None:
        sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)
            if forget:
                for name in [n for n, m in sys.modules.items() if isinstance(m, module)]:
                    del sys.modules[name]
