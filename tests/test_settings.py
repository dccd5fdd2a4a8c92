"""The launch settings table (``rlscan._triton.settings``): the shipped H200 rules, the
validation of user tables, the loader's order of tables, ``rlscan plan`` and ``rlscan tune``.
Expected settings here are written out by hand from the measured rules, not read from the
table."""
import contextlib
import copy
import json
import math
from pathlib import Path

import pytest
import torch

from rlscan._triton import settings
from rlscan._triton.settings import Config, configs_for


def shipped_configs(T, B, time_contiguous=False, n_sm=132, reverse=True, deterministic=False, series=5, words=True):
    return configs_for(T, B, time_contiguous, n_sm, reverse, deterministic, series, words, table=settings.shipped())


def fields(cfg, *names):
    return tuple(getattr(cfg, n) for n in names)


def test_time_major_4096_by_2048_light_kernels_take_chained_64_by_32_words_first():
    configs = shipped_configs(2048, 4096, series=5)
    assert fields(configs[0], "kind", "block_b", "num_warps", "steps", "lookback", "link", "n_chunks", "chunk_len") == (
        "chained", 64, 1, 32, 1, "words", 64, 32)
    assert fields(configs[1], "kind", "block_b", "steps", "lookback", "link") == ("chained", 128, 16, 4, "flags")
    assert [c.steps for c in configs] == [32, 16, 8, 8]
    heavy = shipped_configs(2048, 4096, series=6)
    assert fields(heavy[0], "block_b", "steps", "link") == (64, 16, "words")
    forward = shipped_configs(2048, 4096, reverse=False)
    assert fields(forward[-1], "kind", "block_b", "steps", "n_chunks", "chunk_len") == ("block", 128, 4, 32, 64)


