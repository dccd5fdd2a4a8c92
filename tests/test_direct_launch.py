"""The direct launch (``rlscan._triton.launch.direct_launch``): what it hands the compiled
kernel's launcher. Only a GPU runs the real launcher; this checks the plumbing with a
stand-in kernel, in the order Triton's launcher takes its arguments: the grid, the stream,
the function, its packed metadata, the launch metadata and hooks, then the kernel's
arguments and its constexprs."""
from types import SimpleNamespace

import pytest

from rlscan._triton import launch as L


class _Compiled:
    """A compiled kernel as ``JITFunction.run`` returns it, recording its launches."""

    packed_metadata = "packed"
    function = "function"

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid, stream, args)


class _Jit:
    arg_names = ["X", "n", "BLOCK", "ACC"]


@pytest.fixture
def runtime(monkeypatch):
    runtime = SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    monkeypatch.setattr(L, "_load_launch_internals", lambda: None)
    monkeypatch.setattr(L, "_runtime", runtime)
    monkeypatch.setattr(L, "_HookChain", None)
    monkeypatch.setattr(L, "_raw_stream", lambda index: 1000 + index)
    return runtime


def test_direct_launch_passes_grid_stream_arguments_and_constexprs(runtime):
    kernel = _Compiled()
    compiled = L.launcher_of(_Jit, kernel, 2, {"BLOCK": 64, "ACC": "fp32", "PHASE": 0})
    L.direct_launch(compiled, (3, 2, 1), 0, ("x", 5))
    assert kernel.calls == [(3, 2, 1, 1000, "function", "packed", None, None, None, "x", 5, 64, "fp32")]


def test_direct_launch_passes_launch_hooks_through(runtime):
    kernel = _Compiled()
    compiled = L.launcher_of(_Jit, kernel, 2, {"BLOCK": 64, "ACC": "fp32"})
    enter, leave = (lambda metadata: None), (lambda metadata: None)
    runtime.launch_enter_hook, runtime.launch_exit_hook = enter, leave
    L.direct_launch(compiled, (3, 2, 1), 1, ("x", 5))
    metadata = ("metadata", (3, 2, 1), 1001, ("x", 5, 64, "fp32"))
    assert kernel.calls == [(3, 2, 1, 1001, "function", "packed", metadata, enter, leave, "x", 5, 64, "fp32")]


def test_a_kernel_without_a_launcher_is_refused(runtime):
    with pytest.raises(RuntimeError, match="not a compiled kernel"):
        L.launcher_of(_Jit, None, 2, {})
    with pytest.raises(RuntimeError, match="not a compiled kernel"):
        L.launcher_of(_Jit, SimpleNamespace(run=None), 2, {})
