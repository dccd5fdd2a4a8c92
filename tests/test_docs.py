"""The user's documentation holds together: links resolve, pages stay short, numbers match the
data, and every example and command runs as written.

* every relative link in README.md and docs/**/*.md names a file that exists, and an
  anchor (``page.md#heading``) names a heading of that page (GitHub's slugs);
* docs/ holds at most 20 files and every page at most 400 lines;
* the tables of record in docs/benchmarks.md are exactly what :func:`render_tables` makes of
  docs/bench-h200.json, the data of record;
* every number of the README's headline table is that JSON's, to the digits printed;
* each card's section of docs/records.md is what ``tools/gpu_record.py``'s ``render`` makes of
  its docs/record-<card>.json.
* every Python block runs, on the small inputs ``tests/doc_examples.py`` gives the names it
  uses (skipped, with the reason, where it needs a framework or a GPU that is missing); a
  block of signatures (docs/api.md) is the functions' signatures;
* every ``rlscan ...`` and ``python tools/...`` command runs: ``rlscan bench`` cut to its
  smallest run, a synopsis or a run too long for CI read as its ``--help`` (every option it
  names must be there), and a GPU tool on a machine without one must say so in a line.

After a new ``rlscan bench --e2e --out bench-out`` run on the card, copy its bench.json
and bench.png to docs/bench-h200.{json,png} and rewrite the tables::

    python tests/test_docs.py --write
"""
import inspect
import json
import math
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

from rlscan.ops import REGISTRY

import doc_examples

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
DATA = DOCS / "bench-h200.json"
BENCHMARKS = DOCS / "benchmarks.md"

MAX_FILES = 20
MAX_LINES = 400

BEGIN = "<!-- tables of record: `python tests/test_docs.py --write` writes them from bench-h200.json -->"
END = "<!-- end of the tables of record -->"
HEADLINE_BEGIN = "<!-- headline: every number below is docs/bench-h200.json's (tests/test_docs.py) -->"
HEADLINE_END = "<!-- end of the headline -->"

OPS = tuple(op.name for op in REGISTRY if op.bench is not None)  # the benchmarked ops
NAMES = {"exact": "sequential kernel", "compile": "torch.compile scan", "loop_torch": "torch loop (GPU)",
         "loop_numpy": "numpy loop (CPU)", "torchrl_loop": "TorchRL loop", "torchrl_vec": "TorchRL vectorised",
         "sb3": "SB3 buffer", "whole_row": "whole-row kernel"}
# Shapes shown in the device-time table, in this order, where the run measured them.
DEVICE_SHAPES = ((4096, 128), (4096, 2048), (16384, 512), (512, 2048), (16, 262144), (64, 65536),
                 (1, 1_000_000), (16384, 16), (65536, 8))
# Cells of the "against the alternatives" table: the shapes users run most, and one long sequence.
ALTERNATIVE_SHAPES = ((4096, 128), (4096, 2048), (1, 1_000_000))


# ----------------------------------------------------------------------------- formatting