def test_time_major_rows_of_a_few_hundred_environments_take_chained_windows():
    # light kernels at 256-639 environments and 2-4k steps: 128-step windows; words read two per
    # round trip for kernels of up to 4 series, one for GAE's 5
    for series, lookback in ((3, 2), (4, 2), (5, 1)):
        assert fields(shipped_configs(4096, 256, series=series)[0], "kind", "block_b", "stripes", "steps", "lookback",
                      "n_chunks", "chunk_len") == ("chained_stripe", 32, 8, 16, lookback, 32, 128)
    # elsewhere in 64-639 environments from 256 steps, and for kernels of 6-7 series: 64-step windows,
    # words read two at a time
    for T, B, series in ((2048, 128, 5), (8192, 64, 5), (1024, 256, 5), (2048, 512, 7), (256, 512, 5)):
        assert fields(shipped_configs(T, B, series=series)[0], "kind", "block_b", "stripes", "steps", "lookback",
                      "n_chunks") == ("chained_stripe", 32, 8, 8, 2, T // 64)
    # forward kernels of 8 series: 64-wide chained blocks from 512 environments, tiles below
    assert fields(shipped_configs(2048, 512, series=8)[0], "kind", "block_b", "steps") == ("chained", 64, 16)
    assert shipped_configs(2048, 256, series=8)[0].kind == "scan"
    # 640 environments and more: 64-wide chained blocks; deterministic calls and under 256 steps: no chain
    assert shipped_configs(2048, 768, series=5)[0].kind == "chained"
    assert shipped_configs(2048, 256, series=5, deterministic=True)[0].kind == "scan"
    assert shipped_configs(255, 256, series=5)[0].kind == "scan"


def test_time_major_backward_kernels_of_8_series_and_more_take_chained_windows():
    # backward kernels run forward in time: 64-step windows at 256-639 environments from 2048 steps,
    # 32-step windows elsewhere from 64 to 4096 environments, 64-step tiles where the windows fail
    for T, B, steps in ((2048, 512, 8), (4096, 256, 8), (2048, 128, 4), (2048, 1024, 4), (512, 256, 4), (2048, 4096, 4)):
        for series in (8, 10, 13):
            configs = shipped_configs(T, B, series=series, reverse=False)
            assert fields(configs[0], "kind", "block_b", "stripes", "steps", "lookback", "link") == (
                "chained_stripe", 32, 8, steps, 2, "words")
            assert fields(configs[-1], "kind", "block_b", "block_t") == ("scan", 16, 64)
    # forward kernels of 8 series, fewer than 64 or more than 4096 environments, deterministic calls: elsewhere
    assert shipped_configs(2048, 512, series=8)[0].kind == "chained"
    assert shipped_configs(2048, 32, series=10, reverse=False)[0].kind != "chained_stripe"
    assert shipped_configs(2048, 8192, series=10, reverse=False)[0].kind == "chained"
    assert shipped_configs(2048, 512, series=10, reverse=False, deterministic=True)[0].kind != "chained_stripe"


def test_deterministic_calls_take_the_block_kernel_split_for_16_programs_per_sm():
    (cfg,) = shipped_configs(2048, 4096, deterministic=True)
    # 32 environment blocks; min(32, ceil(16 * 132 / 32)) = 32 chunks of 64 steps
    assert fields(cfg, "kind", "block_b", "steps", "n_chunks", "chunk_len", "block_c") == ("block", 128, 4, 32, 64, 32)
    (wider,) = shipped_configs(512, 16384, deterministic=True, n_sm=78)
    # 128 blocks: ceil(16 * 78 / 128) = 10 chunks of ceil(512 / 10) rounded up to 4 steps: 52
    assert fields(wider, "n_chunks", "chunk_len") == (10, 52)


def test_deterministic_calls_take_no_chained_kind_whatever_the_class_says():
    """The H100's table lists chained tiles for [N, T] rows of 512 x 2048 under no condition on
    determinism; under deterministic algorithms they are no candidates (their look-back composes
    predecessors in the order they finish)."""
    table = settings.load(settings.TABLES / "h100.json")

    def kinds(deterministic):
        return {c.kind for c in settings.configs_for(2048, 512, True, 132, True, deterministic, 6, True, table=table)}

    assert kinds(False) & set(settings.CHAINED)
    assert kinds(True) and not kinds(True) & set(settings.CHAINED)


def test_conditions_relative_to_the_sm_count():
    for n_sm in (78, 108, 132):
        at = 3 * 128 * n_sm  # ceil(B / 128) >= 3 * n_sm: one step per thread, environments enough
        assert shipped_configs(2048, at, n_sm=n_sm)[0] == Config("stripe", 128, 4, n_chunks=1, chunk_len=2048)
        assert shipped_configs(2048, at - 128, n_sm=n_sm)[0].kind == "chained"
        for B in (n_sm, 4 * n_sm - 1, 4 * n_sm):  # [N, T] rows, B >= n_sm: the whole row in one program's tile
            assert shipped_configs(2048, B, True, n_sm, series=5)[0] == Config("scan", 1, 8, block_t=2048, n_chunks=1,
                                                                               chunk_len=2048)
        assert shipped_configs(2048, 4 * n_sm - 1, True, n_sm, series=9)[0].block_b == 4
        assert shipped_configs(2048, 4 * n_sm, True, n_sm, series=6)[0].num_warps == 16
        assert shipped_configs(2048, n_sm - 1, True, n_sm, series=5)[0].block_b == 4


def test_sizes_never_exceed_the_problem_and_time_splits_for_few_blocks():
    # [T, N] 8 x 3: tiles of 8 environments capped at 4, 16 steps capped at 8
    assert shipped_configs(8, 3)[0] == Config("scan", 4, 1, block_t=8, n_chunks=1, chunk_len=8)
    # 17-128 steps: stripes of 4 steps, as many as the window needs (ceil(40 / 4) = 10 -> 16)
    assert fields(shipped_configs(40, 100)[0], "kind", "block_b", "stripes", "steps") == ("stripe", 8, 16, 4)
    # 32 x 4096: 2 blocks of 16 environments, fewer than 132 SMs: time split for ~4 programs per SM,
    # min(16 windows, ceil(4 * 132 / 2) = 264, 4096 // 16) = 16 chunks of one 256-step window each
    assert fields(shipped_configs(4096, 32)[0], "kind", "block_b", "block_t", "n_chunks", "chunk_len") == (
        "scan", 16, 256, 16, 256)
    # 128 x 4096: 8 blocks; min(64 windows of 64, ceil(528 / 8) = 66, 4096 // 16) = 64 chunks
    assert fields(shipped_configs(4096, 128, series=0)[0], "block_b", "n_chunks", "chunk_len") == (16, 16, 256)
    assert shipped_configs(1000, 32)[0].n_chunks == 1  # below 1024 steps a second launch does not pay
    one_long = shipped_configs(1_000_000, 1, series=5)
    assert fields(one_long[0], "kind", "block_t", "num_warps", "lookback") == ("chained_scan", 2048, 4, 64)
    # one block: min(1954 windows, 4 * 132) = 528 chunks of 1894 steps rounded up to 2048: 489 chunks
    assert fields(one_long[1], "kind", "block_t", "n_chunks", "chunk_len") == ("scan", 512, 489, 2048)


def test_the_shipped_table_is_valid_and_laid_out_by_dumps():
    text = settings.SHIPPED.read_text()
    raw = json.loads(text)
    settings.validate(raw)
    assert settings.dumps(raw) == text
    table = settings.shipped()
    assert all(s.reason.strip() for c in table.classes for s in c.settings)
    assert not table.classes[-1].when


def test_the_table_ships_as_package_data():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    data = config["tool"]["setuptools"]["package-data"]["rlscan._triton"]
    assert any(Path("tables/h200.json").match(pattern) for pattern in data)


def minimal_table(**setting):
    entry = dict(kind="scan", block_b=16, num_warps=4, block_t=32, chunks="one", reason="tiles", measured=None)
    entry.update(setting)
    return {"format": 1, "gpu": "test", "n_sm": 4, "classes": [
        {"name": "tiny", "when": {"T": [1, 64]}, "shape": {"N": 2, "T": 5, "layout": "tn"},
         "settings": [dict(entry, when={"series": [0, 3]}), dict(entry, block_t=4)]},
        {"name": "rest", "when": {}, "shape": {"N": 2, "T": 100, "layout": "tn"},
         "settings": [dict(entry)]}]}


@pytest.mark.parametrize("change, where, field", [
    (lambda t: t["classes"][0]["settings"][1].update(block_b=3), "class 0 ('tiny'), setting 1", "block_b"),
    (lambda t: t["classes"][0]["settings"][0].update(kind="warp"), "class 0 ('tiny'), setting 0", "kind"),
    (lambda t: t["classes"][1]["settings"][0].pop("reason"), "class 1 ('rest'), setting 0", "reason"),
    (lambda t: t["classes"][1]["settings"][0].update(chunks="split", programs_per_sm=4),
     "class 1 ('rest'), setting 0", "max_chunks"),
    (lambda t: t["classes"][1]["settings"][0].update(blocks=2), "class 1 ('rest'), setting 0", "blocks"),
    (lambda t: t["classes"][0]["when"].update(T=[64, 1]), "class 0 ('tiny')", "when.T"),
    (lambda t: t["classes"][0]["when"].update(warps=2), "class 0 ('tiny')", "when"),
    (lambda t: t["classes"][0]["when"].update(programs_per_sm={"block_b": 0, "min": 1}), "class 0 ('tiny')",
     "when.programs_per_sm"),
    (lambda t: t["classes"][1].update(when={"B": [1, 8]}), "class 1 ('rest')", "when"),
    (lambda t: t["classes"][1].update(name="tiny"), "class 1 ('tiny')", "name"),
    (lambda t: t["classes"][0].update(shape={"N": 2, "T": 5}), "class 0 ('tiny')", "shape"),
    (lambda t: t["classes"][0]["settings"][1].update(when={"reverse": True}), "class 0 ('tiny')", "settings"),
    (lambda t: t["classes"][0]["settings"][1].update(kind="chained_scan"), "class 0 ('tiny')", "settings"),
])
def test_a_malformed_table_names_the_entry_and_the_field(change, where, field):
    settings.validate(minimal_table())
    raw = minimal_table()
    change(raw)
    with pytest.raises(ValueError) as caught:
        settings.validate(raw, "user.json")
    message = str(caught.value)
    assert message.startswith(f"user.json: {where}: field {field!r}"), message


def test_the_matcher_reads_a_user_table():
    table = settings.validate(minimal_table(num_warps=2))
    # one chunk of whole windows: 5 steps in one 8-step tile, or two 4-step tiles
    assert configs_for(5, 2, False, 4, series=2, table=table) == (
        Config("scan", 2, 2, block_t=8, n_chunks=1, chunk_len=8), Config("scan", 2, 2, block_t=4, n_chunks=1,
                                                                          chunk_len=8))
    assert configs_for(5, 2, False, 4, series=4, table=table) == (Config("scan", 2, 2, block_t=4, n_chunks=1,
                                                                         chunk_len=8),)
    assert configs_for(100, 2, False, 4, table=table) == (Config("scan", 2, 2, block_t=32, n_chunks=1,
                                                                 chunk_len=128),)


@pytest.fixture
def no_user_tables(monkeypatch, tmp_path):
    monkeypatch.delenv("RLSCAN_SETTINGS", raising=False)
    monkeypatch.setattr(settings, "CACHE_DIR", tmp_path / "cache")
    settings.clear_cache()
    yield tmp_path
    settings.clear_cache()


def test_the_loader_prefers_the_environment_then_the_device_cache_then_the_shipped_table(no_user_tables,
                                                                                          monkeypatch):
    tmp_path = no_user_tables
    assert settings.active_table("NVIDIA A100-SXM4-80GB") is settings.shipped()
    cached = settings.cache_path("NVIDIA A100-SXM4-80GB")
    assert cached.name == "nvidia-a100-sxm4-80gb.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(settings.dumps(minimal_table(num_warps=2)))
    assert settings.active_table("NVIDIA A100-SXM4-80GB").path == str(cached)
    assert settings.active_table("NVIDIA L4") is settings.shipped()
    chosen = tmp_path / "chosen.json"
    chosen.write_text(settings.dumps(minimal_table(num_warps=8)))
    monkeypatch.setenv("RLSCAN_SETTINGS", str(chosen))
    settings.clear_cache()
    assert settings.active_table("NVIDIA A100-SXM4-80GB").path == str(chosen)


@pytest.mark.parametrize("name, model", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
                                         ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA GeForce RTX 4090", "4090"),
                                         ("NVIDIA L4", "l4"), ("Tesla V100-SXM2-16GB", "v100")])
