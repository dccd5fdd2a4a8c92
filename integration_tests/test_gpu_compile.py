"""Every launch setting compiles for an H100/H200 (sm_90) and an A100 (sm_80) under every
Triton of the supported range, checked on a machine without a GPU (issue #17).

The interpreter runs kernels as Python, so it accepts code that Triton's compiler refuses;
this runs the real compiler (and ptxas) through ``tools/compile_for_gpu.py``: its CI matrix
(every setting the launch heuristic picks, each layout, flag dtype and dtype, forward,
backward, exact and deterministic), in full for the pinned Triton and sm_90, and each setting
once for sm_80 and under the other Tritons; one bounded case per Triton (and target). A Triton other than the
installed one is installed once (``pip install --target``, from pip's cache) into rlscan's
cache folder and put first on the path; compiled kernels are cached there too (Triton's own
cache, keyed by the kernel's source), so a rerun compiles only kernels that changed.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "compile_for_gpu.py"
VERSIONS = ("3.6.0", "3.7.1", "3.8.0", "3.9.0")  # keep in step with pyproject.toml's triton range
TARGETS = ("sm_90", "sm_80")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlscan" / "compile"
# a guard against a hung compiler only: a case compiles 36-76 kernels (1-4 s each on a loaded 2-core machine)
TIMEOUT_S = 1800


def _triton_dir(version: str):
    """A folder holding Triton ``version`` (None: the installed one), installed on first use."""
    if version == triton.__version__:
        return None
    target = CACHE / f"triton-{version}"
    if not (target / "triton" / "__init__.py").exists():
        partial = CACHE / f".triton-{version}.{os.getpid()}"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(partial),
                        f"triton=={version}"], check=True, timeout=TIMEOUT_S)
        os.replace(partial, target)
    return target


def _compile(version: str, *runs) -> None:
    """Run the script once per argument list in ``runs``, concurrently (one per target: the
    compiles of two targets share nothing), under Triton ``version``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    folder = _triton_dir(version)
    if folder is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(folder)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["TRITON_CACHE_DIR"] = str(CACHE / f"kernels-{version}")
    jobs = [subprocess.Popen([sys.executable, str(SCRIPT), *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for args in runs]
    try:
        outputs = [job.communicate(timeout=TIMEOUT_S)[0] for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
    for job, out in zip(jobs, outputs):
        print(out)
        assert job.returncode == 0, out[-4000:]
        assert f"Triton {version}: 0 failures" in out, out[-4000:]


def test_every_call_of_the_ci_matrix_compiles_under_the_pinned_triton():
    """sm_90: every call of the matrix; sm_80: each launch setting once."""
    _compile(triton.__version__, ("--matrix", "ci", "--target", "sm_90"),
             ("--matrix", "ci", "--target", "sm_80", "--once-per-setting"))


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != triton.__version__])
def test_every_launch_setting_compiles(version):
    """Each launch setting the heuristic picks, once per target, and every call Triton 3.6.0 failed on."""
    _compile(version, *[("--matrix", "ci", "--once-per-setting", "--target", t) for t in TARGETS])


def test_forced_settings_compile_for_sm90():
    """The settings only tests and benchmarks force, under the pinned Triton."""
    _compile(triton.__version__, ("--matrix", "small", "--group", "forced", "--target", "sm_90"))
