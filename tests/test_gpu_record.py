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


def _cell(op, N, T, ours, seed, own=None, layout="nt"):
    return dict(group="seed" if layout == "nt" else "seed_tn", op=op, seed_fn=f"compute_{op}", layout=layout, N=N, T=T,
                truncations=False, shape=f"{op} {layout} {N}x{T}", rlscan_us=ours, rlscan_own_us=own, seed_us=seed,
                seed_best=f"compute_{op}", ratio=ours / seed, won=ours <= seed,
                won_own=None if own is None else own <= seed)


def test_the_seed_headline_counts_rl_triton_cells_won_and_retrace_targets():
    rows = [_cell("gae", 4096, 128, 4.0, 4.8), _cell("vtrace", 4096, 128, 6.4, 4.4, own=4.3),
            _cell("vtrace", 4096, 128, 5.0, 9.0, layout="tn"),
            dict(group="retrace_tables", shape="retrace_from_q A=4 nt 4096x128", label="heuristic", device_us=14.8),
            dict(group="retrace_tables", shape="retrace_from_q A=4 nt 4096x128", label="plain retrace (+tables 4.0)",
                 device_us=6.9, tables_us=4.0)]
    assert gpu_record.table_targets(rows) == [("retrace_from_q A=4 nt 4096x128", 14.8, 10.9, "plain retrace + tables")]
    assert [c["op"] for c in gpu_record.seed_cells(rows)] == ["gae", "vtrace", "vtrace"]
    line = gpu_record._seed_line({"seed.json": rows})
    assert line.startswith("rl-triton [N, T] cells won 1 of 2 (own form 1 of 1 where it differs); lost: "
                           "vtrace nt 4096x128 6.4/4.4"), line
    assert "[T, N] won 1 of 1" in line and "retrace tables met 0 of 1" in line
    missing = gpu_record._seed_line({"seed.json": [dict(group="seed", missing="rl-triton ... is not installed")]})
    assert missing == "rl-triton not installed: seed not run"


def test_records_before_rl_triton_label_their_stand_ins():
    rows = [dict(shape="gae nt 4096x128", label="heuristic", device_us=4.0),
            dict(shape="gae nt 4096x128", label="whole-row stand-in", device_us=4.8)]
    assert gpu_record.table_targets(rows) == [("gae nt 4096x128", 4.0, 4.8, "stand-in: whole-row kernel (not rl-triton)")]


def test_every_step_fits_its_share_of_the_budget():
    """The shares of a 540 s run add up to what is left after the script's reserve, each step is
    told its share less a margin through a budget option its tool has, and every share is at
    least the step's minimum."""
    steps = gpu_record.steps()
    shares = gpu_record.shares(steps, 540 - gpu_record.RESERVE_S)
    assert abs(sum(shares) - (540 - gpu_record.RESERVE_S)) < 1e-6
    for step, share in zip(steps, shares):
        assert step.min_s <= share and 10 <= share - step.margin_s < share, step.name
        tool = step.argv[1] if step.argv[1].endswith(".py") else str(TOOLS.parent / "core" / "cli.py")
        assert f'"{step.budget_flag}"' in Path(tool).read_text(), (step.name, step.budget_flag)
    assert [s.name for s in steps][:2] == ["gpu_check", "seed_compare"]
    assert "seed" in steps[1].argv and "--limit" in steps[0].argv


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


def test_rlscan_bench_starts_no_cell_past_its_budget(tmp_path, capsys, monkeypatch):
    """``rlscan bench --budget-s`` (the bench steps' budget): a cell past it is not started, and
    bench.json lists it."""
    import types

    from rlscan import cli
    from rlscan.bench import floors

    monkeypatch.setattr(floors, "measure", lambda *a: types.SimpleNamespace(launch_s=None, bandwidth=1e10, detail={}))
    argv = ["bench", "--quick", "--ops", "gae", "--shapes", "8x16", "--budget-s", "1e-6", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["cells"] == [] and doc["not_run"] == [dict(op="gae", N=8, T=16)]
    assert "not run, past --budget-s" in capsys.readouterr().out