def test_a_gpu_model_is_read_from_its_name(name, model):
    assert settings.gpu_model(name) == model


@pytest.fixture
def two_shipped_tables(no_user_tables, monkeypatch):
    """A tables folder holding the shipped H200 table and an H100 one of 132 SMs."""
    folder = no_user_tables / "tables"
    folder.mkdir()
    (folder / "h200.json").write_text(settings.SHIPPED.read_text())
    (folder / "h100.json").write_text(settings.dumps(dict(minimal_table(num_warps=2), gpu="NVIDIA H100 80GB HBM3",
                                                          n_sm=132)))
    monkeypatch.setattr(settings, "TABLES", folder)
    monkeypatch.setattr(settings, "SHIPPED", folder / "h200.json")
    settings.clear_cache()
    yield folder
    settings.clear_cache()


def test_each_card_reads_the_table_measured_on_it_and_another_the_closest_with_a_note(two_shipped_tables):
    h100 = settings.active_table("NVIDIA H100 80GB HBM3", 132)
    assert Path(h100.path).name == "h100.json" and settings.shipped_for("NVIDIA H100 80GB HBM3", 132).note is None
    assert settings.active_table("NVIDIA H100 PCIe", None) is h100  # the model's table when the SMs are not known
    assert Path(settings.active_table("NVIDIA H200", 132).path).name == "h200.json"
    assert settings.active_table(None) is settings.shipped()  # no GPU: the H200's
    pcie = settings.shipped_for("NVIDIA H100 PCIe", 114)
    assert pcie.table is h100 and "no shipped table was measured on NVIDIA H100 PCIe (114 SMs)" in pcie.note
    assert "h100.json, measured on NVIDIA H100 80GB HBM3 (132 SMs), is the closest" in pcie.note
    a100 = settings.shipped_for("NVIDIA A100-SXM4-80GB", 108)
    assert a100.table is settings.shipped() and "`rlscan tune` measures one" in a100.note  # a tie goes to the H200's


