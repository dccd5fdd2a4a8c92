"""OpenRLHF's own reward-shaping tests, run as its wheel ships them, stock and with rlscan.

The OpenRLHF wheel ships its tests (a top-level ``tests`` package in site-packages).
``tests/test_reward_shaping.py`` runs every advantage estimator through the experience
maker's ``compute_advantages_and_returns``, and so through both loops rlscan replaces; it
loads its own copy of ``experience_maker.py`` from the file for each test, out of
``patch()``'s reach. It runs here unchanged, from where the wheel put it, in a subprocess
with ``integration_tests/openrlhf_plugin.py``: each test twice, as shipped and with
``patch(module=<the test's copy>)``, counting rlscan's calls in each. Every test must have
the same outcome in both modes, every patched test must have called rlscan, and no stock
test may have. Skipped where OpenRLHF is not installed.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SHIPPED = "tests/test_reward_shaping.py"
#: OpenRLHF 0.11.2's file holds 34 tests; a later release of the supported range may hold more
AT_LEAST = 34

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openrlhf") is None, reason="OpenRLHF is not installed")


def _shipped() -> Path:
    files = [f for f in metadata.files("openrlhf") or [] if str(f) == SHIPPED]
    assert files, f"the OpenRLHF wheel no longer ships {SHIPPED}"
    return Path(files[0].locate())


def _outcomes(report: Path) -> dict:
    """``{(test id without the mode, mode): (outcome, rlscan calls)}`` from a JUnit XML report."""
    found = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name, params = case.get("name").partition("[")[::2]
        params = params.rstrip("]").split("-")
        modes = [m for m in ("stock", "rlscan") if m in params]
        assert len(modes) == 1, f"{case.get('name')}: openrlhf_plugin did not give it one mode"
        mode = modes[0]
        params.remove(mode)
        test = f"{name}[{'-'.join(params)}]" if params else name
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        calls = {p.get("name"): p.get("value") for p in case.iter("property")}.get("rlscan_calls")
        assert (test, mode) not in found, f"{test} ran twice in the {mode} mode"
        found[test, mode] = (outcome, None if calls is None else int(calls))
    return found


def test_openrlhfs_own_reward_shaping_tests_match_stock_with_rlscan(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's settings, which the venv may sit under
    report = tmp_path / "report.xml"
    # only this plugin: the installed ones (hypothesis, xdist, ...) cost seconds to import and add nothing here
    path = [str(HERE), str(HERE.parent / "tools"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=os.pathsep.join(path))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "openrlhf_plugin",
                           "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path),
                           "-W", "error::rlscan._triton.launch.CompileFallbackWarning",
                           f"--junitxml={report}", str(_shipped())],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert report.exists(), tail
    found = _outcomes(report)
    tests = sorted({test for test, _ in found})
    assert len(tests) >= AT_LEAST, tail
    table = "\n".join(f"{test}: stock {found.get((test, 'stock'))}, rlscan {found.get((test, 'rlscan'))}"
                      for test in tests)
    for test in tests:
        assert (test, "stock") in found and (test, "rlscan") in found, f"{test} ran in one mode only\n{table}"
        (stock, stock_calls), (ours, our_calls) = found[test, "stock"], found[test, "rlscan"]
        assert ours == stock, f"{test}: {ours} with rlscan, {stock} as shipped\n{table}\n{tail}"
        # the plugin records the count even where the test itself failed
        assert our_calls, f"{test}: rlscan never ran in the patched copy\n{table}\n{tail}"
        assert stock_calls == 0, f"{test}: rlscan ran in the stock copy\n{table}\n{tail}"
