"""What a call matches in the launch settings table, and why: ``rlscan plan``.

The table matches on the call's ``[T, B]`` shape, its layout, the op's direction, how many
``[T, B]`` tensors its kernel reads and writes (``series``), the compute dtype and
``torch.use_deterministic_algorithms``. The op decides some of these, so :func:`probe`
runs the op once at a tiny shape of the same layout and reads what its launch plan
matched; the requested ``T`` and ``N`` then replace the tiny ones. The probe runs on the
GPU where there is one, else on the CPU through Triton's interpreter.

After the class and its settings, the report prints the table's policy decisions
(:mod:`rlscan._triton.policy`) that decide something for the call: the local-memory limit
where a plan has several settings, how tiles over several warps take the state carried in,
GAE's masked one pass and row kernel, Retrace-from-Q's table prologue.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import NamedTuple, Optional

from .._triton import policy, settings
from .cases import CASES, make_inputs

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
    from .._triton import launch

    _cache.clear()
    with launch.recording_plans() as made:
        yield made
    _cache.clear()


def call_plan(case, inputs):
    """Run the bench case ``case`` on ``inputs`` through the Triton path once and return the
    launch plan it made (the last: Retrace's table prologue makes the plain Retrace plan it
    wraps)."""
    import rlscan

    with fresh_plans() as made, rlscan.use_backend("triton"):
        case.call(rlscan, inputs)
    if not made:
        raise RuntimeError(f"{case.name}: the call made no launch plan")
    return made[-1]


def call_query(case, inputs) -> dict:
    """The ``query`` the launch plan of ``case`` on ``inputs`` matched on (:func:`call_plan`)."""
    return dict(call_plan(case, inputs).query)


class Probed(NamedTuple):
    query: dict  # what the table matches on, at the requested shape
    emit: object  # the op's EMIT step (whether it reads the state carried in decides ``state_in``)
    reloadable: bool  # whether its first output holds the compute dtype (the state can be read back)


def probe_call(op: str, N: int, T: int, layout: str, dtype) -> Probed:
    """What the table decides ``op`` on, at ``N`` environments and ``T`` steps in ``layout``
    (``"tn"``: ``[T, N]``, ``"nt"``: ``[N, T]``), without running it at that size."""
    device = probe_device()
    inputs = make_inputs(CASES[op], PROBE_T, PROBE_N, dtype, layout, device)
    plan = call_plan(CASES[op], inputs)
    q = dict(plan.query)
    q.update(T=int(T), B=int(N))
    if T == 1:
        q["time_contiguous"] = False  # a single step is not contiguous along time
    return Probed(q, plan.spec[1], plan.reloadable)


def probe(op: str, N: int, T: int, layout: str, dtype) -> dict:
    """The query of ``op`` at ``N`` environments and ``T`` steps in ``layout`` (:func:`probe_call`)."""
    return probe_call(op, N, T, layout, dtype).query


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
    probed = probe_call(op, N, T, layout, dtype)
    query = probed.query
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
        "settings, best first (the first call keeps the first whose kernel keeps at most "
        f"{policy.value('max_local_bytes', table)} bytes of local memory per thread; one that fails to compile "
        "falls to the next):",
    ]
    for i, s in enumerate(chosen_settings, 1):
        lines.append(f"  {i}. {describe_setting(settings.resolve(s, q))}")
        lines.append(f"     reason:   {s.reason}")
        ratio = f" (ratio {s.ratio:.3g})" if s.ratio is not None else ""
        lines.append(f"     measured: {s.measured or 'not measured (a fallback)'}{ratio}")
    skipped = [s for s in c.settings if s not in chosen_settings]
    for s in skipped:
        why = _conditions(s.when) if not settings.holds(s.when, q) else "a chained kind, not under deterministic " \
                                                                        "algorithms: its look-back varies the last bits"
        lines.append(f"  -  {describe_setting(settings.resolve(s, q))}: not for this call ({why})")
    lines.append("then, if every setting fails to compile: the sequential kernel, then the CPU path.")
    decided = policy_lines(op, q, probed, [settings.resolve(s, q) for s in chosen_settings], table)
    if decided:
        lines.append("decisions outside the classes (the table's policy) for this call:")
        lines.extend(decided)
    return "\n".join(lines)


def _decision(table, name: str, decides: str) -> list:
    """A policy decision's lines: its value and what it decides for the call, its reason,
    and its evidence; for a limit, why ``rlscan tune`` leaves it alone."""
    d = policy.decision(name, table)
    lines = [f"  {name} = {_shown(policy.value(name, table))}: {decides}", f"     reason:   {d.reason}"]
    ratio = f" (ratio {d.ratio:.3g})" if d.ratio is not None else ""
    lines.append(f"     measured: {d.measured or 'not measured'}{ratio}")
    if d.limit:
        lines.append(f"     a limit, not tuned: {d.limit}")
    else:
        lines.append(f"     rlscan tune times {len(d.candidates)} candidates at "
                     + ", ".join(f"{s['N']} x {s['T']} ({s['layout']})" for s in d.shapes))
    return lines


def _shown(value) -> str:
    """A decision's value as the table writes it (an open bound as ``null``)."""
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return "null" if value == float("inf") else str(value)


