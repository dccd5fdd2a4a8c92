"""The user's documentation holds together: links resolve, pages stay short, numbers match the data.

* every relative link in README.md and docs/**/*.md names a file that exists, and an
  anchor (``page.md#heading``) names a heading of that page (GitHub's slugs);
* docs/ holds at most 20 files and every page at most 400 lines;
* the tables of record in docs/benchmarks.md are exactly what :func:`render_tables` makes of
  docs/bench-h200.json, the data of record;
* every number of the README's headline table is that JSON's, to the digits printed;
* each card's section of docs/records.md is what ``tools/gpu_record.py``'s ``render`` makes of
  its docs/record-<card>.json.

After a new ``rlscan bench --e2e --out bench-out`` run on the card, copy its bench.json
and bench.png to docs/bench-h200.{json,png} and rewrite the tables::

    python tests/test_docs.py --write
"""
import json
import math
import pathlib
import re
import sys

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

OPS = ("gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "eligibility_traces",
       "episodic_cumsum", "linear_scan")
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


def write_tables() -> None:
    text = BENCHMARKS.read_text()
    block = render_tables(json.loads(DATA.read_text()))
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    BENCHMARKS.write_text(f"{head}{BEGIN}\n\n{block}\n\n{END}{tail}")


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
        begin, end = record_markers(path)
        text = RECORDS_PAGE.read_text()
        head, rest = text.split(begin, 1)
        RECORDS_PAGE.write_text(f"{head}{begin}\n\n{render_record(path)}\n\n{end}{rest.split(end, 1)[1]}")


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


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_tables()
        write_records()
    elif sys.argv[1:2] == ["--headline"]:  # e.g. --headline gae:4096x2048 vtrace:1x1000000
        picks = [(op, *map(int, shape.split("x"))) for op, shape in (a.split(":") for a in sys.argv[2:])]
        print(render_headline(json.loads(DATA.read_text()), picks))
    else:
        print(render_tables(json.loads(DATA.read_text())))
