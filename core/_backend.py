"""Which implementation runs a call: the Triton kernels or the compiled CPU loop.

``RLSCAN_BACKEND`` (read at import) and :func:`set_backend` choose between

* ``"auto"``: Triton for CUDA tensors, the CPU loop for CPU tensors and numpy arrays;
* ``"triton"``: always the Triton kernels; CPU tensors need ``TRITON_INTERPRET=1``,
  which runs the real kernels through Triton's interpreter (how CI tests them);
* ``"cpu"``: always the CPU loop; CUDA tensors are refused rather than copied.
"""
from __future__ import annotations

import contextlib
import os

BACKENDS = ("auto", "triton", "cpu")


def _checked(name: str, origin: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"{origin} must be one of {BACKENDS}, got {name!r}")
    return name


_backend = _checked(os.environ.get("RLSCAN_BACKEND", "auto").strip().lower() or "auto", "RLSCAN_BACKEND")


def get_backend() -> str:
    """The backend in force: ``"auto"``, ``"triton"`` or ``"cpu"``."""
    return _backend


def set_backend(name: str) -> str:
    """Select the backend for later calls and return the previous one."""
    global _backend
    previous, _backend = _backend, _checked(name, "backend")
    return previous


@contextlib.contextmanager
def use_backend(name: str):
    """Run the body of a ``with`` block under another backend."""
    previous = set_backend(name)
    try:
        yield
    finally:
        set_backend(previous)


def interpreting() -> bool:
    """True when Triton kernels run through the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


#: The oldest Triton whose compiler builds rlscan's kernels. Triton 3.5 (torch 2.9's) loses the
#: constant strides inside the tuples a kernel hands to its helpers in a loop's body, and
#: refuses compiler hints computed from a block's shape (``tools/compile_for_gpu.py`` under
#: 3.5.1, ``--matrix ci --once-per-setting``: 38 of 133 kernels fail for sm_90, 43 for sm_80); its
#: interpreter fails on numpy 2.4's scalars.
MIN_TRITON = (3, 6)
_triton_version: list = []


def triton_version() -> tuple:
    """The importable Triton's ``(major, minor)`` and version string (Triton is imported)."""
    if not _triton_version:
        import triton

        parts = triton.__version__.split(".")
        _triton_version.append((tuple(int(p) for p in parts[:2] if p.isdigit()), triton.__version__))
    return _triton_version[0]


def check_triton() -> None:
    """Refuse the Triton path under a Triton older than :data:`MIN_TRITON`, naming both."""
    found, text = triton_version()
    if found < MIN_TRITON:
        import torch

        raise RuntimeError(
            f"rlscan's Triton kernels need Triton >= {'.'.join(map(str, MIN_TRITON))} (torch >= 2.10); Triton "
            f"{text} is installed (with torch {torch.__version__}). Under torch 2.9 rlscan runs CPU tensors only "
            "(the 'cpu' backend): move the tensors to the CPU, or upgrade torch")


def path_for(device_type: str, what: str = "the inputs") -> str:
    """``"triton"`` or ``"cpu"``: the path that runs tensors living on ``device_type``."""
    path = _path_for(device_type, what)
    if path == "triton":
        check_triton()
    return path


def _path_for(device_type: str, what: str) -> str:
    if _backend == "auto":
        if device_type not in ("cpu", "cuda"):
            raise ValueError(f"{what} is on a {device_type} device: rlscan runs CPU and CUDA tensors and numpy arrays")
        return "triton" if device_type == "cuda" else "cpu"
    if _backend == "cpu":
        if device_type != "cpu":
            raise ValueError(
                f"the 'cpu' backend runs CPU tensors and numpy arrays only, got {device_type} tensors; "
                "move them to the CPU or select the 'auto' or 'triton' backend"
            )
        return "cpu"
    if device_type == "cpu" and not interpreting():
        raise ValueError(
            "the 'triton' backend runs CPU tensors only through Triton's interpreter: "
            "set TRITON_INTERPRET=1 before importing triton, or select the 'auto' or 'cpu' backend"
        )
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"{what} is on a {device_type} device: the 'triton' backend runs CUDA tensors")
    return "triton"
