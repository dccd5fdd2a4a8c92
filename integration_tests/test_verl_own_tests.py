"""verl's own tests of its advantage estimators, run with rlscan's estimators patched in.

The verl wheel ships its CPU tests (a top-level ``tests`` package in site-packages). Two of
them exercise the estimators rlscan replaces: ``tests/trainer/ppo/test_core_algos_on_cpu.py``
(verl's registry, multi-turn GAE, GRPO and RLOO against verl's vectorised versions) and
``tests/trainer/ppo/test_reinforce_pp_multiturn_on_cpu.py`` (REINFORCE++ across
observation spans, verl 0.9's semantics). They run here in a subprocess of their own,
unchanged, with a conftest that calls :func:`rlscan.adapters.verl.patch` before pytest
imports them (they import the estimators by name), and one more test that checks the
names they imported are rlscan's. Skipped where verl is not installed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata

import pytest

VERL_TESTS = ("tests/trainer/ppo/test_core_algos_on_cpu.py", "tests/trainer/ppo/test_reinforce_pp_multiturn_on_cpu.py")

CONFTEST = '''
import rlscan.adapters.verl


def pytest_configure(config):
    rlscan.adapters.verl.patch()
'''

CHECK = '''
import rlscan.adapters.verl as adapter
import test_core_algos_on_cpu
import test_reinforce_pp_multiturn_on_cpu
from verl.trainer.ppo import core_algos


def test_verls_tests_call_rlscan():
    for name in ("compute_gae_advantage_return", "compute_grpo_outcome_advantage", "compute_rloo_outcome_advantage"):
        assert getattr(test_core_algos_on_cpu, name) is getattr(adapter, name)
        assert getattr(core_algos, name) is getattr(adapter, name)
    fn = test_reinforce_pp_multiturn_on_cpu.compute_reinforce_plus_plus_outcome_advantage
    assert fn is adapter.compute_reinforce_plus_plus_outcome_advantage
'''


def _shipped_tests() -> dict:
    """verl's test files, by their path in the wheel, where it installed them."""
    try:
        files = metadata.files("verl") or []
    except metadata.PackageNotFoundError:
        return {}
    return {str(f): f.locate() for f in files if str(f) in VERL_TESTS}


def test_verls_own_estimator_tests_pass_with_rlscan(tmp_path):
    pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed (the README's test command "
                                                              "installs verl==0.9.1)")
    shipped = _shipped_tests()
    assert sorted(shipped) == sorted(VERL_TESTS), f"the verl wheel's tests moved: found {sorted(shipped)}"
    for path in shipped.values():
        shutil.copy(path, tmp_path / os.path.basename(path))
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_rlscan_is_patched.py").write_text(CHECK)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    passed = re.search(r"(\d+) passed", proc.stdout)
    # verl 0.9.1's two files hold 23 and 6 tests; the check is one more
    assert passed is not None and int(passed[1]) >= 30, tail
    assert " failed" not in proc.stdout and " error" not in proc.stdout, tail
