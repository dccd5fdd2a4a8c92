"""tools/gpu_check.py's checks, on tiny shapes through the interpreter: a right result
passes, a wrong one fails (issue #17)."""
import sys
from pathlib import Path

import pytest
import torch

import rlscan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import gpu_check  # noqa: E402
from rlscan_testing import path_for  # noqa: E402


@pytest.mark.parametrize("spec", [("gae", "BT1", 2, 17, "fp32", "uint8", False),
                                  ("vtrace", "strided", 3, 9, "fp64", "float", True)])
def test_a_right_result_passes_and_a_wrong_one_fails(spec, monkeypatch):
    device = path_for("triton").device
    with rlscan.use_backend("triton"):
        row = gpu_check.check(spec, device.type)
        assert row["ok"] and row["error"] <= row["tol"] and row["setting"] and not row["fallbacks"], row
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


def test_the_plan_reaches_every_layout_and_flag_dtype():
    specs = gpu_check.plan_cases(small=False, everything=False)
    assert {s[1] for s in specs} == {"TN", "NT", "BT1", "strided"}
    assert {s[5] for s in specs} == {"bool", "uint8", "float"}
    assert {s[4] for s in specs} == {"fp16", "bf16", "fp32", "fp64"}
    assert {(s[2], s[3]) for s in specs} == set(gpu_check.SHAPES)
    assert any(s[6] for s in specs) and len(specs) < 450


@pytest.mark.parametrize("shapes", ["7x7", "512by2048"])
def test_shapes_with_no_checks_or_misspelt_are_refused(shapes, capsys):
    with pytest.raises(SystemExit):
        gpu_check.main(["--small", "--shapes", shapes])
    assert "--shapes" in capsys.readouterr().err
