"""tools/gpu_record.py: its commands run in their dry form on the CPU, and its headlines read
the tools' JSON."""
import json
import os
import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))
import gpu_record  # noqa: E402


def test_seed_targets_compare_the_heuristic_with_the_stand_in_and_retrace_with_its_parts():
    rows = [dict(shape="gae nt 4096x128", label="heuristic", device_us=4.0),
            dict(shape="gae nt 4096x128", label="whole-row stand-in", device_us=4.8),
            dict(shape="retrace_from_q A=4 nt 4096x128", label="heuristic", device_us=14.8),
            dict(shape="retrace_from_q A=4 nt 4096x128", label="plain retrace (+tables 4.0)", device_us=6.9,
                 tables_us=4.0),
            dict(shape="vtrace nt 4096x128", label="heuristic", device_us=6.4),
            dict(shape="td_lambda nt 4096x128", label="heuristic", device_us=4.0)]
    assert gpu_record.seed_targets(rows) == [("gae nt 4096x128", 4.0, 4.8, "whole-row stand-in"),
                                             ("retrace_from_q A=4 nt 4096x128", 14.8, 10.9, "plain retrace + tables")]
    rows.append(dict(shape="vtrace nt 4096x128", label="seed's design (row tile)", device_us=4.5))
    assert gpu_record.seed_targets(rows)[-1] == ("vtrace nt 4096x128", 6.4, 4.5, "seed's design (row tile)")
    line = gpu_record._seed_line({"seed.json": rows})
    assert "targets met 1 of 3" in line and "retrace_from_q A=4 nt 4096x128 14.8/10.9" in line


def test_dry_run_writes_one_json_per_step(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path))
    proc = subprocess.run([sys.executable, str(TOOLS / "gpu_record.py"), "--dry", "--steps", "gpu_check,leanrl"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = json.loads((tmp_path / "gpu_check.json").read_text())
    assert check["rc"] == 0 and check["headline"].startswith("3 checks, 0 failed")
    assert check["result"]["gpu_check.json"]["rows"]
    assert json.loads((tmp_path / "leanrl.json").read_text())["rc"] == 0
    assert "| gpu_check | 0 |" in proc.stdout


def test_unknown_steps_are_refused():
    proc = subprocess.run([sys.executable, str(TOOLS / "gpu_record.py"), "--dry", "--steps", "nope"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--steps: unknown ['nope']" in proc.stderr
