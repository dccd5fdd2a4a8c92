"""rlscan's core tests under an older torch of the supported range (2.9.1, 2.10), on a machine
with no GPU::

    python tools/torch_range_check.py 2.10.0          # the venv is made once, then reused
    python tools/torch_range_check.py 2.9.1
    python tools/torch_range_check.py 2.10.0 --venv DIR --files tests/test_packed.py

PyPI has CUDA builds of torch only (a CPU wheel of these versions is not on it). The CUDA
build runs on the CPU where the CUDA libraries its import loads are there: this installs
torch with ``--no-deps``, then only those libraries' wheels (torch's own pins, less NVRTC,
NVTX and cuSOLVER, which import does not load), torch's Triton, numba and the test tools,
and rlscan from this checkout (editable). About 3.4 GB of wheels; on a 2-core machine about
50 s to download and 80 s to install (measured on torch 2.10.0), which is why CI does not run
it: the command prints its own times.

The tests: the bounded subset in ``FILES`` (the ops against their references, ``torch.compile``
and the custom ops, packed sequences and nested tensors, the gloo ranks, the LLM layouts,
``masked_normalize``), on two pytest-xdist workers, with ``TRITON_INTERPRET=1``; numpy below
1.25 where torch's Triton is older than 3.7 (their interpreters take ``int()`` of one-element
arrays). Under Triton 3.5 (torch 2.9) the Triton path refuses to run
(``rlscan._backend.MIN_TRITON``): its tests are left out (``-k "not triton"``), and the
``path`` fixture skips its Triton half.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("tests/test_correctness.py", "tests/test_compile.py", "tests/test_packed.py", "tests/test_distributed.py",
         "tests/test_normalize.py", "tests/test_llm.py")
#: torch's CUDA libraries that ``import torch`` does not load (left out)
NOT_LOADED = ("nvidia-cuda-nvrtc", "nvidia-nvtx", "nvidia-cusolver", "cuda-bindings")
TOOLS = ("numba", "pytest", "pytest-xdist", "hypothesis", "setuptools>=68", "filelock", "typing-extensions", "sympy",
         "networkx", "jinja2", "fsspec")


def _pip(python: Path, *args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", *args], check=True)


def make(venv: Path, version: str) -> dict:
    """A venv with torch ``version`` (CUDA build, the libraries its import loads), its Triton
    and rlscan; returns the seconds each step took."""
    times = {}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    _pip(python, "--no-deps", f"torch=={version}")
    times["torch"] = time.perf_counter() - start
    requires = subprocess.run([str(python), "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('torch')))"],
                              check=True, capture_output=True, text=True).stdout.splitlines()
    pins = [r.split(";")[0].strip() for r in requires if "platform_system == \"Linux\"" in r]
    libraries = [p for p in pins if p.startswith("nvidia-") and not p.startswith(NOT_LOADED)]
    triton = [p for p in pins if p.startswith("triton")]
    start = time.perf_counter()
    _pip(python, "--no-deps", *libraries)
    times["CUDA libraries"] = time.perf_counter() - start
    start = time.perf_counter()
    # the interpreters of Triton 3.5 and 3.6 take int() of one-element arrays, which numpy 1.25
    # deprecates (a warning the tests make an error) and 2.4 refuses
    old_interpreter = any(tuple(int(p) for p in t.split("==")[1].split(".")[:2]) < (3, 7) for t in triton)
    _pip(python, *triton, *TOOLS, *(["numpy<1.25"] if old_interpreter else []))
    _pip(python, "--no-deps", "--no-build-isolation", "-e", str(ROOT))
    times["Triton, numba, tests, rlscan"] = time.perf_counter() - start
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="torch's version, e.g. 2.10.0 or 2.9.1")
    parser.add_argument("--venv", type=Path, help="the venv to make or reuse (default: ~/.cache/rlscan/torch-VERSION)")
    parser.add_argument("--files", nargs="*", default=list(FILES))
    args = parser.parse_args()
    venv = args.venv or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlscan" / \
        f"torch-{args.version}"
    if not (venv / "bin" / "python").exists():
        for step, seconds in make(venv, args.version).items():
            print(f"installed {step} in {seconds:.0f} s", flush=True)
    python = venv / "bin" / "python"
    found = subprocess.run([str(python), "-c", "import torch, triton; print(torch.__version__, triton.__version__)"],
                           check=True, capture_output=True, text=True).stdout.split()
    print(f"torch {found[0]}, Triton {found[1]}", flush=True)
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", *args.files]
    if tuple(int(p) for p in found[1].split(".")[:2]) < (3, 6):
        command += ["-k", "not triton"]
    start = time.perf_counter()
    code = subprocess.run(command, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"}).returncode
    print(f"tests: {time.perf_counter() - start:.0f} s, exit {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
