"""No two rlscan modules import each other, directly or through others, and no import runs
back up a layer (the kernel layer, ``rlscan._triton``, never imports ``rlscan.bench``).

The graph is read from the source with ``ast``, not from an import: every ``import`` and
``from ... import`` statement counts, at module level or inside a function (an import
moved into a function to dodge a circle is still a circle), with relative imports resolved
to module names, and so does a module named in a string for a lazy import
(``Ref("rlscan.ops.gae.cpu:run")``). A module's own parent packages are not edges: Python
imports them first, and a package that re-exports its submodules is not a circle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# source folder -> the package it installs as (pyproject.toml's package-dir)
PACKAGES = {"core": "rlscan", "adapters": "rlscan.adapters"}


def module_files() -> dict:
    """``{module name: (path, whether it is a package's __init__)}`` for every module."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join([package, *parts])] = (path, is_package)
    return found


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import ...`` written in ``module``."""
    if level == 0:
        return name or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(module: str, path: Path, is_package: bool, modules) -> set:
    """The rlscan modules that ``module`` imports anywhere in its source."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node.level, node.module)
            # ``from pkg import sub`` imports the submodule; ``from mod import name`` the module
            names = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("rlscan."):
            # a module named for a lazy import (rlscan._spec.Ref, Kernel): "rlscan.ops.gae.cpu:run"
            names = [node.value.partition(":")[0]]
        else:
            continue
        for name in names:
            # ``import a.b.c`` (or a name inside a module) reaches the longest rlscan module prefix
            parts = name.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts:
                targets.add(".".join(parts))
    parents = {".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)}
    return targets - parents - {module}


def import_graph(files: dict | None = None) -> dict:
    files = module_files() if files is None else files
    return {m: imports_of(m, path, is_package, files) for m, (path, is_package) in files.items()}


def find_cycle(graph: dict):
    """One cycle ``[a, b, ..., a]`` of the directed graph, or None (depth-first search)."""
    state: dict = {}  # module -> "open" while on the search path, "done" once all below it are
    path: list = []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_is_read():
    graph = import_graph()
    assert "rlscan._call" in graph and "rlscan.adapters.torchrl" in graph
    assert "rlscan._spec" in graph["rlscan._call"]  # a top-level ``from ._spec import ...``
    # a module named for a lazy import (an OpSpec's Kernel and Ref), and a function-level
    # ``from . import rows`` in a sub-package, resolved relative to it
    assert {"rlscan.ops.gae.kernel", "rlscan.ops.gae.cpu", "rlscan.ops.gae.rows"} <= graph["rlscan.ops.gae.op"]
    # ``from .. import _forms`` in a package's __init__ resolves from the package itself
    assert "rlscan.ops._forms" in graph["rlscan.ops._skip"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("late", [False, True])
def test_a_cycle_is_found(tmp_path, late):
    """Two modules that import each other, at module level or inside a function, are a cycle."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from . import b\n")
    body = "def f():\n    from .a import thing\n" if late else "from pkg.a import thing\n"
    (tmp_path / "pkg" / "b.py").write_text(body)
    (tmp_path / "pkg" / "c.py").write_text("from .a import thing\n")
    files = {
        "pkg": (tmp_path / "pkg" / "__init__.py", True),
        **{f"pkg.{m}": (tmp_path / "pkg" / f"{m}.py", False) for m in "abc"},
    }
    cycle = find_cycle(import_graph(files))
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"pkg.a", "pkg.b"}


#: ``(importer prefix, imported prefix, why)``: layers an import must not run back up
LAYERS = (("rlscan._triton", "rlscan.bench", "the kernel layer does not import the benchmark harness"),)


def layer_violations(graph: dict, layers=LAYERS) -> list:
    """``"importer -> imported (why)"`` for every edge of ``graph`` that a layer rule forbids."""
    def under(module, prefix):
        return module == prefix or module.startswith(prefix + ".")

    return sorted(f"{m} -> {t} ({why})" for low, high, why in layers for m, targets in graph.items()
                  if under(m, low) for t in targets if under(t, high))


def test_the_kernel_layer_does_not_import_the_bench():
    assert layer_violations(import_graph()) == []


def test_a_layer_violation_is_found():
    graph = {"rlscan._triton.launch": {"rlscan.bench.cases", "rlscan._triton.settings"},
             "rlscan.bench.tune": {"rlscan._triton.settings"}, "rlscan._triton_extra": {"rlscan.bench"}}
    assert layer_violations(graph) == [f"rlscan._triton.launch -> rlscan.bench.cases ({LAYERS[0][2]})"]


def adapter_violations(graph: dict, public=None) -> list:
    """``"adapter -> module"`` for every rlscan module an adapter imports that is neither the
    package ``rlscan`` itself, a module it exports (``rlscan.__all__``: ``rlscan.reference``),
    nor an adapter module: adapters use rlscan's public API only (``rlscan._*`` and
    ``rlscan.ops.*`` are internals, free to change)."""
    if public is None:
        import rlscan

        public = set(rlscan.__all__)
    allowed = {"rlscan", "rlscan.adapters"} | {f"rlscan.{name}" for name in public}
    return sorted(f"{m} -> {t}" for m, targets in graph.items() if m.startswith("rlscan.adapters")
                  for t in targets if t not in allowed and not t.startswith("rlscan.adapters."))


#: the internals adapters still read, and why (issue 54; each goes once a public call or
#: _common replaces it):
#: * rlscan._call and rlscan.ops._skip: rllib's vtrace_torch and verl's token estimators check
#:   their tensors under the framework's names with rlscan's own checks, whose messages
#:   docs/errors.md lists and tests/test_arguments.py holds them to (numpy byte order, masked
#:   arrays, nested tensors, shapes, devices); rllib forms target − behaviour before
#:   rlscan.vtrace could check them.
KNOWN_PRIVATE = ("rlscan.adapters.rllib -> rlscan._call", "rlscan.adapters.verl -> rlscan._call",
                 "rlscan.adapters.verl -> rlscan.ops._skip")


def test_adapters_use_the_public_api_only():
    assert adapter_violations(import_graph()) == sorted(KNOWN_PRIVATE)


def test_an_adapter_reaching_into_rlscan_is_found(tmp_path):
    """Each way of naming an internal module is caught: ``from rlscan import _x``, ``from
    rlscan._x import f``, ``import rlscan.ops.y``, inside a function too; the public API is not."""
    (tmp_path / "adapters").mkdir()
    source = ("import rlscan\nfrom rlscan import gae, reference\nfrom . import _common\nfrom rlscan import _cpu_rows\n"
              "from rlscan._call import Call\ndef f():\n    import rlscan.ops.gae.op\n")
    (tmp_path / "adapters" / "x.py").write_text(source)
    files = {"rlscan": (ROOT / "core" / "__init__.py", True), "rlscan.reference": (ROOT / "core" / "reference.py", False),
             "rlscan._cpu_rows": (ROOT / "core" / "_cpu_rows.py", False),
             "rlscan._call": (ROOT / "core" / "_call.py", False),
             "rlscan.ops.gae.op": (ROOT / "core" / "ops" / "gae" / "op.py", False),
             "rlscan.adapters._common": (ROOT / "adapters" / "_common.py", False),
             "rlscan.adapters.x": (tmp_path / "adapters" / "x.py", False)}
    graph = {"rlscan.adapters.x": imports_of("rlscan.adapters.x", *files["rlscan.adapters.x"], files)}
    assert adapter_violations(graph, public={"gae", "reference"}) == [
        "rlscan.adapters.x -> rlscan._call", "rlscan.adapters.x -> rlscan._cpu_rows", "rlscan.adapters.x -> rlscan.ops.gae.op"]