def test_plan_names_the_table_it_read_for_a_named_gpu(two_shipped_tables, capsys):
    from rlscan import cli

    assert cli.main(["plan", "gae", "--shape", "4096x128", "--layout", "nt", "--gpu", "NVIDIA H100 80GB HBM3"]) == 0
    out = capsys.readouterr().out
    assert f"table: {two_shipped_tables / 'h100.json'} (shipped; read for NVIDIA H100 80GB HBM3 (--gpu)" in out
    assert "note:" not in out and "132 SMs (the table's" in out
    assert cli.main(["plan", "gae", "--shape", "4096x128", "--gpu", "NVIDIA A100-SXM4-80GB", "--device-sm", "108"]) == 0
    out = capsys.readouterr().out
    assert "h200.json (shipped" in out and "note:  no shipped table was measured on NVIDIA A100-SXM4-80GB (108 SMs)" in out
    assert "108 SMs (--device-sm)" in out


def test_a_bad_user_table_warns_once_and_the_shipped_one_is_used(no_user_tables, monkeypatch):
    bad = no_user_tables / "bad.json"
    raw = minimal_table()
    raw["classes"][0]["settings"][0]["num_warps"] = 6
    bad.write_text(json.dumps(raw))
    monkeypatch.setenv("RLSCAN_SETTINGS", str(bad))
    with pytest.warns(RuntimeWarning, match=r"bad.json.*num_warps"):
        assert settings.active_table() is settings.shipped()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings.active_table() is settings.shipped()  # once
    (no_user_tables / "broken.json").write_text("{not json")
    monkeypatch.setenv("RLSCAN_SETTINGS", str(no_user_tables / "broken.json"))
    with pytest.warns(RuntimeWarning, match="cannot read"):
        assert settings.active_table() is settings.shipped()


