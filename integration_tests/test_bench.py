"""``rlscan bench``: the command runs end to end, and its alternatives compute the ops.

The first test runs the real command line (``--quick`` on a tiny grid) and reads back
what it wrote. The others check the parts a CPU-only CI run would otherwise never
exercise: the loops and the doubling scan (the ``torch.compile`` alternative, which
times only on a GPU) against the float64 reference, and the rule that a wrong result
is reported and never timed.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from rlscan import reference
from rlscan.bench import alternatives, cases, check, doubling, loops
from rlscan.bench import host as host_bench
from rlscan.bench.measure import CompileLedger, Settings, measure

OPS = ("gae", "vtrace", "retrace", "eligibility_traces", "linear_scan")


def test_quick_run_writes_json_and_png(tmp_path):
    out = tmp_path / "bench"
    cmd = [sys.executable, "-m", "rlscan.cli", "bench", "--quick", "--ops", ",".join(OPS),
           "--shapes", "8x16,1x20000", "--out", str(out)]
    env = dict(os.environ, COLUMNS="200")
    env.pop("TRITON_INTERPRET", None)  # the bench times real paths: numba on the CPU, Triton on a GPU
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    doc = json.loads((out / "bench.json").read_text())
    if importlib.util.find_spec("matplotlib") is not None:
        png = (out / "bench.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000

    for key in ("date", "device", "versions", "method", "floors", "cells", "summary", "settings"):
        assert key in doc, key
    assert doc["versions"]["torch"] == torch.__version__
    assert doc["floors"]["copy_bandwidth_GBps"] > 0
    for key in ("full_call", "device", "check", "floor"):
        assert doc["method"][key]
    if not torch.cuda.is_available():
        assert doc["device"]["type"] == "cpu"
        assert "No CUDA GPU" in proc.stdout

    cells = doc["cells"]
    assert [(c["op"], c["N"], c["T"]) for c in cells] == [(op, n, t) for op in OPS for n, t in ((8, 16), (1, 20000))]
    for c in cells:
        rl = c["impls"]["rlscan"]
        assert rl["status"] == "ok", c
        assert rl["rel_err"] <= check.TOLERANCE[torch.float32]
        assert rl["full_us"] > 0 and c["floor_us"] > 0
        assert c["check"] == (check.REFERENCE if c["T"] <= check.REFERENCE_MAX_T else check.EXACT_F64)
        loop = c["impls"]["loop_numpy"]
        assert loop["status"] in ("ok", "skipped"), loop
        if loop["status"] == "ok":
            assert loop["rlscan_speedup"] == pytest.approx(loop["full_us"] / rl["full_us"])
        else:
            assert loop["estimate_s"] > doc["settings"]["cap_s"]
    gae_small = cells[0]["impls"]
    assert gae_small["loop_torch"]["status"] == "ok"
    # moved bytes: rewards and values (4 B), terminated (1 B), bootstrap (4 B per env), two outputs (4 B)
    assert cells[0]["moved_bytes"] == 8 * 16 * (4 + 4 + 1) + 8 * 4 + 2 * 8 * 16 * 4


def test_merge_joins_runs_of_one_grid(tmp_path):
    """``--merge``: the ops of one grid run in two calls give one report with every cell, the
    summary recomputed and the plot drawn; runs from another machine are refused."""
    from rlscan import cli

    ops = ("gae", "vtrace")
    parts = []
    for op in ops:
        out = tmp_path / op
        assert cli.main(["bench", "--quick", "--ops", op, "--shapes", "8x16", "--alternatives", "loop_numpy",
                         "--repeat", "1", "--out", str(out)]) == 0
        parts.append(str(out / "bench.json"))
    merged = tmp_path / "merged"
    assert cli.main(["bench", "--merge", *parts, "--out", str(merged)]) == 0
    doc = json.loads((merged / "bench.json").read_text())
    assert [(c["op"], c["N"], c["T"]) for c in doc["cells"]] == [(op, 8, 16) for op in ops]
    assert set(doc["summary"]) == set(ops) and doc["options"]["ops"] == list(ops)
    first = json.loads(open(parts[0]).read())
    assert doc["cells"][0] == first["cells"][0]
    if importlib.util.find_spec("matplotlib") is not None:
        assert (merged / "bench.png").read_bytes()[:4] == b"\x89PNG"

    other = json.loads(open(parts[1]).read())
    other["device"] = dict(other["device"], name="another GPU")
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert cli.main(["bench", "--merge", parts[0], str(tmp_path / "other.json"), "--out", str(tmp_path / "x")]) == 2


def test_the_plot_draws_the_alternatives_that_ran():
    """``--alternatives exact`` (no loop, no compiled scan) still draws a line per N."""
    from rlscan.bench import report

    def cell(**full_us):
        impls = {key: dict(status="ok", full_us=us) for key, us in full_us.items()}
        return dict(op="gae", N=8, T=16, impls=impls)

    preferred = ("loop_torch", "compile", "exact")
    assert report.lines_to_draw([cell(rlscan=2.0, exact=4.0)], preferred) == ("exact", None)
    assert report.lines_to_draw([cell(rlscan=2.0, exact=4.0, compile=8.0)], preferred) == ("compile", "exact")
    assert report.lines_to_draw([cell(rlscan=2.0, loop_torch=1.0, compile=8.0, exact=4.0)], preferred) == (
        "loop_torch", "compile")
    assert report.lines_to_draw([cell(rlscan=2.0)], preferred) == (None, None)
    # the runner lists its preferred alternatives, then all of them: a key is drawn once
    assert report.lines_to_draw([cell(rlscan=2.0, compile=8.0)], preferred + ("compile", "exact")) == (
        "compile", None)


@pytest.mark.parametrize("layout", ["tn", "nt"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("op", list(cases.CASES))
def test_alternatives_match_the_reference(op, dtype, layout):
    case = cases.CASES[op]
    for T, N in ((1, 3), (37, 5)):
        d = cases.make_inputs(case, T, N, dtype, layout, "cpu", seed=3)
        want = tuple(o.to(torch.float64) for o in cases.outputs_of(case.call(reference, d)))
        computed = {
            "doubling": doubling.casting(doubling.SCANS[op], dtype)(d, case.params),
            "loop_torch": alternatives.BY_KEY["loop_torch"].build(case, dtype).run(d),
            "loop_numpy": loops.LOOPS[op](alternatives._to_numpy(d), case.params, loops.NumpyOps),
        }
        for name, got in computed.items():
            err = check.relative_error(got, want)
            assert err <= check.TOLERANCE[dtype], (name, T, N, err)


def test_a_wrong_result_is_reported_and_never_timed():
    case = cases.CASES["gae"]
    d = cases.make_inputs(case, 50, 4, torch.float32, "tn", "cpu")
    truth, _ = check.truth(case, d, 50, 4)

    def off_by_one(case_, dtype):  # bootstraps every step from V_t instead of V_{t+1}
        wrong = dict(d, values=torch.cat([d["values"][:1], d["values"][:-1]]))
        return alternatives.Runner(lambda x: x, lambda x: cases.outputs_of(case.call(reference, wrong)))

    impl = alternatives.Impl("wrong", "wrong", "a shifted bootstrap", off_by_one)
    settings = Settings(device=torch.device("cpu"), dtype=torch.float32, repeat=3, cap_s=1.0, long_call_s=0.5,
                        target_s=0.01, measure_budget_s=0.2, tolerance=1e-4, graph_max_T=2048, compile_budget_s=1.0)
    res = measure(impl, case, d, truth, 50, settings, CompileLedger())
    assert res["status"] == "wrong" and res["rel_err"] > 1e-2
    assert "full_us" not in res


def test_a_long_loop_is_skipped_with_its_estimate():
    case = cases.CASES["gae"]
    T = 5000
    d = cases.make_inputs(case, T, 2, torch.float32, "tn", "cpu")
    settings = Settings(device=torch.device("cpu"), dtype=torch.float32, repeat=3, cap_s=1e-4, long_call_s=0.5,
                        target_s=0.01, measure_budget_s=0.2, tolerance=1e-4, graph_max_T=2048, compile_budget_s=1.0)
    res = measure(alternatives.BY_KEY["loop_torch"], case, d, truth=(), T=T, s=settings, ledger=CompileLedger())
    assert res["status"] == "skipped" and res["estimate_s"] > 1e-4 and "would take" in res["note"]


@pytest.mark.parametrize("args", [["bench", "--shapes", "4096"], ["bench", "--ops", "gea"],
                                  ["bench", "--dtype", "int8"], ["bench", "--layout", "tt"]])
def test_bad_arguments_are_refused(args, capsys):
    from rlscan.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2


def test_synthetic_ppo_update_shares_add_up():
    from rlscan.bench import e2e

    cfg = e2e.PPOConfig("tiny", envs=8, steps=16, hidden=16, epochs=1, minibatches=2)
    r = e2e.synthetic_ppo(cfg, "cpu", repeat=1)
    assert r["rlscan_vs_loop_rel_err"] <= 1e-6
    rest, loop, fast = r["rest_of_update_s"], r["gae_loop_s"], r["gae_rlscan_s"]
    assert min(rest, loop, fast) > 0
    assert r["share_loop"] == pytest.approx(loop / (loop + rest))
    assert r["update_speedup"] == pytest.approx((loop + rest) / (fast + rest))


@pytest.mark.skipif(not __import__("rlscan.bench.baselines", fromlist=["available"]).available("sb3"),
                    reason="stable-baselines3 is not installed")
def test_sb3_ppo_breakdown_and_rlscan_on_its_buffer():
    from rlscan.bench import e2e

    r = e2e.sb3_ppo(updates=1)
    assert r["config"]["n_steps"] == 2048 and r["config"]["n_epochs"] == 10  # SB3's defaults
    assert r["identical_to_sb3"], r["max_abs_diff"]
    assert r["train_s"] > r["compute_returns_and_advantage_s"] > 0
    assert 0 < r["share_sb3"] < 1 and r["update_speedup"] > 0


def test_host_section_runs_at_tiny_sizes(tmp_path):
    """``--host --ops none``: eager vs compiled (and the torch twin), autograd vs cumsum, and the
    CPU path, in the JSON."""
    out = tmp_path / "host"
    cmd = [sys.executable, "-m", "rlscan.cli", "bench", "--host", "--ops", "none", "--quick", "--repeat", "1",
           "--shapes", "8x16", "--host-large", "64x32", "--out", str(out)]
    env = dict(os.environ, COLUMNS="200")
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    host = json.loads((out / "bench.json").read_text())["host"]
    compiled = host["compiled"]
    assert compiled["eager_us"] > 0 and compiled["compiled_default"]["status"] == "ok"
    assert compiled["compiled_default"]["over_eager"] > 0
    default = compiled["compiled_default"]  # rlscan's share: the call less the torch twin's
    assert default["torch_twin_us"] > 0 and abs(default["us"] - default["torch_twin_us"] - default["op_share_us"]) < 1e-6
    # the custom op compiled alone ran (its result matched rlscan.gae's) and splits the share
    assert default["op_alone_us"] > 0 and abs(default["us"] - default["op_alone_us"] - default["guards_us"]) < 1e-6
    auto = host["autograd"]
    assert auto["fwd_bwd_over_cumsum"] > 0 and auto["recording_over_no_grad"] > 0
    cpu = host["cpu"]
    assert cpu["per_call_us"]["torch_8x16"] > 0
    assert set(cpu["large"]) >= set(cases.CASES)
    for name in cases.CASES:
        assert cpu["large"][name]["rel_err_vs_numpy_loop"] < 1e-4, name  # with fresh outputs and into out=
        assert cpu["large"][name]["rlscan_out_us"] > 0 and cpu["large"][name]["out_over_floor"] > 0, name
    for name in host_bench.BACKWARD_OPS:
        # both timed; which takes longer depends on the machine's load as well as on rlscan
        assert cpu["large_backward"][name]["fwd_bwd_of_sum_us"] > 0 and cpu["large_backward"][name]["fwd_us"] > 0, name
    if importlib.util.find_spec("stable_baselines3") is not None:
        assert all(r["bitwise"] for r in cpu["sb3"].values())
    assert "host · autograd" in proc.stdout


def test_compiling_ahead_runs_each_cell_once_and_quick_leaves_compile_out():
    """The warm-up's worker runs a cell's implementations (here on the CPU path); ``--quick``
    leaves torch.compile out of every cell, saying why."""
    from rlscan.bench import runner, warm

    assert warm._warm_cell("gae", 8, 16, "tn", "float32", ("rlscan", "no such impl"), 0, device="cpu") == 1
    compiled = next(i for i in alternatives.ALTERNATIVES if i.compiles)
    for shapes in (None, ((4096, 128),)):
        opts = runner.Options(ops=("gae",), shapes=shapes, quick=True)
        assert "--quick leaves torch.compile out" in runner.subset_note(opts, compiled, 4096, 128)
        assert runner.subset_note(opts, alternatives.RLSCAN, 4096, 128) is None
    assert runner.subset_note(runner.Options(ops=("gae",), shapes=((4096, 128),)), compiled, 4096, 128) is None
