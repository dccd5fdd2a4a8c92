"""What a call matches in the launch settings table, and why: ``rlscan plan``.

The table matches on the call's ``[T, B]`` shape, its layout, the op's direction, how many
``[T, B]`` tensors its kernel reads and writes (``series``), the compute dtype and
``torch.use_deterministic_algorithms``. The op decides some of these, so :func:`probe`
runs the op once at a tiny shape of the same layout and reads what its launch plan
matched; the requested ``T`` and ``N`` then replace the tiny ones. The probe runs on the
GPU where there is one, else on the CPU through Triton's interpreter.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Optional

from . import settings

PROBE_T, PROBE_N = 3, 2


def sm_count(given: Optional[int] = None) -> tuple:
    """``(SMs, where the number came from)``: ``given``, the current GPU's, or an H200's."""
    if given:
        return int(given), "--device-sm"
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count, "this GPU"
    return settings.DEFAULT_N_SM, "assumed, as on an H200: no GPU here"


def probe_device():
    """The device a probe runs on: the GPU if present, else the CPU through the interpreter
    (which must be chosen before Triton is imported)."""
    import torch

    from .._backend import interpreting

    if interpreting():
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if "triton" in sys.modules:
        raise RuntimeError("rlscan plan: no GPU, and Triton was imported without TRITON_INTERPRET=1; "
                           "run it in a fresh process (the `rlscan plan` command does)")
    os.environ["TRITON_INTERPRET"] = "1"
    return torch.device("cpu")


@contextlib.contextmanager
def fresh_plans():
    """Forget cached launch plans and fast-path entries, so the next call makes its own plan."""
    from .. import _cache
    from . import launch

    _cache.clear()
    with launch.recording_plans() as made:
        yield made
    _cache.clear()


def call_query(case, inputs) -> dict:
    """Run the bench case ``case`` on ``inputs`` through the Triton path once and return the
    ``query`` its launch plan matched on (the last plan made: Retrace's table prologue makes
    the plain Retrace plan it wraps)."""
    import rlscan

    with fresh_plans() as made, rlscan.use_backend("triton"):
        case.call(rlscan, inputs)
    if not made:
        raise RuntimeError(f"{case.name}: the call made no launch plan")
    return dict(made[-1].query)


def probe(op: str, N: int, T: int, layout: str, dtype) -> dict:
    """The query of ``op`` at ``N`` environments and ``T`` steps in ``layout`` (``"tn"``:
    ``[T, N]``, ``"nt"``: ``[N, T]``), without running it at that size."""
    from ..bench.cases import CASES, make_inputs

    device = probe_device()
    inputs = make_inputs(CASES[op], PROBE_T, PROBE_N, dtype, layout, device)
    q = call_query(CASES[op], inputs)
    q.update(T=int(T), B=int(N))
    if T == 1:
        q["time_contiguous"] = False  # a single step is not contiguous along time
    return q


def describe_setting(cfg: settings.Config) -> str:
    """A setting's fields that differ from the defaults, and its chunks."""
    defaults = settings.Config(cfg.kind, cfg.block_b, cfg.num_warps)
    fields = [f"{cfg.kind}", f"block_b={cfg.block_b}", f"num_warps={cfg.num_warps}"]
    for name in ("block_t", "stripes", "steps", "stages", "unroll", "step_scan", "lookback", "link"):
        if getattr(cfg, name) != getattr(defaults, name):
            fields.append(f"{name}={getattr(cfg, name)}")
    chunks = f"{cfg.n_chunks} chunk{'s' if cfg.n_chunks > 1 else ''} of {cfg.chunk_len} steps"
    if cfg.kind in settings.CHAINED:
        chunks += ", chained in one launch"
    elif cfg.n_chunks > 1:
        chunks += ", two launches"
    return " ".join(fields) + f" ({chunks})"


