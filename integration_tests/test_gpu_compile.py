"""Every launch setting compiles for an H100/H200 (sm_90) and an A100 (sm_80), checked on a
machine without a GPU, under every Triton of the supported range (issue #17).

The interpreter runs kernels as Python, so it accepts code that Triton's compiler refuses;
this runs the real compiler (and ptxas) through ``tools/compile_for_gpu.py`` and its CI
matrix (every setting the launch heuristic picks, each layout, flag dtype and dtype,
forward, backward, exact and deterministic):

* the pinned Triton: every call of the matrix for sm_90, each launch setting once for sm_80,
  and the settings only tests and benchmarks force (sm_90);
* each other Triton of the range: each launch setting once, for sm_90 and for sm_80, and
  every call Triton 3.6.0 once failed on.

A Triton other than the installed one is installed once (``pip install --target``, from
pip's cache) into rlscan's cache folder and put first on the path; compiled kernels are
cached there too (Triton's own cache, keyed by the kernel's source), so a rerun compiles
only kernels that changed.

Compiling is the slowest part of the suite (about 11 CPU-minutes, in subprocesses, one run
after another): under pytest-xdist, ``integration_tests/conftest.py`` puts this file first
and CI's command keeps file order (``--dist loadfile --no-loadscope-reorder``), so one
worker starts on it at once while the other takes the rest of the suite.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "compile_for_gpu.py"
VERSIONS = ("3.6.0", "3.7.1", "3.8.0", "3.9.0")  # keep in step with pyproject.toml's triton range
PINNED = triton.__version__
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlscan" / "compile"
# a guard against a hung compiler only: a run compiles 15-90 kernels (1-4 s each on a loaded 2-core machine)
TIMEOUT_S = 1800


def _triton_dir(version: str):
    """A folder holding Triton ``version`` (None: the installed one), installed on first use."""
    if version == PINNED:
        return None
    target = CACHE / f"triton-{version}"
    if not (target / "triton" / "__init__.py").exists():
        partial = CACHE / f".triton-{version}.{os.getpid()}"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(partial),
                        f"triton=={version}"], check=True, timeout=TIMEOUT_S)
        os.replace(partial, target)
    return target


def _run(version: str, args: tuple) -> tuple:
    """One run of the script under Triton ``version``: ``(return code, output)``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        folder = _triton_dir(version)
    except Exception as exc:  # noqa: BLE001 - reported by the test that needs this Triton
        return -1, f"installing Triton {version} failed: {exc}"
    if folder is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(folder)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["TRITON_CACHE_DIR"] = str(CACHE / f"kernels-{version}")
    job = subprocess.Popen([sys.executable, str(SCRIPT), *args], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        out = job.communicate(timeout=TIMEOUT_S)[0]
    except subprocess.TimeoutExpired:
        job.kill()
        out = job.communicate()[0] + f"\n(killed after {TIMEOUT_S} s)"
    except BaseException:  # an interrupted test leaves no compiler behind
        job.kill()
        raise
    return job.returncode, out


def _check(runs) -> None:
    """Each of ``runs``, ``[(Triton version, the script's arguments), ...]``, compiles with no failure."""
    for version, args in runs:
        code, out = _run(version, args)
        print(f"$ compile_for_gpu.py {' '.join(args)}  (Triton {version})\n{out}")
        assert code == 0, out[-4000:]
        assert f"Triton {version}: 0 failures" in out, out[-4000:]


def test_every_call_of_the_ci_matrix_compiles_under_the_pinned_triton():
    """sm_90: every call of the matrix; sm_80: each launch setting once."""
    _check([(PINNED, ("--matrix", "ci", "--target", "sm_90")),
            (PINNED, ("--matrix", "ci", "--target", "sm_80", "--once-per-setting"))])


# the range's two ends (the pinned one has its own test): a release between them has never
# failed alone
@pytest.mark.parametrize("version", [v for v in (VERSIONS[0], VERSIONS[-1]) if v != PINNED])
def test_every_launch_setting_compiles(version):
    """Each launch setting the heuristic picks, once per target, and every call Triton 3.6.0 failed on."""
    _check([(version, ("--matrix", "ci", "--once-per-setting", "--target", target)) for target in ("sm_90", "sm_80")])


def test_forced_settings_compile_for_sm90():
    """The settings only tests and benchmarks force, under the pinned Triton."""
    _check([(PINNED, ("--matrix", "small", "--group", "forced", "--target", "sm_90"))])
