"""A pytest plugin that runs OpenRLHF's own ``tests/test_reward_shaping.py``, as its wheel ships
it, twice per test: as shipped (``stock``) and with rlscan switched in (``rlscan``).

That file never imports ``openrlhf.trainer.ppo_utils.experience_maker``: its ``maker_module``
fixture executes the wheel's ``experience_maker.py`` as a new module, from the file's path
(``importlib.util.spec_from_file_location``), for every test. ``rlscan.adapters.openrlhf.patch()``
changes the imported module's class, which these tests never see. So this plugin adds an
autouse fixture, parametrized over the two modes, that takes the test's own copy first
(``request.getfixturevalue("maker_module")``, the object the test then receives) and, in the
``rlscan`` mode, calls ``patch(module=copy)``; ``unpatch(module=copy)`` at teardown.

Each test must show which code ran. The adapter reaches rlscan through ``rlscan.gae`` and
``rlscan.discounted_returns`` only; the plugin counts their calls during the test. A passing
``rlscan`` test that made none fails, and so does a passing ``stock`` test that made some. The
count goes into the test's ``user_properties`` (``rlscan_calls``, in a JUnit XML report),
whatever the test's outcome.

OpenRLHF's modules import DeepSpeed, flash-attn and vLLM, CUDA builds only; where they are not
installed, ``tools/openrlhf_timing.py``'s stand-ins answer those imports for the session.

With ``integration_tests/`` and ``tools/`` on ``PYTHONPATH``::

    python -m pytest -p openrlhf_plugin <site-packages>/tests/test_reward_shaping.py

``integration_tests/test_openrlhf_own_tests.py`` runs it so and compares the modes per test.
"""
from __future__ import annotations

import functools

import pytest

import rlscan
import rlscan.adapters.openrlhf as adapter
from openrlhf_timing import cuda_stand_ins

#: the fixture of OpenRLHF's tests that loads their private copy of the experience maker
FIXTURE = "maker_module"
#: what the adapter calls in rlscan: each call is counted
CALLED = ("gae", "discounted_returns")
MODES = ("stock", "rlscan")

_calls = pytest.StashKey[list]()
_mode = pytest.StashKey[str]()
_stand_ins = pytest.StashKey[object]()


def pytest_configure(config):
    stand_ins = cuda_stand_ins()
    stand_ins.__enter__()
    config.stash[_stand_ins] = stand_ins


def pytest_unconfigure(config):
    stand_ins = config.stash.get(_stand_ins, None)
    if stand_ins is not None:
        stand_ins.__exit__(None, None, None)


def _counted(fn, calls: list):
    @functools.wraps(fn)
    def counting(*args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)

    return counting


@pytest.fixture(autouse=True, params=MODES)
def rlscan_switch(request):
    """``stock``: the test as shipped. ``rlscan``: its copy of the experience maker patched."""
    if FIXTURE not in request.fixturenames:
        pytest.fail(f"this plugin switches rlscan into the experience maker that the {FIXTURE!r} fixture "
                    f"loads; {request.node.nodeid} does not use it")
    module = request.getfixturevalue(FIXTURE)
    calls: list = []
    request.node.stash[_calls], request.node.stash[_mode] = calls, request.param
    with pytest.MonkeyPatch.context() as mp:
        for name in CALLED:
            mp.setattr(rlscan, name, _counted(getattr(rlscan, name), calls))
        if request.param == "rlscan":
            adapter.patch(module=module)
            assert adapter.is_patched(module=module)
        try:
            yield
        finally:
            adapter.unpatch(module=module)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    calls, mode = item.stash.get(_calls, None), item.stash.get(_mode, None)
    try:
        result = yield  # a failing test fails as it is
    finally:
        if calls is not None:
            item.user_properties.append(("rlscan_calls", len(calls)))
    if calls is None:
        return result
    if mode == "rlscan" and not calls:
        pytest.fail("rlscan was switched into this test's experience maker, yet none of "
                    f"rlscan.{', rlscan.'.join(CALLED)} ran: the test's copy was not patched", pytrace=False)
    if mode == "stock" and calls:
        pytest.fail(f"the stock run called rlscan ({', '.join(calls)}): the patch leaked into it", pytrace=False)
    return result