def fmt_time(us, fine: bool = False) -> str:
    if us is None:
        return "—"
    if fine and us < 10:
        return f"{us:.2f} µs"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def fmt_ratio(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def fmt_speedup(x) -> str:
    if x is None:
        return "—"
    return f"×{x:,.0f}" if x >= 100 else f"×{x:.1f}"


def fmt_share(x: float) -> str:
    """A share of the update: one decimal from 1%, two significant digits below."""
    return f"{100 * x:.1f}%" if x >= 0.01 else f"{100 * x:.2g}%"


def fmt_shape(N: int, T: int) -> str:
    return f"{N:,} × {T:,}"


# ----------------------------------------------------------------------------- reading the data


def cells_by_key(doc: dict) -> dict:
    return {(c["op"], c["N"], c["T"]): c for c in doc["cells"] if "impls" in c}


def rlscan_ok(cell: dict) -> bool:
    return cell["impls"]["rlscan"].get("status") == "ok"


def alternative_text(cell: dict, key: str) -> str:
    """One alternative's full call and rlscan's speedup over it, or why it did not run."""
    res = cell["impls"].get(key)
    if res is None:
        return "—"
    if res.get("status") == "ok":
        return f"{fmt_time(res['full_us'])} ({fmt_speedup(res['full_us'] / cell['impls']['rlscan']['full_us'])})"
    if res.get("estimate_s") is not None:
        return f"skipped, ~{res['estimate_s']:.0f} s"
    return "—"


def alternatives_present(doc: dict) -> list:
    seen = {k for c in doc["cells"] if "impls" in c for k, v in c["impls"].items()
            if k != "rlscan" and v.get("status") == "ok"}
    return [k for k in NAMES if k in seen]


# ----------------------------------------------------------------------------- the tables


def render_tables(doc: dict) -> str:
    """The tables of record of docs/benchmarks.md, from one ``rlscan bench`` JSON."""
    cells = cells_by_key(doc)
    fl, v, dev = doc["floors"], doc["versions"], doc["device"]
    measured = [c for c in cells.values() if rlscan_ok(c)]
    worst = max((c["impls"]["rlscan"]["rel_err"] for c in measured), default=float("nan"))
    failed = sum(1 for c in cells.values() if not rlscan_ok(c))
    too_big = sum(1 for c in doc["cells"] if "impls" not in c)
    out = [
        f"{dev['name']} ({dev.get('sm_count', '?')} SMs), torch {v['torch']}, Triton {v['triton']}, "
        f"{doc['date'][:10]}; {len(doc['cells'])} cells ({too_big} left out: inputs over 4 GB), "
        f"{len(measured)} measured, {failed} failed their check; largest relative error of rlscan "
        f"{worst:.1e}. Launch floor {fl['launch_us']:.1f} µs, copy bandwidth "
        f"{fl['copy_bandwidth_GBps'] / 1000:.2f} TB/s; the run took {doc['elapsed_s'] / 60:.0f} min.",
        "",
        "**Device time, and its ratio to the bandwidth floor** (`[T, N]` float32):",
        "",
    ]
    shapes = [s for s in DEVICE_SHAPES if any((op, *s) in cells for op in OPS)]
    out.append("| op | " + " | ".join(fmt_shape(*s) for s in shapes) + " |")
    out.append("|---" * (len(shapes) + 1) + "|")
    for op in OPS:
        row = []
        for s in shapes:
            c = cells.get((op, *s))
            if c is None or not rlscan_ok(c):
                row.append("—")
                continue
            r = c["impls"]["rlscan"]
            row.append(f"{fmt_time(r.get('device_us'))} ({fmt_ratio(r.get('device_over_bandwidth_floor'))})")
        out.append(f"| {op} | " + " | ".join(row) + " |")

    out += ["", "**Full call against the alternatives** (the alternative's full call, and rlscan's speedup "
            "over it; \"skipped\" gives the estimate of a call over the cap):", ""]
    alts = [k for k in ("loop_torch", "loop_numpy", "compile", "exact") if k in alternatives_present(doc)]
    out.append("| op | N × T | rlscan full call | rlscan device | " + " | ".join(NAMES[k] for k in alts) + " |")
    out.append("|---" * (4 + len(alts)) + "|")
    for op in OPS:
        for s in ALTERNATIVE_SHAPES:
            c = cells.get((op, *s))
            if c is None or not rlscan_ok(c):
                continue
            r = c["impls"]["rlscan"]
            out.append(f"| {op} | {fmt_shape(*s)} | {fmt_time(r['full_us'])} | {fmt_time(r.get('device_us'))} | "
                       + " | ".join(alternative_text(c, k) for k in alts) + " |")

    out += ["", "**Every cell** (full-call speedup of rlscan over each alternative: geometric mean, "
            "and the range, over the cells where both ran; the last column counts the cells where the "
            "sequential kernel's device time was lower than rlscan's):", ""]
    alts = alternatives_present(doc)
    out.append("| op | cells | " + " | ".join(NAMES[k] for k in alts) + " | sequential kernel faster (device) |")
    out.append("|---" * (3 + len(alts)) + "|")
    for op in OPS:
        mine = [c for (o, _, _), c in cells.items() if o == op and rlscan_ok(c)]
        if not mine:
            continue
        row = []
        for k in alts:
            xs = [c["impls"][k]["full_us"] / c["impls"]["rlscan"]["full_us"] for c in mine
                  if c["impls"].get(k, {}).get("status") == "ok"]
            row.append("—" if not xs else
                       f"{fmt_speedup(math.exp(sum(map(math.log, xs)) / len(xs)))} "
                       f"({fmt_speedup(min(xs))}–{fmt_speedup(max(xs))}, {len(xs)})")
        slower = sum(1 for c in mine if c["impls"].get("exact", {}).get("status") == "ok"
                     and c["impls"]["exact"].get("device_us") is not None
                     and c["impls"]["rlscan"].get("device_us") is not None
                     and c["impls"]["exact"]["device_us"] < c["impls"]["rlscan"]["device_us"])
        out.append(f"| {op} | {len(mine)} | " + " | ".join(row) + f" | {slower} |")

    out += ["", "**Where an alternative was faster** (cells where its full call, or its device time, was "
            "lower than rlscan's):", ""]
    for k in alts:
        full, dev = [], []
        for c in (c for c in cells.values() if rlscan_ok(c)):
            res, r = c["impls"].get(k, {}), c["impls"]["rlscan"]
            if res.get("status") != "ok":
                continue
            if res["full_us"] < r["full_us"]:
                full.append(c)
            if res.get("device_us") is not None and r.get("device_us") is not None \
                    and res["device_us"] < r["device_us"]:
                dev.append(c)
        text = f"- {NAMES[k]}: full call in {len(full)} cells"
        if full:
            text += f" (T ≤ {max(c['T'] for c in full):,})"
        if dev:
            worst = max(dev, key=lambda c: c["impls"]["rlscan"]["device_us"] - c["impls"][k]["device_us"])
            gap = worst["impls"]["rlscan"]["device_us"] - worst["impls"][k]["device_us"]
            text += (f"; device time in {len(dev)} cells (T ≤ {max(c['T'] for c in dev):,}), by at most "
                     f"{fmt_time(gap) if gap >= 1 else f'{gap:.2f} µs'} "
                     f"({worst['op']} at {fmt_shape(worst['N'], worst['T'])}: "
                     f"{fmt_time(worst['impls'][k]['device_us'], gap < 1)} against "
                     f"{fmt_time(worst['impls']['rlscan']['device_us'], gap < 1)})")
        out.append(text + ".")

    e2e = (doc.get("e2e") or {}).get("synthetic_ppo") or []
    if e2e:
        out += ["", "**End to end** (`--e2e`: a synthetic PPO update in plain torch, 4 epochs × 8 minibatches, "
                "CleanRL's GAE loop on the GPU against `rlscan.gae`):", "",
                "| update | GAE, loop | GAE, rlscan | rest of the update | GAE's share, loop → rlscan "
                "| whole-update speedup |", "|---|---|---|---|---|---|"]
        for e in e2e:
            cfg = e["config"]
            out.append(f"| {cfg['name']}, {cfg['envs']:,} envs × {cfg['steps']} steps | "
                       f"{fmt_time(e['gae_loop_s'] * 1e6)} | {fmt_time(e['gae_rlscan_s'] * 1e6)} | "
                       f"{fmt_time(e['rest_of_update_s'] * 1e6)} | {fmt_share(e['share_loop'])} → "
                       f"{fmt_share(e['share_rlscan'])} | "
                       f"×{e['update_speedup']:.2f} |")
    return "\n".join(out)


def between(text: str, begin: str, end: str) -> str:
    assert begin in text and end in text, f"markers {begin!r} … {end!r} missing"
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def write_between(page: pathlib.Path, begin: str, end: str, block: str) -> None:
    """Replace what stands between ``page``'s markers with ``block``."""
    head, rest = page.read_text().split(begin, 1)
    page.write_text(f"{head}{begin}\n\n{block}\n\n{end}{rest.split(end, 1)[1]}")


def write_tables() -> None:
    write_between(BENCHMARKS, BEGIN, END, render_tables(json.loads(DATA.read_text())))


# ----------------------------------------------------------------------------- links


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list:
    return [README] + sorted(DOCS.rglob("*.md"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set:
    found, in_code = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            base = slug(line.lstrip("#"))
            name, k = base, 1
            while name in found:
                name, k = f"{base}-{k}", k + 1
            found.add(name)
    return found


def relative_links(page: pathlib.Path) -> list:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    links = [a or b for a, b in LINK.findall(text)]
    return [x for x in links if not re.match(r"[a-z][a-z0-9+.-]*:", x)]


def test_relative_links_resolve():
    broken = []
    for page in pages():
        for link in relative_links(page):
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert not broken, "\n".join(broken)


def test_slug_follows_github():
    assert slug("Against the seed's design") == "against-the-seeds-design"
    assert slug("Skipped steps (`mask`: GAE, TD(λ), discounted returns)") == \
        "skipped-steps-mask-gae-tdλ-discounted-returns"
    assert "no-such-heading" not in anchors(README)


def test_docs_stay_small():
    files = [p for p in DOCS.rglob("*") if p.is_file()]
    assert len(files) <= MAX_FILES, sorted(str(p.relative_to(DOCS)) for p in files)
    long = {str(p.relative_to(ROOT)): n for p in [README] + sorted(DOCS.rglob("*.md"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


# ----------------------------------------------------------------------------- numbers


RECORDS = sorted(DOCS.glob("record-*.json"))  # a card's GPU record: tools/gpu_record.py's record.json
RECORDS_PAGE = DOCS / "records.md"


def record_markers(path: pathlib.Path) -> tuple:
    return (f"<!-- {path.name}: `python tests/test_docs.py --write` writes this from it -->",
            f"<!-- end of {path.name} -->")


def render_record(path: pathlib.Path) -> str:
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_record

    return gpu_record.render(json.loads(path.read_text()))


def write_records() -> None:
    for path in RECORDS:
        write_between(RECORDS_PAGE, *record_markers(path), render_record(path))


def test_gpu_records_are_the_data():
    assert RECORDS, "docs/ holds no record-<card>.json"
    for path in RECORDS:
        assert between(RECORDS_PAGE.read_text(), *record_markers(path)) == render_record(path), \
            f"docs/records.md's section of {path.name} differs from it: run python tests/test_docs.py --write"


def test_tables_of_record_are_the_data():
    doc = json.loads(DATA.read_text())
    assert doc["tool"] == "rlscan bench" and doc["device"]["type"] == "cuda"
    assert between(BENCHMARKS.read_text(), BEGIN, END) == render_tables(doc), \
        "docs/benchmarks.md's tables differ from docs/bench-h200.json: run python tests/test_docs.py --write"


NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def numbers(text: str) -> list:
    """The numbers of a table cell, each with its printed precision (``×4,080`` → (4080.0, 1))."""
    found = []
    for m in NUMBER.finditer(text):
        digits = m.group().replace(",", "")
        places = len(digits.split(".")[1]) if "." in digits else 0
        scale = {"ms": 1e3, "s": 1e6}.get(text[m.end():].strip().split(" ")[0].rstrip(")"), 1.0)
        found.append((float(digits) * scale, 10.0 ** -places * scale))
    return found


def headline_rows() -> list:
    rows = [line for line in between(README.read_text(), HEADLINE_BEGIN, HEADLINE_END).splitlines()
            if line.startswith("|") and not line.startswith("|---")]
    header = [h.strip() for h in rows[0].strip("|").split("|")]
    return header, [[c.strip() for c in r.strip("|").split("|")] for r in rows[1:]]


def headline_truth(cell: dict, column: str):
    """What a README headline column holds for one cell, in µs or as a speedup."""
    impls = cell["impls"]
    if column == "rlscan, device":
        return impls["rlscan"]["device_us"]
    if column == "rlscan, full call":
        return impls["rlscan"]["full_us"]
    key = {"vs the torch loop": "loop_torch", "vs torch.compile": "compile",
           "vs the sequential kernel, device": "exact"}[column]
    res = impls[key]
    if res.get("status") != "ok":
        return None
    if column.endswith("device"):
        return res["device_us"] / impls["rlscan"]["device_us"]
    return res["full_us"] / impls["rlscan"]["full_us"]


HEADLINE_COLUMNS = ("rlscan, device", "rlscan, full call", "vs the torch loop", "vs torch.compile",
                    "vs the sequential kernel, device")


def render_headline(doc: dict, picks) -> str:
    """README rows for ``picks`` ((op, N, T), ...), each number as :func:`headline_truth` reads it."""
    cells = cells_by_key(doc)
    lines = ["| op | N × T | " + " | ".join(HEADLINE_COLUMNS) + " |", "|---" * (2 + len(HEADLINE_COLUMNS)) + "|"]
    for op, N, T in picks:
        row = []
        for column in HEADLINE_COLUMNS:
            try:
                x = headline_truth(cells[(op, N, T)], column)
            except (KeyError, TypeError):
                x = None
            row.append(fmt_time(x) if column.startswith("rlscan") else fmt_speedup(x))
        lines.append(f"| `{op}` | {fmt_shape(N, T)} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def test_readme_headline_numbers_are_the_data():
    cells = cells_by_key(json.loads(DATA.read_text()))
    header, rows = headline_rows()
    assert header[:2] == ["op", "N × T"], header
    assert len(rows) >= 3
    checked = 0
    for row in rows:
        op = row[0].strip("`")
        N, T = (int(x.replace(",", "")) for x in row[1].split("×"))
        cell = cells[(op, N, T)]
        for column, text in zip(header[2:], row[2:]):
            if text in ("—", ""):
                continue
            (value, step), = numbers(text)
            truth = headline_truth(cell, column)
            assert truth is not None, (op, N, T, column, "did not run")
            assert abs(value - truth) <= step / 2 + 1e-9 * truth, (op, N, T, column, text, truth)
            checked += 1
    assert checked >= 6


def test_numbers_reads_units_and_precision():
    import pytest

    assert numbers("×4,080") == [(4080.0, 1.0)]
    assert numbers("1.05 ms") == [(pytest.approx(1050.0), pytest.approx(10.0))]
    assert numbers("50.3 µs") == [(50.3, pytest.approx(0.1))]


# ----------------------------------------------------------------------------- examples


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SIGNATURE = re.compile(r"rlscan\.(\w+)\(([^()]*)\)")


def code_blocks(page: pathlib.Path, langs=("python",)) -> list:
    """``(line, code)`` of the page's fenced blocks in these languages (``""``: unlabelled)."""
    text = page.read_text()
    return [(text[:m.start()].count("\n") + 1, m.group(2)) for m in FENCE.finditer(text) if m.group(1) in langs]


def is_signatures(code: str) -> bool:
    """A block of ``rlscan.op(arguments, *, options) -> result`` lines (docs/api.md), not an example."""
    return code.lstrip().startswith("rlscan.") and ("*," in code or " -> " in code)


EXAMPLES = [(page, line, code) for page in pages() for line, code in code_blocks(page) if not is_signatures(code)]
SIGNATURES = [(page, line, code) for page in pages() for line, code in code_blocks(page) if is_signatures(code)]


def _id(example) -> str:
    return f"{example[0].name}:{example[1]}"


@pytest.mark.parametrize("example", SIGNATURES, ids=_id)
def test_signatures_are_the_functions(example):
    page, line, code = example
    import rlscan

    found = SIGNATURE.findall(code)
    assert found, f"{page.name}:{line}: no signature read"
    for name, arguments in found:
        scope = {}
        exec(f"def {name}({' '.join(arguments.split())}): pass", scope)
        documented, actual = inspect.signature(scope[name]), inspect.signature(getattr(rlscan, name))
        as_written = [(p.name, p.kind, p.default) for p in documented.parameters.values()]
        assert as_written == [(p.name, p.kind, p.default) for p in actual.parameters.values()], \
            f"{page.name}:{line}: rlscan.{name}{documented} is rlscan.{name}{actual}"


_RUN: dict = {}  # (page, frameworks) -> (its namespace, the lines of its examples run so far)


def _run(page, line, code, ns) -> None:
    doc_examples.before(page.name, ns, code)
    source = doc_examples.runnable(page.name, code)
    exec(compile(source, f"{page.relative_to(ROOT)}:{line}", "exec"), ns)


@pytest.mark.parametrize("example", EXAMPLES, ids=_id)
def test_example_runs(example, tmp_path, monkeypatch):
    """An example runs after the page's earlier examples that need no framework it does not need
    (what a reader with only those frameworks ran before it), in a namespace of their own: so
    the example runs the same on every machine that has its frameworks, whichever others are
    installed and whichever examples ran first."""
    page, line, code = example
    reason = doc_examples.missing(page.name, code)
    if reason:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)  # where an example writes and reads its files
    frameworks = set(doc_examples.needs(page.name, code))
    ns, done = _RUN.setdefault((page.name, tuple(sorted(frameworks))), (doc_examples.inputs(page.name), set()))
    with doc_examples.restored(page.name, ns):
        for at, earlier in code_blocks(page):  # what a reader ran before, where this test runs alone
            if at < line and at not in done and not is_signatures(earlier) and \
                    set(doc_examples.needs(page.name, earlier)) <= frameworks:
                done.add(at)
                _run(page, at, earlier, ns)
        done.add(line)
        _run(page, line, code, ns)


def test_examples_are_found():
    names = {page.name for page, _, _ in EXAMPLES}
    assert {"README.md", "cleanrl.md", "sb3.md", "torchrl.md", "rllib.md", "rsl_rl.md", "verl.md"} <= names
    assert {name for name, _ in SIGNATURE.findall("".join(code for _, _, code in SIGNATURES))} >= {
        *REGISTRY.names(), "masked_whiten"}
    assert doc_examples.runnable("x.md", "import a\n...\n    b = 1\n") == "import a\nif True:  # ...\n    b = 1"
    for page, written in doc_examples.SHORTER:
        assert any(p.name == page and written in code for p, _, code in EXAMPLES), (page, written)


# ----------------------------------------------------------------------------- commands

COMMAND = re.compile(r"^(?:\$ )?(?:\S+=\S+ )*(?:\.venv/bin/)?(rlscan (?:[^#`\n&]*)|python tools/[^#`\n&]*)")
SPAN = re.compile(r"`((?:\.venv/bin/)?rlscan [^`]+|python tools/[^`]+)`")


def documented_commands() -> dict:
    """Every command the docs show: ``{command: (page, first line of its output or None)}``."""
    found = {}
    for page in pages():
        for _, code in code_blocks(page, ("bash", "")):
            lines = code.splitlines()
            session = any(line.startswith("$ ") for line in lines)  # then the other lines are output
            for k, line in enumerate(lines):
                if session and not line.startswith("$ "):
                    continue
                for part in line.split("&&"):
                    m = COMMAND.match(part.strip())
                    if m:
                        command = " ".join(m.group(1).split())
                        shown = lines[k + 1] if session and k + 1 < len(lines) else None
                        if shown or command not in found:
                            found[command] = (page.name, shown)
        text = FENCE.sub("", page.read_text())
        for m in SPAN.finditer(text):
            found.setdefault(" ".join(m.group(1).removeprefix(".venv/bin/").split()), (page.name, None))
    return found


COMMANDS = documented_commands()


def _argv(command: str) -> list:
    words = shlex.split(command)
    return words[1:] if words[0] == "python" else words


def _help(command: str) -> list:
    """The ``--help`` of a command's program and subcommand (``rlscan bench``, ``python tools/x.py``)."""
    words = [w for w in _argv(command) if not re.match(r"[\[A-Z]|.*\|", w)]
    return words[:2] + ["--help"] if words[0] == "rlscan" and len(words) > 1 and not words[1].startswith("-") \
        else words[:1] + ["--help"]


def planned_runs(out: str) -> dict:
    """``{command: (argv the test runs, why it only reads the help, or None)}``, without the
    commands that cannot run here (a GPU they would time for minutes, a framework missing)."""
    runs = {}
    for command in COMMANDS:
        if doc_examples.gpu_run(command) or doc_examples.command_missing(command):
            continue
        why = doc_examples.help_only(command)
        runs[command] = (_help(command) if why else doc_examples.shortest(_argv(command), out), why)
    return runs


RUNNER = """
import contextlib, io, json, os, runpy, sys, traceback
for argv in json.loads(sys.argv[1]):
    out, err, code, trace = io.StringIO(), io.StringIO(), 0, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if argv[0] == "rlscan":
                from rlscan.cli import main
                code = main(argv[1:]) or 0
            else:
                sys.argv = argv
                sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))  # as python SCRIPT puts it
                runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            if not isinstance(done.code, (int, type(None))):
                err.write(str(done.code) + "\\n")
        except BaseException:
            code, trace = 1, traceback.format_exc()
    print(json.dumps(dict(argv=argv, code=code, out=out.getvalue(), err=err.getvalue(), trace=trace)), flush=True)
"""


def _run_commands(argvs: list, seconds: float) -> list:
    """Run the commands one after another in one fresh interpreter (no TRITON_INTERPRET, as in a
    user's shell), from the repository's root; their results. Past ``seconds`` the interpreter
    and whatever it started are killed, and each command not finished gets a result that says so."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, json.dumps(argvs)], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"argv"')]
    finished = {tuple(r["argv"]) for r in results}
    late = f"not finished: the commands ran past {seconds:.0f} s together (stderr: {stderr[-1000:]})"
    return results + [dict(argv=list(a), code=1, out="", err="", trace=late) for a in argvs if tuple(a) not in finished]


def _commands_budget(config) -> float:
    """Seconds for every planned command together: most of pytest-timeout's limit on the test that
    runs them, where one is set, else 15 minutes."""
    limit = config.getoption("timeout", None)  # pytest-timeout's option, where it is installed
    if not limit:
        try:
            limit = config.getini("timeout")
        except ValueError:  # pytest-timeout is not installed
            limit = None
    return 0.8 * float(limit) if limit else 900.0


def _alone(argv) -> bool:
    """``rlscan plan`` chooses Triton's interpreter before Triton is imported: a process of its own."""
    return list(argv[:2]) == ["rlscan", "plan"] and "--help" not in argv


def _shared_folder(tmp_path_factory) -> pathlib.Path:
    """A folder of this test session that its pytest-xdist workers share (each has a base folder
    of its own in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="module")
def command_results(tmp_path_factory, pytestconfig):
    """Every planned command run once in the session: ``{command: (result, why it read only the
    help)}``. Under pytest-xdist the first worker to ask runs them and writes the results to
    a file the others wait for and read, so the commands never run several times at once."""
    from filelock import FileLock

    shared = _shared_folder(tmp_path_factory)
    runs = planned_runs(str(shared / "bench-out"))
    saved = shared / "docs-command-results.json"
    with FileLock(str(saved) + ".lock"):
        if saved.is_file():
            results = json.loads(saved.read_text())
        else:
            argvs = list(dict.fromkeys(tuple(argv) for argv, _ in runs.values()))
            deadline = time.monotonic() + _commands_budget(pytestconfig)
            results = []
            for group in [[a] for a in argvs if _alone(a)] + [[a for a in argvs if not _alone(a)]]:
                results += _run_commands(group, max(1.0, deadline - time.monotonic()))
            saved.write_text(json.dumps(results))
    by_argv = {tuple(r["argv"]): r for r in results}
    return {command: (by_argv[tuple(argv)], why) for command, (argv, why) in runs.items()}


def _says_no_gpu(result) -> bool:
    """Whether a command that needs a GPU said so, last, where there is none."""
    lines = (result["out"] + result["err"]).strip().splitlines()
    return not torch.cuda.is_available() and bool(lines) and re.search(r"\bGPU\b|\bCUDA\b", lines[-1]) is not None


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_command_runs(command, request):
    gpu = doc_examples.gpu_run(command)
    if gpu:
        pytest.skip(f"{gpu}; a machine without a GPU runs it (to say that it needs one)")
    missing = doc_examples.command_missing(command)
    if missing:
        pytest.skip(missing)
    result, why = request.getfixturevalue("command_results")[command]
    assert result["trace"] is None, f"{' '.join(result['argv'])}:\n{result['trace']}"
    assert result["code"] == 0 or _says_no_gpu(result), \
        f"{' '.join(result['argv'])} exited {result['code']}:\n{(result['err'] + result['out'])[-2000:]}"
    if result["code"] != 0:  # it needs a GPU: where there is one it would time it, and this test may not
        assert any(re.fullmatch(pattern, command) for pattern, _ in doc_examples.GPU_RUNS), \
            f"{command} needs a GPU: doc_examples.GPU_RUNS must say why a GPU machine skips it"
    if why:
        named = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", command))
        missing = [option for option in named if option not in result["out"]]
        assert not missing, f"{command}: {missing} not in {' '.join(result['argv'])} ({why})"
    shown = COMMANDS[command][1]
    if shown is not None and not why:
        assert result["out"].splitlines()[0] == shown, (result["out"][:500], shown)


def test_commands_are_found():
    assert {"rlscan bench --ops none --e2e --quick", "rlscan plan gae --shape 4096x2048 --layout tn",
            "rlscan --version", "python tools/verl_timing.py"} <= set(COMMANDS)
    assert doc_examples.shortest(["rlscan", "bench", "--e2e", "--out", "x"], "o") == \
        ["rlscan", "bench", "--e2e", "--ops", "none", "--out", "o", "--quick"]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_tables()
        write_records()
    elif sys.argv[1:2] == ["--headline"]:  # e.g. --headline gae:4096x2048 vtrace:1x1000000
        picks = [(op, *map(int, shape.split("x"))) for op, shape in (a.split(":") for a in sys.argv[2:])]
        print(render_headline(json.loads(DATA.read_text()), picks))
    else:
        print(render_tables(json.loads(DATA.read_text())))