def _conditions(when: dict) -> str:
    parts = []
    for key, value in when.items():
        if isinstance(value, list):
            lo, hi = value
            if lo == hi:
                parts.append(f"{key} = {lo}")
            elif hi is None or lo is None:
                parts.append(f"{key} >= {lo}" if hi is None else f"{key} <= {hi}")
            else:
                parts.append(f"{lo} <= {key} <= {hi}")
        elif isinstance(value, dict):
            bound = [f">= {value['min']}" if "min" in value else "", f"< {value['below']}" if "below" in value else ""]
            parts.append(f"ceil(B / {value['block_b']}) per SM {' and '.join(b for b in bound if b)}")
        else:
            parts.append(f"{key} = {str(value).lower()}")
    return ", ".join(parts) or "none (catches every call the classes above do not)"


def report(op: str, N: int, T: int, layout: str, dtype, n_sm: Optional[int] = None,
           deterministic: bool = False, table: Optional[settings.Table] = None, gpu: Optional[str] = None) -> str:
    """What ``rlscan plan`` prints: the table, the call, the class matched, the settings.
    ``gpu``: plan as on a GPU of that name (default: this GPU's, else none: the H200 table)."""
    sm, sm_source = sm_count(n_sm)
    if gpu and not n_sm:
        sm, sm_source = None, None  # the named GPU's table says its SMs, unless --device-sm does
    query = probe(op, N, T, layout, dtype)
    note = None
    if table is None:
        name = gpu or settings.current_device_name()
        table = settings.active_table(name, sm)
        chosen = settings.table_path(name, sm)
        if str(chosen.expanduser()) != table.path:
            which = f"{chosen} did not load, so the shipped table stands in"
        elif chosen.parent == settings.TABLES:
            which = "shipped"
            note = settings.shipped_for(name, sm).note
        else:
            which = "RLSCAN_SETTINGS" if os.environ.get("RLSCAN_SETTINGS", "").strip() else "this GPU's tuned table"
        if sm is None:
            sm, sm_source = table.n_sm, f"the table's; --device-sm gives {gpu}'s"
        which += f"; read for {gpu} (--gpu)" if gpu else ""
    else:
        which = "given"
    q = settings.Query(query["T"], query["B"], query["time_contiguous"], sm, query["reverse"], deterministic,
                       query["series"], query["words"])
    c, chosen_settings = settings.candidates(q, table)
    index = table.classes.index(c)
    shape = f"[T, N] = [{T}, {N}]" if layout == "tn" else f"[N, T] = [{N}, {T}]"
    lines = [
        f"rlscan plan: {op}, {shape} ({'time-major' if layout == 'tn' else 'contiguous along time'}), "
        f"{str(dtype).replace('torch.', '')}",
        f"table: {table.path} ({which}; measured on {table.gpu or 'an unnamed GPU'})",
        *([f"note:  {note}"] if note else []),
        f"call:  T={q.T} B={q.B} time_contiguous={q.time_contiguous} reverse={q.reverse} series={q.series} "
        f"words={q.words} deterministic={q.deterministic}, {sm} SMs ({sm_source})",
        f"class {index}: {c.name}",
        f"  when: {_conditions(c.when)}",
        "settings, best first (the first call keeps the first whose kernel does not spill registers; "
        "one that fails to compile falls to the next):",
    ]
    for i, s in enumerate(chosen_settings, 1):
        lines.append(f"  {i}. {describe_setting(settings.resolve(s, q))}")
        lines.append(f"     reason:   {s.reason}")
        ratio = f" (ratio {s.ratio:.3g})" if s.ratio is not None else ""
        lines.append(f"     measured: {s.measured or 'not measured (a fallback)'}{ratio}")
    skipped = [s for s in c.settings if s not in chosen_settings]
    for s in skipped:
        lines.append(f"  -  {describe_setting(settings.resolve(s, q))}: not for this call ({_conditions(s.when)})")
    lines.append("then, if every setting fails to compile: the sequential kernel, then the CPU path.")
    return "\n".join(lines)
