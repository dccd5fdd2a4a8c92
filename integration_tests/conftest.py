"""Shared setup for the integration tests: the environment they run in, and the compile
matrix first under pytest-xdist.

Without a GPU, Triton's interpreter runs the real kernels on CPU tensors; it must be
switched on before anything imports triton. A GPU machine keeps the compiled kernels,
and an explicit ``TRITON_INTERPRET`` is always left as it is.
"""
import os

import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_collection_modifyitems(items):
    """Under pytest-xdist, ``test_gpu_compile.py`` (the suite's longest file) first: with
    ``--dist loadfile --no-loadscope-reorder`` the workers take files in this order, so one
    starts on it at once and the others run the rest meanwhile. A plain run keeps pytest's
    order, the quick unit tests' failures early."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.path.name != "test_gpu_compile.py")
