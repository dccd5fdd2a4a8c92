"""tools/gpu_check.py's checks, on tiny shapes through the interpreter: a right result
passes, a wrong one fails (issue #17), a repeat call must give the first call's bits and host
arguments beside the device's tensors are checked (issue #40)."""
import sys
from pathlib import Path

import pytest
import torch

import rlscan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import gpu_check  # noqa: E402
from rlscan_testing import path_for  # noqa: E402


@pytest.mark.parametrize("spec", [("gae", "BT1", 2, 17, "fp32", "uint8", "forward"),
                                  ("vtrace", "strided", 3, 9, "fp64", "float", "backward"),
                                  ("vtrace", "TN", 5, 3, "fp32", "bool", "deterministic")])
def test_a_right_result_passes_and_a_wrong_one_fails(spec, monkeypatch):
    device = path_for("triton").device
    with rlscan.use_backend("triton"):
        row = gpu_check.check(spec, device.type)
        assert row["ok"] and row["error"] <= row["tol"] and row["setting"] and not row["fallbacks"], row
        assert row["repeat"] == "bits" and row["classes"], row
        real = gpu_check.make_case

        def off_by_a_little(*args, **kwargs):
            """The case with its op's results 0.1% off on the path under check (not the reference's)."""
            case = real(*args, **kwargs)

            def fn(*a, **k):
                outs = case.fn(*a, **k)
                return tuple(o * (1 + 1e-3) for o in outs) if rlscan.get_backend() == "triton" else outs

            return case._replace(fn=fn)

        monkeypatch.setattr(gpu_check, "make_case", off_by_a_little)
        row = gpu_check.check(spec, device.type)
    assert not row["ok"] and row["error"] > row["tol"], row


def test_a_repeat_call_with_other_bits_fails(monkeypatch):
    """The second call of a check (a replay) must give the first call's bits."""
    device = path_for("triton").device
    real = gpu_check.make_case

    def second_call_off(*args, **kwargs):
        case = real(*args, **kwargs)
        calls = []

        def fn(*a, **k):
            calls.append(1)
            outs = case.fn(*a, **k)
            return tuple(o * (1 + 1e-7 * (len(calls) == 2)) for o in outs)

        return case._replace(fn=fn)

    monkeypatch.setattr(gpu_check, "make_case", second_call_off)
    with rlscan.use_backend("triton"):
        row = gpu_check.check(("gae", "TN", 3, 5, "fp32", "bool", "forward"), device.type)
    assert not row["ok"] and row["repeat"] == "DIFFERS", row


@pytest.mark.parametrize("op", ["gae", "retrace_from_q", "linear_scan"])
def test_host_arguments_beside_the_devices_tensors(op):
    """numpy arrays and CPU tensors beside the case's tensors: refused, naming the argument,
    beside CUDA tensors; on the CPU, the tensors' bits."""
    device = path_for("triton").device
    with rlscan.use_backend("triton"):
        row = gpu_check.check((op, "TN", 3, 4, "fp32", "float", "inputs"), device.type)
    assert row["ok"], row


def test_the_plan_reaches_every_layout_and_flag_dtype():
    specs = gpu_check.plan_cases(small=False, everything=False)
    assert {s[1] for s in specs} == {"TN", "NT", "BT1", "strided", "TN columns"}
    assert {s[5] for s in specs} == {"bool", "uint8", "float"}
    assert {s[4] for s in specs} == {"fp16", "bf16", "fp32", "fp64"}
    assert {(s[2], s[3]) for s in specs} == set(gpu_check.SHAPES) | {c[1:3] for c in gpu_check.CLASS_CHECKS}
    assert {s[6] for s in specs} == set(gpu_check.MODES) and len(specs) < 470
    assert {s[0] for s in specs if s[6] == "inputs"} == set(gpu_check.OPS)


@pytest.mark.parametrize("shapes", ["7x7", "512by2048"])
def test_shapes_with_no_checks_or_misspelt_are_refused(shapes, capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--small", "--shapes", shapes])
    assert "--shapes" in capsys.readouterr().err


def test_the_checks_that_reach_a_settings_class_come_first():
    """class_first: a reordering of the checks whose leading ones reach every class the checks'
    launch plans reach (found without launching), each a class no earlier one reached."""
    specs = [("gae", "TN", 3, 9, "fp32", "bool", "forward"), ("vtrace", "TN", 3, 9, "fp32", "bool", "forward"),
             ("gae", "NT", 3, 9, "fp32", "bool", "forward"), ("gae", "TN", 3, 9, "fp32", "bool", "backward"),
             ("gae", "TN columns", 1, 9, "fp32", "bool", "forward"), ("gae", "TN", 3, 4, "fp32", "float", "inputs")]
    device = path_for("triton").device.type
    with rlscan.use_backend("triton"):
        reached = {spec: set(gpu_check.reached(spec, device)) for spec in specs}
        order, covered, lead = gpu_check.class_first(specs, device)
    assert sorted(order) == sorted(specs) and covered == set().union(*reached.values())
    assert "one environment" in reached[specs[4]] and not reached[specs[5]]
    seen = set()
    for spec in order[:lead]:
        assert reached[spec] - seen
        seen |= reached[spec]
    assert seen == covered


def test_long_checks_take_the_cpu_paths_float64_truth(monkeypatch):
    monkeypatch.setattr(gpu_check, "REFERENCE_MAX_T", 4)
    device = path_for("triton").device
    with rlscan.use_backend("triton"):
        row = gpu_check.check(("gae", "NT", 2, 9, "fp32", "uint8", "forward"), device.type)
    assert row["ok"] and row["truth"] == "cpu path (float64)", row


def test_a_run_cut_by_its_budget_says_so_and_how_to_continue(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check.main(["--small", "--order", "plan", "--start", "2", "--limit", "3", "--budget-s", "0"]) == 3
    out = capsys.readouterr().out
    assert "0 checks, 0 failed, 0 with a fallback, 3 not run (budget)" in out and "--start 2" in out