def policy_lines(op: str, q: settings.Query, probed: Probed, resolved: list, table: settings.Table) -> list:
    """The lines of the policy decisions that decide something for the call ``q`` of ``op``,
    whose plan tries the settings ``resolved``, in order."""
    from .._triton import launch

    lines = []
    if len(resolved) > 1:
        limit = policy.value("max_local_bytes", table)
        lines += _decision(table, "max_local_bytes", f"setting 1 runs unless its kernel keeps more than {limit} "
                                                     "bytes of local memory per thread (then the next, and so on)")
    tiles = [(i, c) for i, c in enumerate(resolved, 1) if c.kind in ("scan", "chained_scan") and c.num_warps > 1]
    if tiles and launch.reads_state_in(probed.emit):
        per_warp = policy.value("state_in_steps_per_warp", table)
        ways = "; ".join(f"setting {i}, {c.block_t // c.num_warps} steps per warp: "
                         f"{launch.state_in(probed.emit, c, probed.reloadable, per_warp)}" for i, c in tiles)
        lines += _decision(table, "state_in_steps_per_warp", f"the state carried into each step ({ways})")
    if op == "gae":
        lambda_min = policy.value("gae_lambda_min", table)
        lines += _decision(table, "gae_lambda_min",
                           f"with mask=, a scalar λ >= {lambda_min} runs the one pass, a smaller one two scans")
        min_t = policy.value("gae_row_min_t", table)
        if q.time_contiguous and q.T < min_t:
            lines += _decision(table, "gae_row_min_t", f"with mask=, rows of {q.T} steps run as two lanes of the "
                                                       "engine (the settings above, environments doubled)")
        elif q.time_contiguous:
            lines += _decision(table, "gae_row_min_t", f"with mask= and a scalar γ, rows of {q.T} steps take the "
                                                       "row kernel")
            tile = next((tuple(t) for most, *t in policy.value("gae_row_tiles", table) if q.T <= most), None)
            if tile is None:
                rows = f"no entry holds rows of {q.T} steps: two lanes of the engine"
            else:
                block_t, warps, lookback = tile
                how = (f"{-(-q.T // block_t)} tiles per row chained by a look-back of {lookback} words per round trip"
                       if lookback else "one program walking each row")
                rows = f"{block_t}-step tiles on {warps} warps, {how}"
            lines += _decision(table, "gae_row_tiles", rows)
    if op in ("retrace", "retrace_from_q"):
        most, elements = policy.value("retrace_max_block_a", table), policy.value("retrace_table_elements", table)
        lines += _decision(table, "retrace_table_elements",
                           f"retrace_from_q's table prologue reads {elements} positions x actions per program "
                           f"(BLOCK_P = max(16, {elements} // BLOCK_A))")
        lines += _decision(table, "retrace_max_block_a",
                           f"BLOCK_A = min({most}, the actions rounded up to a power of two); contiguous tables of "
                           f"up to {most} actions take the vector path")
    return lines
