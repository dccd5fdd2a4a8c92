"""Shared setup for the integration tests: the environment they run in, and the start of
the compile matrix's runs in the background (``test_gpu_compile.py``).

Without a GPU, Triton's interpreter runs the real kernels on CPU tensors; it must be
switched on before anything imports triton. A GPU machine keeps the compiled kernels,
and an explicit ``TRITON_INTERPRET`` is always left as it is.
"""
import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_collection_finish(session):
    """Start the compile matrix's runs (``test_gpu_compile.py``) as soon as the tests are
    known: they need nothing from the tests before them, so they overlap those tests."""
    if session.config.option.collectonly or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # under pytest-xdist every worker collects every test: its workers are the parallelism
    by_module = {}
    for item in session.items:
        start = getattr(getattr(item, "module", None), "compile_in_background", None)
        if start is not None:
            by_module.setdefault(start, []).append(item)
    for start, items in by_module.items():
        start(items)


def pytest_sessionfinish(session):
    """No compile run outlives the session (one stopped early, by ``-x`` say)."""
    for module in {getattr(item, "module", None) for item in getattr(session, "items", ())}:
        stop = getattr(module, "stop_compiles", None)
        if stop is not None:
            stop()
