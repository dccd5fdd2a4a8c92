"""Output: a table printed as the run goes (rich when importable), a summary, JSON, a plot."""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
from typing import Optional

CELL = 16


def fmt_time(us) -> str:
    if us is None:
        return "—"
    if us < 999.5:
        return f"{us:.3g}µs"
    if us < 999.5e3:
        return f"{us / 1e3:.3g}ms"
    return f"{us / 1e6:.3g}s"


def fmt_speedup(x: float) -> str:
    return f"×{x:.0f}" if x >= 100 else f"×{x:.2g}"


class Printer:
    """Lines to the terminal: through rich when it is installed, else plain ``print``."""

    def __init__(self):
        try:
            from rich.console import Console

            self.console = Console(highlight=False, soft_wrap=True)
            if not self.console.is_terminal:  # a log file: wide enough for the summary table
                self.console = Console(highlight=False, soft_wrap=True, width=220)
        except ImportError:
            self.console = None

    def line(self, text: str = "", style: str = "") -> None:
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text(text, style=style or ""))
        else:
            print(text, flush=True)

    def styled(self, parts) -> None:
        """Print ``[(text, style), ...]`` as one line."""
        if self.console is not None:
            from rich.text import Text

            line = Text()
            for text, style in parts:
                line.append(text, style=style or "")
            self.console.print(line)
        else:
            print("".join(text for text, _ in parts), flush=True)

    def status(self, text: str):
        """A transient progress line (a no-op without a terminal)."""
        if self.console is not None and self.console.is_terminal:
            return self.console.status(text)
        return _Nothing()

    def table(self, title: str, columns, rows) -> None:
        if self.console is not None:
            from rich.table import Table

            table = Table(title=title, title_justify="left")
            for c in columns:
                table.add_column(c, justify="right" if c != columns[0] else "left")
            for r in rows:
                table.add_row(*r)
            self.console.print(table)
            return
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(columns)]
        print(title)
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths)), flush=True)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, *args, **kwargs):
        pass


# ----------------------------------------------------------------------------- the live table


def op_header(p: Printer, op: str, impls) -> None:
    p.line()
    p.line(f"{op}", style="bold")
    cols = ["progress".ljust(16), "N×T".ljust(14), "floor".rjust(9), "rlscan".rjust(10), "device".rjust(10),
            "/floor".rjust(7), "dev/bw".rjust(7), " "]
    cols += [i.label.ljust(CELL) for i in impls[1:]]
    p.line(" ".join(cols), style="dim")


def alt_cell(res: dict, rlscan_us):
    """(text, style) of one alternative's cell."""
    status = res["status"]
    if status == "ok":
        if rlscan_us:
            x = res["full_us"] / rlscan_us
            return f"{fmt_time(res['full_us'])} {fmt_speedup(x)}", ("green" if x >= 1 else "red")
        return fmt_time(res["full_us"]), ""
    if status == "skipped":
        if "estimate_s" in res:
            return f"skip ~{res['estimate_s']:.3g}s", "dim"
        return ("·" if res["note"].startswith("not in") else "skip"), "dim"
    if status == "wrong":
        return f"WRONG {res['rel_err']:.0e}", "bold red"
    if status == "failed":
        return ("OOM" if "memory" in res["note"] else "failed"), "yellow"
    return "n/a", "dim"


def row(p: Printer, progress: str, cell: dict, impls) -> None:
    shape = f"{cell['N']}×{cell['T']}"
    if cell.get("skipped"):
        p.styled([(f"{progress:<16} {shape:<14} ", ""), (cell["skipped"], "dim")])
        return
    rl = cell["impls"]["rlscan"]
    rl_us = rl.get("full_us") if rl["status"] == "ok" else None
    parts = [(f"{progress:<16} {shape:<14} {fmt_time(cell['floor_us']):>9} ", "")]
    if rl["status"] == "ok":
        dev_bw = rl.get("device_over_bandwidth_floor")
        parts.append((f"{fmt_time(rl_us):>10} {fmt_time(rl.get('device_us')):>10} "
                      f"{rl_us / cell['floor_us']:>7.2f} {'—' if dev_bw is None else f'{dev_bw:.2f}':>7}   ", "bold"))
    else:
        text, style = alt_cell(rl, None)
        parts.append((f"{text:>37}   ", style or "bold red"))
    for impl in impls[1:]:
        text, style = alt_cell(cell["impls"][impl.key], rl_us)
        parts.append((f"{text:<{CELL}} ", style))
    p.styled(parts)


# ----------------------------------------------------------------------------- summary


