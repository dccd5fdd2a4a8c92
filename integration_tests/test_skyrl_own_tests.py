"""SkyRL's own tests of its estimators, run with rlscan's estimators patched in.

``tests/backends/skyrl_train/utils/test_ppo_utils.py`` from SkyRL's repository (its commit in
``shared/peer-tests/skyrl/ABOUT.md``; SkyRL's wheels ship no tests) is kept in the
``shared/`` folder beside the repository, where CI's clone has it too, and runs from there,
unchanged, in a subprocess of its own: a plugin calls :func:`rlscan.adapters.skyrl.patch`
before pytest imports the file (it imports the estimators by name), and one more test,
run first, checks that the names it imported and SkyRL's registry are rlscan's. Its tests
of the registry across Ray processes start Ray; a ``sitecustomize`` gives the processes Ray
starts the stand-ins of ``tools/skyrl_py311.py`` (SkyRL on Python 3.11), as the plugin gives
them to the test process.

It passes, or each test that fails also fails without ``patch()`` (those tests run again
without it, only where some failed). Skipped where SkyRL is not installed; outside CI also where the file is
not found.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
PEER_TESTS = Path("peer-tests") / "skyrl" / "test_ppo_utils.py"

sys.path.insert(0, str(TOOLS))
import skyrl_py311  # noqa: E402

PLUGIN = '''
import rlscan.adapters.skyrl


def pytest_configure(config):
    if {patch}:
        rlscan.adapters.skyrl.patch()
'''

SITECUSTOMIZE = f'''
import sys

sys.path.insert(0, {str(TOOLS)!r})
import skyrl_py311

skyrl_py311.install()
'''

CHECK = '''
import sys

import rlscan.adapters.skyrl as adapter
from skyrl.backends.skyrl_train.utils import ppo_utils


def test_skyrls_tests_call_rlscan():
    assert adapter.is_patched()
    skyrls_tests = sys.modules["test_ppo_utils"]  # collected before any test runs
    for name, (attr, fn) in adapter._ESTIMATORS.items():
        assert getattr(skyrls_tests, attr, fn) is fn and getattr(ppo_utils, attr) is fn
        assert ppo_utils.AdvantageEstimatorRegistry.get(name) is fn
'''


def peer_tests() -> Path | None:
    """SkyRL's test file in the nearest ``shared/`` above the repository: beside CI's clone,
    or beside the folder of a git worktree."""
    for parent in ROOT.parents:
        if (parent / "shared" / PEER_TESTS).is_file():
            return parent / "shared" / PEER_TESTS
    return None


def run(tmp_path: Path, tests: list, patch: bool, name: str) -> tuple:
    """``({test: outcome}, output)`` of one pytest run of ``tests``, each test named within its
    file (``test_x``, ``Class::test_x``)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "rlscan_skyrl_plugin.py").write_text(PLUGIN.format(patch=patch))
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (folder / "pytest.ini").write_text("[pytest]\n")
    # Ray's sessions in a folder of their own (a short path: Ray's socket paths must fit in 107 bytes)
    with tempfile.TemporaryDirectory(prefix="rlscan-ray-", dir="/tmp") as ray_tmp:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
               "PYTHONDONTWRITEBYTECODE": "1", "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": ray_tmp}
        # run from SkyRL's folder (read-only in CI: nothing is written there), so the report names its tests as
        # test_ppo_utils.py::...
        skyrls = peer_tests().parent
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist",
                               "-p", "rlscan_skyrl_plugin", "-c", str(folder / "pytest.ini"), "--rootdir", str(skyrls),
                               *tests], cwd=skyrls, env=env, capture_output=True, text=True, timeout=900)
    # "test_ppo_utils.py::test_x" -> "test_x" (a class's tests keep "Class::")
    outcomes = {re.sub(r"^[^:]*::", "", m[2]): m[1] for m in re.finditer(r"^(PASSED|FAILED|ERROR) (\S+)", proc.stdout,
                                                                          re.M)}
    return outcomes, proc.stdout[-6000:] + proc.stderr[-3000:]


def test_skyrls_own_estimator_tests_pass_with_rlscan(tmp_path):
    if "skyrl" not in skyrl_py311.installed():
        pytest.skip("skyrl is not installed (the README's test command installs skyrl==0.4.0)")
    tests = peer_tests()
    if tests is None:
        assert not os.environ.get("CI"), f"shared/{PEER_TESTS} is not beside the repository"
        pytest.skip(f"shared/{PEER_TESTS} is not beside the repository")
    check = tmp_path / "test_rlscan_is_patched.py"
    check.write_text(CHECK)
    patched, output = run(tmp_path, [str(check), str(tests)], patch=True, name="patched")
    assert patched.pop("test_skyrls_tests_call_rlscan", None) == "PASSED", output
    assert len(patched) >= 34, output  # SkyRL's file at that commit holds 34 tests
    failed = sorted(t for t, outcome in patched.items() if outcome != "PASSED")
    if failed:  # the same tests without rlscan: each must fail there too
        stock, stock_output = run(tmp_path, [f"{tests}::{t}" for t in failed], patch=False, name="stock")
        assert [t for t in failed if stock.get(t) in (None, "PASSED")] == [], \
            f"{output}\n--- the same tests without rlscan:\n{stock_output}"