def _this_machines_table() -> settings.Table:
    """The table calls on this machine read (the shipped one for its GPU, without one the H200's)."""
    from rlscan.bench.explain import sm_count

    name = settings.current_device_name()
    return settings.active_table(name, sm_count()[0] if name else None)


def test_plan_explains_the_time_major_4096_by_2048_call(no_user_tables, capsys):
    """Planned as on the H200 (``--gpu``), whose table's class and settings the test names; and
    without ``--gpu``, from the table this machine's calls read."""
    from rlscan import cli

    assert cli.main(["plan", "gae", "--shape", "4096x2048", "--layout", "tn"]) == 0
    out = capsys.readouterr().out
    assert f"table: {_this_machines_table().path} (shipped" in out
    assert "[T, N], 4096+ environments, 512+ steps" in out and "series=5" in out
    assert cli.main(["plan", "gae", "--shape", "4096x2048", "--layout", "tn", "--gpu", settings.shipped().gpu]) == 0
    out = capsys.readouterr().out
    assert f"table: {settings.SHIPPED} (shipped" in out
    assert "[T, N], 4096+ environments, 512+ steps" in out and "series=5" in out and "132 SMs" in out
    first = next(line for line in out.splitlines() if line.strip().startswith("1."))
    assert "chained block_b=64 num_warps=1 steps=32 link=words (64 chunks of 32 steps" in first
    assert "1.05-1.17x" in out
    assert cli.main(["plan", "vtrace", "--shape", "512x2048", "--layout", "nt", "--device-sm", "108"]) == 0
    out = capsys.readouterr().out
    assert "[N, T] rows" in out and "108 SMs (--device-sm)" in out and "series=6" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_tune_needs_a_gpu(capsys):
    from rlscan import cli

    assert cli.main(["tune", "--ops", "gae", "--budget-s", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's tuning loop")
def test_tune_reorders_by_measured_time_and_writes_a_table_the_matcher_uses(no_user_tables, monkeypatch):
    from rlscan._triton import launch
    from rlscan.bench.tune import tune, write

    raw = {"format": 1, "gpu": "test", "n_sm": 4, "classes": [
        {"name": "everything", "when": {}, "shape": {"N": 2, "T": 5, "layout": "tn"}, "settings": [
            dict(kind="scan", block_b=2, num_warps=1, block_t=4, chunks="one", reason="four-step tiles",
                 measured=None),
            dict(kind="scan", block_b=2, num_warps=1, block_t=2, chunks="one", reason="two-step tiles",
                 measured=None, when={"reverse": True}),
            dict(kind="stripe", block_b=2, num_warps=1, chunks="one", reason="sequential", measured=None,
                 when={"reverse": False}),
        ]}]}
    table = settings.validate(raw)
    seconds = {4: 3e-6, 2: 1e-6, 1: 2e-6}  # the clock is meaningless under the interpreter: a fake one
    timed, lines, forced = [], [], {}
    real = launch.forced_config

    @contextlib.contextmanager
    def recorded(**fields):
        forced.clear()
        forced.update(fields)
        with real(**fields):
            yield

    monkeypatch.setattr(launch, "forced_config", recorded)

    def clock(fn, device):
        fn()
        timed.append((forced["kind"], forced["block_t"]))
        return seconds[forced["block_t"]]

    tuned = tune(table, ops=("gae", "eligibility_traces"), device=torch.device("cpu"), gpu="Test GPU", n_sm=4,
                 budget_s=600, clock=clock, progress=lines.append)
    # gae runs backward: the two tile settings (the stripe one holds forward in time only);
    # eligibility traces run forward: the four-step tiles and the stripe setting
    assert timed == [("scan", 4), ("scan", 2), ("scan", 4), ("stripe", 1)]
    first, *rest = tuned["classes"][0]["settings"]
    assert (first["block_t"], first["reason"]) == (2, "measured on Test GPU by rlscan tune")
    assert first["ratio"] == 3.0 and "3.00x" in first["measured"]
    assert first["when"] == {"reverse": True, "series": [1, 5]}
    # each op's group in its own measured order, pinned to its direction and weight, then the
    # shipped settings for every other call
    assert [(s["kind"], s.get("block_t"), s.get("ratio"), s.get("when", {}).get("reverse")) for s in rest] == [
        ("scan", 4, 1.0, True), ("stripe", None, 1.5, False), ("scan", 4, 1.0, False),
        ("scan", 4, None, None), ("scan", 2, None, True), ("stripe", None, None, False)]
    assert any("gae" in line and "us" in line for line in lines)
    path = write(tuned, no_user_tables / "tuned.json")
    monkeypatch.setenv("RLSCAN_SETTINGS", path)
    settings.clear_cache()
    loaded = settings.active_table()
    assert loaded.path == path and loaded.gpu == "Test GPU" and loaded.n_sm == 4
    backward = configs_for(5, 2, False, 4, reverse=True, series=5, table=loaded)
    assert [c.block_t for c in backward] == [2, 4]
    forward = configs_for(5, 2, False, 4, reverse=False, series=3, table=loaded)
    assert [c.kind for c in forward] == ["stripe", "scan"]
    assert math.isclose(loaded.classes[0].settings[0].ratio, 3.0)


def test_tune_keeps_the_shipped_order_where_the_budget_runs_out(no_user_tables):
    from rlscan.bench.tune import tune

    table = settings.validate(minimal_table())
    lines = []
    tuned = tune(table, ops=("gae",), device=torch.device("cpu"), gpu="Test GPU", n_sm=4, budget_s=-1,
                 progress=lines.append)
    assert [c["settings"] for c in tuned["classes"]] == [c["settings"] for c in copy.deepcopy(table.raw)["classes"]]
    assert any("budget spent" in line for line in lines)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device that cannot be named")
def test_launches_for_a_gpu_target_without_a_gpu_take_the_shipped_table(no_user_tables, monkeypatch):
    """As the compile matrix plans them: a CUDA device with a known SM count and no GPU to name."""
    from rlscan._triton import launch

    monkeypatch.setattr(launch, "interpreting", lambda: False)
    monkeypatch.setattr(launch, "_SM_COUNT", {0: 132})
    monkeypatch.setattr(launch, "_DEVICE_NAME", {})
    configs = launch.choose_configs(2048, 4096, False, False, torch.device("cuda", 0), True, 5, True)
    assert fields(configs[0], "kind", "block_b", "steps", "link") == ("chained", 64, 32, "words")
    assert launch._DEVICE_NAME == {0: None}


def test_every_shipped_table_holds_each_policy_decision_with_its_reason():
    from rlscan._triton import policy

    for table in settings.shipped_tables():
        assert set(table.raw["policy"]) == set(policy.DECISIONS)
        for d in table.policy.values():
            assert d.reason.strip() and (bool(d.limit) != bool(d.candidates)) and d.value is not None
            assert d.limit or (d.shapes and all(policy.DECISIONS[d.name].check(c) or isinstance(c, tuple)
                                                for c in d.candidates))
    shipped = settings.shipped()
    assert policy.value("gae_row_tiles", shipped) == ((1024, 1024, 4, 0), (4096, 2048, 4, 0), (math.inf, 1024, 4, 1))
    assert shipped.policy["max_local_bytes"].limit and shipped.policy["state_in_steps_per_warp"].candidates


@pytest.mark.parametrize("change, field", [
    (lambda p: p.update(warps_per_row={"value": 1, "reason": "r", "limit": "l"}), "warps_per_row"),
    (lambda p: p["gae_row_tiles"].update(value=[[None, 3, 4, 0]]), "value"),
    (lambda p: p["max_local_bytes"].update(candidates=[128]), "candidates"),
    (lambda p: p["gae_row_min_t"].update(shapes=[]), "shapes"),
    (lambda p: p["gae_row_min_t"].pop("reason"), "reason"),
])
def test_a_malformed_policy_names_the_decision_and_the_field(change, field):
    raw = minimal_table()
    raw["policy"] = copy.deepcopy(settings.shipped().raw["policy"])
    settings.validate(raw)
    change(raw["policy"])
    with pytest.raises(ValueError) as caught:
        settings.validate(raw, "user.json")
    assert str(caught.value).startswith("user.json: policy") and repr(field) in str(caught.value), str(caught.value)


def test_a_table_without_a_policy_takes_the_shipped_decisions_and_tests_force_one():
    from rlscan._triton import policy

    table = settings.validate(dict(minimal_table(), policy={"gae_row_min_t": dict(
        settings.shipped().raw["policy"]["gae_row_min_t"], value=8)}))
    assert policy.value("gae_row_min_t", table) == 8
    assert table.policy["max_local_bytes"] is settings.shipped().policy["max_local_bytes"]
    with policy.forced_policy(gae_row_min_t=3):
        assert policy.value("gae_row_min_t", table) == 3
    assert policy.value("gae_row_min_t", table) == 8
    with pytest.raises(ValueError, match="unknown policy decision"):
        with policy.forced_policy(row_min=3):
            pass


def test_plan_prints_the_policy_decisions_a_call_meets(no_user_tables, capsys):
    """As on the H200 (``--gpu``), whose table's decisions the test spells out; and without
    ``--gpu``, each decision with the value of the table this machine's calls read."""
    from rlscan import cli
    from rlscan._triton import policy
    from rlscan.bench.explain import _shown

    h200 = ["--gpu", settings.shipped().gpu]
    assert cli.main(["plan", "gae", "--shape", "64x32768", "--layout", "nt", *h200]) == 0
    out = capsys.readouterr().out
    assert "gae_lambda_min = 0.5: with mask=" in out and "gae_row_min_t = 1024" in out
    assert "gae_row_tiles = [[1024, 1024, 4, 0], [4096, 2048, 4, 0], [null, 1024, 4, 1]]: 1024-step tiles on 4 " \
           "warps, 32 tiles per row chained by a look-back of 1 words" in out
    assert cli.main(["plan", "vtrace", "--shape", "512x2048", "--layout", "nt", *h200]) == 0
    out = capsys.readouterr().out
    assert ("state_in_steps_per_warp = 128: the state carried into each step (setting 1, 256 steps per warp: "
            "reload") in out
    assert "max_local_bytes = 256" in out and "a limit, not tuned" in out and "gae_" not in out
    assert cli.main(["plan", "retrace", "--shape", "4096x128", *h200]) == 0
    out = capsys.readouterr().out
    assert "retrace_table_elements = 2048" in out and "retrace_max_block_a = 64" in out

    here = _this_machines_table()
    for call, names in ((["gae", "--shape", "64x32768", "--layout", "nt"], ("gae_lambda_min", "gae_row_min_t")),
                        (["vtrace", "--shape", "512x2048", "--layout", "nt"], ("max_local_bytes",)),
                        (["retrace", "--shape", "4096x128"], ("retrace_table_elements", "retrace_max_block_a"))):
        assert cli.main(["plan", *call]) == 0
        out = capsys.readouterr().out
        for name in names:
            assert f"  {name} = {_shown(policy.value(name, here))}: " in out, name


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's tuning loop")
def test_tune_re_measures_a_policy_choice_and_keeps_its_reason(no_user_tables, monkeypatch):
    from rlscan._triton import policy
    from rlscan.bench import tune_policy as module
    from rlscan.bench.tune_policy import tune_policy

    seen = []  # the value each rlscan call ran under (the reference's calls run under none)
    masked = module.MASKED_GAE
    monkeypatch.setitem(module.PROBES, "gae_row_min_t", masked._replace(
        run=lambda m, d, **kw: seen.append(policy.FORCED.get("gae_row_min_t")) or masked.call(m, d, **kw)))
    raw = minimal_table()
    raw["policy"] = {"gae_row_min_t": dict(settings.shipped().raw["policy"]["gae_row_min_t"], value=64,
                                           candidates=[2, 64], shapes=[{"N": 2, "T": 8, "layout": "nt"}])}
    table = settings.validate(raw)
    timed, lines = [], []

    def clock(fn, device):
        fn()
        timed.append(seen[-1])
        return 1e-6 if timed[-1] == 2 else 3e-6

    tuned = tune_policy(table, raw, device=torch.device("cpu"), gpu="Test GPU", clock=clock, progress=lines.append,
                        names=("gae_row_min_t",))
    assert timed == [64, 2]  # the table's value, then the other candidate
    entry = tuned["policy"]["gae_row_min_t"]
    assert (entry["value"], entry["ratio"]) == (2, 3.0) and "rlscan tune on Test GPU: 3.00x" in entry["measured"]
    assert entry["reason"] == raw["policy"]["gae_row_min_t"]["reason"]
    assert policy.value("gae_row_min_t", settings.validate(tuned)) == 2