def speedups(cells, key: str):
    """rlscan's full-call speedup over ``key`` at every cell where both were measured."""
    out = []
    for c in cells:
        if c.get("skipped"):
            continue
        rl, alt = c["impls"]["rlscan"], c["impls"].get(key)
        if alt and rl["status"] == "ok" and alt["status"] == "ok":
            out.append(alt["full_us"] / rl["full_us"])
    return out


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summary(p: Printer, cells, impls_by_op: dict) -> dict:
    keys = []
    for impls in impls_by_op.values():
        keys += [i.key for i in impls[1:] if i.key not in keys]
    labels = {i.key: i.label for impls in impls_by_op.values() for i in impls}
    rows, doc = [], {}
    for op in impls_by_op:
        mine = [c for c in cells if c["op"] == op]
        ratios = [c["impls"]["rlscan"]["full_us"] / c["floor_us"] for c in mine
                  if not c.get("skipped") and c["impls"]["rlscan"]["status"] == "ok"]
        entry = {"rlscan_over_floor_median": statistics.median(ratios) if ratios else None}
        line = [op, f"{entry['rlscan_over_floor_median']:.2f}" if ratios else "—"]
        for k in keys:
            xs = speedups(mine, k)
            if xs:
                entry[k] = dict(geomean=geomean(xs), min=min(xs), max=max(xs), cells=len(xs))
                line.append(f"{fmt_speedup(geomean(xs))} ({fmt_speedup(min(xs))}–{fmt_speedup(max(xs))})")
            else:
                line.append("—")
        doc[op] = entry
        rows.append(line)
    p.line()
    p.table("rlscan's full-call speedup: geometric mean over the measured cells (min–max)",
            ["op", "rlscan/floor (median)"] + [labels[k] for k in keys], rows)
    return doc


# ----------------------------------------------------------------------------- files


def write_json(path: str, doc: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(_clean(doc), f, indent=1, allow_nan=False)
    os.replace(tmp, path)


def _clean(x):
    """JSON-safe: non-finite floats become None, tuples lists, other objects strings."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if x is None or isinstance(x, (bool, int, str)):
        return x
    return str(x)


def lines_to_draw(cells, preferred) -> tuple:
    """The alternatives the plot draws, ``(solid, dashed)``: the first two distinct keys of
    ``preferred`` measured in any cell (``None`` where fewer were)."""
    measured = [key for key in dict.fromkeys(preferred) if speedups(cells, key)]
    return tuple((measured + [None, None])[:2])


def plot(path: str, cells, solid: str, dashed: Optional[str], title: str) -> bool:
    """rlscan's speedup against T, one panel per op, one colour per N: a solid line against
    the ``solid`` alternative, a dashed one against ``dashed`` (if any), each where it was
    measured. Only the N where either was measured are drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return False
    ops = list(dict.fromkeys(c["op"] for c in cells))
    keys = [(solid, "-o")] + ([(dashed, "--x")] if dashed else [])
    ns = sorted({c["N"] for c in cells if any(speedups([c], key) for key, _ in keys)})
    cols = min(4, max(1, len(ops)))
    rows = math.ceil(len(ops) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.6 * rows), squeeze=False)
    cmap = plt.get_cmap("viridis")
    colour_of = {n: cmap(i / max(1, len(ns) - 1)) for i, n in enumerate(ns)}
    for ax, op in zip(axes.flat, ops):
        for n, colour in colour_of.items():
            mine = sorted((c for c in cells if c["op"] == op and c["N"] == n), key=lambda c: c["T"])
            for key, style in keys:
                points = [(c["T"], x) for c in mine for x in speedups([c], key)]
                if points:
                    ax.plot(*zip(*points), style, color=colour, markersize=3.5, linewidth=1.2)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("T (steps)")
        ax.set_ylabel("speedup (full call)")
        ax.grid(True, which="both", alpha=0.2)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    # one entry per N, whichever alternative was measured for it, then one per line style
    handles = [plt.Line2D([], [], color=colour, marker="s", linestyle="none", label=f"N={n}")
               for n, colour in colour_of.items()]
    handles += [plt.Line2D([], [], color="black", linestyle=style[:-1], marker=style[-1], markersize=3.5,
                           label=f"against {key}") for key, style in keys]
    if ns:
        fig.legend(handles=handles, loc="center right", fontsize=8)
    against = f"solid against {solid}" + (f", dashed against {dashed}" if dashed else "")
    fig.suptitle(f"{title}\nrlscan's speedup: {against}", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.9, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
