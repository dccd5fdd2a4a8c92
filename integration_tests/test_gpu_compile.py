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

Compiling is the slowest part of the suite, and it needs nothing from the tests before it:
when collection ends, ``integration_tests/conftest.py`` starts the compile runs of the
selected tests here in one background worker, so that they overlap the rest of the suite
(under pytest-xdist, whose workers already share the cores, it does not). A test here waits for its own runs and, while
it waits, runs queued ones itself; each test checks only its own runs' output.
"""
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import triton

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "compile_for_gpu.py"
VERSIONS = ("3.6.0", "3.7.1", "3.8.0", "3.9.0")  # keep in step with pyproject.toml's triton range
PINNED = triton.__version__
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlscan" / "compile"
# a guard against a hung compiler only: a run compiles 15-90 kernels (1-4 s each on a loaded 2-core machine)
TIMEOUT_S = 1800


def runs_of(test: str, version: str = PINNED) -> list:
    """The script's runs that ``test`` checks: ``[(Triton version, arguments), ...]``."""
    if test == "test_every_call_of_the_ci_matrix_compiles_under_the_pinned_triton":
        return [(PINNED, ("--matrix", "ci", "--target", "sm_90")),
                (PINNED, ("--matrix", "ci", "--target", "sm_80", "--once-per-setting"))]
    if test == "test_every_launch_setting_compiles":
        return [(version, ("--matrix", "ci", "--once-per-setting", "--target", target))
                for target in ("sm_90", "sm_80")]
    if test == "test_forced_settings_compile_for_sm90":
        return [(PINNED, ("--matrix", "small", "--group", "forced", "--target", "sm_90"))]
    raise ValueError(f"no compile runs for {test!r}")


def _triton_dir(version: str):
    """A folder holding Triton ``version`` (None: the installed one), installed on first use."""
    if version == PINNED:
        return None
    target = CACHE / f"triton-{version}"
    if not (target / "triton" / "__init__.py").exists():
        partial = CACHE / f".triton-{version}.{os.getpid()}.{threading.get_ident()}"
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
    with _QUEUE.lock:
        _QUEUE.procs.add(job)
    try:
        out = job.communicate(timeout=TIMEOUT_S)[0]
    except subprocess.TimeoutExpired:
        job.kill()
        out = job.communicate()[0] + f"\n(killed after {TIMEOUT_S} s)"
    except BaseException:  # an interrupted test leaves no compiler behind
        job.kill()
        raise
    finally:
        with _QUEUE.lock:
            _QUEUE.procs.discard(job)
    return job.returncode, out


class _Runs:
    """Compile runs in order of need, each run once, by a background worker or by the test
    waiting for it (whichever takes it first)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.pending: list = []  # runs not started, in the order the tests need them
        self.started: set = set()
        self.results: dict = {}  # run -> (return code, output)
        self.procs: set = set()
        self.stopped = False

    def add(self, runs) -> None:
        with self.lock:
            self.pending += [r for r in runs if r not in self.started and r not in self.pending]

    def _take(self, prefer=()):
        """The next pending run (one of ``prefer`` first), marked started; None when none is left."""
        with self.lock:
            if self.stopped or not self.pending:
                return None
            run = next((r for r in self.pending if r in prefer), self.pending[0])
            self.pending.remove(run)
            self.started.add(run)
            return run

    def _do(self, run) -> None:
        result = _run(*run)
        with self.lock:
            self.results[run] = result
            self.changed.notify_all()

    def work(self) -> None:
        """Run pending runs until none is left (the background worker's loop)."""
        while (run := self._take()) is not None:
            self._do(run)

    def wait(self, runs) -> list:
        """The results of ``runs``, running pending ones (``runs`` first) while waiting."""
        self.add(runs)
        while True:
            with self.lock:
                if self.stopped:
                    raise RuntimeError("the compile runs were stopped")
                if all(r in self.results for r in runs):
                    return [self.results[r] for r in runs]
                nothing_to_take = not self.pending
                if nothing_to_take:  # every run left is running elsewhere
                    self.changed.wait(timeout=5)
            if not nothing_to_take and (run := self._take(prefer=runs)) is not None:
                self._do(run)

    def stop(self) -> None:
        """Start nothing more and kill what runs (the session ended early)."""
        with self.lock:
            self.stopped = True
            self.pending.clear()
            for job in self.procs:
                job.kill()


_QUEUE = _Runs()


def compile_in_background(items) -> None:
    """Queue the runs of the selected tests of this module and start one worker on them."""
    for item in items:
        params = getattr(item, "callspec", None)
        _QUEUE.add(runs_of(item.originalname, **(params.params if params else {})))
    threading.Thread(target=_QUEUE.work, name="compile matrix", daemon=True).start()


def stop_compiles() -> None:
    _QUEUE.stop()


def _check(runs) -> None:
    for (version, args), (code, out) in zip(runs, _QUEUE.wait(runs)):
        print(f"$ compile_for_gpu.py {' '.join(args)}  (Triton {version})\n{out}")
        assert code == 0, out[-4000:]
        assert f"Triton {version}: 0 failures" in out, out[-4000:]


def test_every_call_of_the_ci_matrix_compiles_under_the_pinned_triton():
    """sm_90: every call of the matrix; sm_80: each launch setting once."""
    _check(runs_of("test_every_call_of_the_ci_matrix_compiles_under_the_pinned_triton"))


@pytest.mark.parametrize("version", [v for v in VERSIONS if v != PINNED])
def test_every_launch_setting_compiles(version):
    """Each launch setting the heuristic picks, once per target, and every call Triton 3.6.0 failed on."""
    _check(runs_of("test_every_launch_setting_compiles", version))


def test_forced_settings_compile_for_sm90():
    """The settings only tests and benchmarks force, under the pinned Triton."""
    _check(runs_of("test_forced_settings_compile_for_sm90"))
