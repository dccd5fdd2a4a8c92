"""tools/seed_ops.py and the ``seed`` groups of tools/seed_compare.py: rl-triton's inputs mapped
to rlscan's calls. Where rl-triton is installed (never in CI: it is a yardstick, not a
dependency), its own public functions run through Triton's interpreter beside the mapped calls
and must agree, and a wrong mapping must be caught; everywhere, rlscan's side of each mapping
runs, and a missing rl-triton is named."""
import math
import os
import sys
from pathlib import Path

import pytest
import torch

import rlscan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import seed_ops  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _rl_triton():
    if not INTERPRETED:
        pytest.skip("rl-triton's kernels run on the CPU only through Triton's interpreter")
    return pytest.importorskip("rl_triton", reason="rl-triton (the seed's library) is not installed")


def test_every_mapping_agrees_with_rl_triton_itself():
    _rl_triton()
    bad = {}
    for op, N, T, layout, truncations, build in seed_ops.cpu_cases(shapes=((3, 9),)):
        row = seed_ops.check_on_cpu(op, N, T, layout, truncations, **build)
        if seed_ops.disagreements(row):
            bad[(op, layout, truncations, tuple(build.items()))] = row["errors"]
    assert not bad, bad


def test_a_wrong_mapping_is_caught(monkeypatch):
    """V-trace mapped with rlscan's λ left at 0.95 (rl-triton's trace has none): the check
    blames rl-triton's result against the truth of the mapped call, and the two disagree."""
    _rl_triton()
    mapped = seed_ops.OPS["vtrace"].mapped

    def wrong(kw):
        name, args, kwargs = mapped(kw)
        return name, args, dict(kwargs, lmbda=0.95)

    monkeypatch.setitem(seed_ops.OPS, "vtrace", seed_ops.OPS["vtrace"]._replace(mapped=wrong))
    row = seed_ops.check_on_cpu("vtrace", 3, 9)
    assert {"compute_vtrace", "compute_vtrace_fused", "between"} <= set(seed_ops.disagreements(row)), row


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's numpy on masked lanes
def test_a_cell_times_a_wrong_function_as_nan(monkeypatch):
    """run_seed on the CPU (device time stubbed): rl-triton's fused Retrace reads [T, N] views
    as [N, T] (it copies nothing), so it is reported wrong and not timed; the unfused one is
    the yardstick."""
    _rl_triton()
    import seed_compare

    monkeypatch.setattr(seed_compare, "DEV", torch.device("cpu"))
    monkeypatch.setattr(seed_compare, "_device_us", lambda fn: (2.0 if fn.__name__ == "call" else 4.0, "stub"))

    def seed_calls(p, module=None):
        kw = seed_ops._as_cuda(seed_ops.seed_kwargs(p))
        return {label: (lambda f=f: tuple(x.as_subclass(torch.Tensor) for x in seed_ops._tuple(f(kw))))
                for label, f in seed_ops.OPS[p.op].seed(seed_ops.seed_library()).items()}

    monkeypatch.setattr(seed_ops, "seed_calls", seed_calls)
    monkeypatch.setattr(seed_compare, "ROWS", [])
    with rlscan.use_backend("triton"):
        seed_compare.run_seed("retrace", 3, 9, "tn")
    (row,) = seed_compare.ROWS
    assert math.isnan(row["seed_variants"]["compute_retrace_fused"]) and row["seed_best"] == "compute_retrace"
    assert row["errors"]["compute_retrace_fused"] > seed_ops.TOL and row["between"] < seed_ops.TOL
    assert row["rlscan_us"] == 2.0 and row["seed_us"] == 4.0 and row["won"] and row["ratio"] == 0.5
    assert "| retrace (compute_retrace) | tn | 3 x 9 | 2.0 | 4.0 (compute_retrace) | 0.50 | yes |" in \
        seed_compare.seed_table([row])[2]


@pytest.mark.parametrize("op", list(seed_ops.OPS))
def test_rlscans_side_of_each_mapping_matches_its_truth(op):
    """Without rl-triton: the mapped call (and rlscan's own form, where it differs: for Retrace,
    ``retrace_from_q`` on the action table) gives the float64 truth of the mapped call, on
    [N, T] and [T, N] storage, with and without truncations."""
    for layout in ("nt", "tn"):
        for truncations in (False, True) if op in seed_ops.TRUNCATING else (False,):
            p = seed_ops.problem(op, 3, 9, layout, device="cpu", truncations=truncations, rate=0.2)
            want = seed_ops.compared(p, "rlscan", seed_ops.truth(p))
            calls = [seed_ops.rlscan_call(p)] + ([seed_ops.rlscan_call(p, own=True)] if seed_ops.has_own(p) else [])
            for call in calls:
                assert seed_ops.rel_err(seed_ops.compared(p, "rlscan", call()), want) < seed_ops.TOL, (layout, truncations)
    if op == "retrace":
        assert seed_ops.problem(op, 3, 9, device="cpu").own[0] == "retrace_from_q"


def test_a_missing_rl_triton_is_named(monkeypatch):
    import seed_compare

    monkeypatch.setitem(sys.modules, "rl_triton", None)  # import rl_triton raises ImportError
    for group in (seed_compare.group_seed, seed_compare.group_seed_tn, seed_compare.group_seed_truncated):
        with pytest.raises(seed_ops.SeedMissing, match=r"rl-triton .*import rl_triton.*\.device/rl-triton"):
            group()
    assert seed_ops.main([]) == 2
