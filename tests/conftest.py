"""Test setup: the Triton interpreter when there is no GPU, hypothesis profiles, and the
``path`` fixture that runs a test on both of rlscan's paths.

Hypothesis profiles:

* ``ci`` (the default): bounded, so the whole suite runs in minutes on 2 CPU cores;
* ``long``: many more examples per property, for fuzzing by hand::

      TRITON_INTERPRET=1 python -m pytest tests/test_fuzz.py --hypothesis-profile=long
      RLSCAN_HYPOTHESIS_PROFILE=long TRITON_INTERPRET=1 python -m pytest tests/test_fuzz.py

The number of examples each fuzzing test ran is printed at the end of the session.
"""
import os


def _has_cuda() -> bool:
    import torch  # importing torch does not import triton

    return torch.cuda.is_available()


# Must happen before anything imports triton: the interpreter is chosen at import.
if not _has_cuda():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import rlscan  # noqa: E402
from rlscan_testing import EXAMPLES, path_for  # noqa: E402

_QUIET_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile("ci", max_examples=20, deadline=None, suppress_health_check=_QUIET_CHECKS,
                          print_blob=True)
settings.register_profile("long", max_examples=2000, deadline=None, suppress_health_check=_QUIET_CHECKS,
                          print_blob=True)
settings.load_profile(os.environ.get("RLSCAN_HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(params=["cpu", "triton"])
def path(request):
    """Run the test under the ``cpu`` backend and under the ``triton`` backend (through
    Triton's interpreter on CPU tensors when there is no GPU)."""
    if request.param == "triton":
        from rlscan import _backend

        found, text = _backend.triton_version()
        if found < _backend.MIN_TRITON:
            pytest.skip(f"Triton {text}: rlscan's Triton path needs Triton >= 3.6 (torch 2.9 runs the CPU path)")
    chosen = path_for(request.param)
    with rlscan.use_backend(chosen.backend):
        yield chosen


@pytest.fixture(autouse=True)
def _restore_backend():
    """No test leaks a backend choice into the next."""
    before = rlscan.get_backend()
    yield
    rlscan.set_backend(before)


def pytest_report_header(config):
    profile = settings.get_current_profile_name()
    return f"rlscan: TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '0')}, hypothesis profile {profile!r}"


def pytest_terminal_summary(terminalreporter):
    if not EXAMPLES:
        return
    terminalreporter.write_sep("-", f"hypothesis examples run ({sum(EXAMPLES.values())} in all)")
    for test, n in sorted(EXAMPLES.items()):
        terminalreporter.write_line(f"{n:6d}  {test}")
