"""Launch decisions outside the shape classes: the settings table's ``policy`` section.

A shape class chooses a kernel's settings for a call; a few decisions apply across classes
or to kernels the engine does not launch (GAE's masked row kernels, Retrace's table
prologue). Each is a named entry of the table's ``policy`` object::

    "state_in_steps_per_warp": {"value": 128, "candidates": [32, 64, 128, 256, 4096],
                                "shapes": [{"N": 512, "T": 2048, "layout": "nt"}, ...],
                                "reason": "...", "measured": "..."}

* ``value``: what calls use (its form is the decision's own, :data:`DECISIONS`);
* either ``candidates`` and ``shapes``: a choice, which ``rlscan tune`` re-measures by
  timing each candidate at those calls (``ratio``: the shipped value's time over the
  chosen one's, written by ``rlscan tune``); or ``limit``: why the value is a bound that
  ``rlscan tune`` leaves alone;
* ``reason`` (why) and ``measured`` (the evidence, or ``null``), which ``rlscan plan``
  prints for a call the decision applies to.

A table without a ``policy`` section, or without some entry, takes the entry of the
shipped table (``tables/h200.json``; the settings loader fills it in). Tests and tools force a value with
:func:`forced_policy` (or by setting an entry of :data:`FORCED`); nothing else changes one.
"""
from __future__ import annotations

import contextlib
import math
from typing import Callable, NamedTuple, Optional


def _whole(lo: int) -> Callable:
    def check(v):
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo

    return check


def _pow2(v) -> bool:
    return _whole(1)(v) and v & (v - 1) == 0


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _row_tiles(v) -> bool:
    """``[[most T or null, BLOCK_T, warps, look-back], ...]``, the last bound ``null``."""
    return isinstance(v, list) and all(
        isinstance(e, list) and len(e) == 4 and (e[0] is None or _whole(1)(e[0])) and _pow2(e[1]) and _pow2(e[2])
        and _whole(0)(e[3]) for e in v)


class Kind(NamedTuple):
    check: Callable  # whether a JSON value is of the decision's form
    form: str  # that form, in words (for the validation's message)
    what: str  # what the decision decides (``rlscan plan`` prints it)


#: every decision the policy section holds, by name
DECISIONS = {
    "max_local_bytes": Kind(
        _whole(0), "a whole number of bytes >= 0",
        "bytes of local memory (spilled registers) per thread above which a plan's first call passes over a "
        "candidate setting for the next"),
    "state_in_steps_per_warp": Kind(
        _whole(1), "a whole number >= 1",
        "steps per warp from which a tile over several warps takes the state carried into each step by reading "
        "it back (or an exclusive scan) rather than by gathering the neighbouring row"),
    "gae_lambda_min": Kind(
        _positive, "a positive number",
        "the smallest scalar λ for which the masked GAE runs in one pass (E = Â + W/λ); below it, two scans"),
    "gae_row_min_t": Kind(
        _whole(1), "a whole number >= 1",
        "steps from which masked GAE rows contiguous in time run the row kernel, not two lanes of the engine"),
    "gae_row_tiles": Kind(
        _row_tiles, "[[most T or null, BLOCK_T (power of two), warps (power of two), look-back >= 0], ...]",
        "the masked row kernel's tiles: the first entry whose bound holds T; a look-back of 0 walks a row in one "
        "program, above 0 chains one program per tile by that many words per round trip"),
    "retrace_table_elements": Kind(
        _pow2, "a power of two",
        "positions x actions one program of retrace_from_q's table prologue reads (BLOCK_P = this / BLOCK_A, "
        "at least 16)"),
    "flip_max_block_t": Kind(
        _whole(0), "a whole number >= 0",
        "the longest tile (BLOCK_T) of a reverse scan kernel whose first axis runs back in time (FLIP), so that its "
        "scan is a forward one; 0: no tile is flipped"),
    "retrace_max_block_a": Kind(
        _pow2, "a power of two",
        "actions the table prologue loads per step of its loop (BLOCK_A), and the most that take its vector path"),
}

_KEYS = {"value", "candidates", "shapes", "limit", "reason", "measured", "ratio"}


class Decision(NamedTuple):
    name: str
    value: object  # as calls use it (``gae_row_tiles``: tuples, an open bound as ``math.inf``)
    reason: str
    measured: Optional[str]
    limit: Optional[str]  # why ``rlscan tune`` leaves it alone, for a bound; else None
    candidates: tuple  # the values ``rlscan tune`` times, for a choice
    shapes: tuple  # the calls ``{"N", "T", "layout"}`` it times them at
    ratio: Optional[float]


def usable(name: str, value):
    """A decision's JSON value in the form calls read (lists become tuples; ``gae_row_tiles``'
    open bound ``null`` becomes ``math.inf``)."""
    if name == "gae_row_tiles":
        return tuple((math.inf if most is None else most, t, w, lb) for most, t, w, lb in value)
    return value


def _fail(where: str, field: str, expected: str, got) -> None:
    raise ValueError(f"{where}: field {field!r}: expected {expected}, got {got!r}")


def check_shape(shape) -> bool:
    return (isinstance(shape, dict) and set(shape) == {"N", "T", "layout"} and _whole(1)(shape["N"])
            and _whole(1)(shape["T"]) and shape["layout"] in ("tn", "nt"))


def validate(raw, where: str) -> dict:
    """The ``policy`` section ``raw`` checked: ``{name: Decision}``; ``ValueError`` names the
    entry and the field that is wrong."""
    if not isinstance(raw, dict):
        _fail(where, "policy", "an object of named decisions", raw)
    out = {}
    for name, entry in raw.items():
        at = f"{where}: policy {name!r}"
        kind = DECISIONS.get(name)
        if kind is None:
            _fail(f"{where}: policy", name, f"a decision among {', '.join(DECISIONS)}", "an unknown decision")
        if not isinstance(entry, dict):
            _fail(at, "(decision)", "an object", entry)
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            _fail(at, unknown[0], f"one of the fields {', '.join(sorted(_KEYS))}", "an unknown field")
        if "value" not in entry or not kind.check(entry["value"]):
            _fail(at, "value", kind.form, entry.get("value"))
        limit, candidates, shapes = entry.get("limit"), entry.get("candidates"), entry.get("shapes")
        if limit is not None:
            if not (isinstance(limit, str) and limit.strip()):
                _fail(at, "limit", "why the value is a bound rlscan tune leaves alone", limit)
            if candidates is not None or shapes is not None:
                _fail(at, "candidates" if candidates is not None else "shapes", "nothing (a limit is not tuned)",
                      candidates if candidates is not None else shapes)
        else:
            if not (isinstance(candidates, list) and candidates and all(kind.check(c) for c in candidates)):
                _fail(at, "candidates", f"a non-empty list of values, each {kind.form} (or a 'limit' instead)",
                      candidates)
            if not (isinstance(shapes, list) and shapes and all(check_shape(s) for s in shapes)):
                _fail(at, "shapes", 'a non-empty list of {"N": whole >= 1, "T": whole >= 1, "layout": "tn" or "nt"}',
                      shapes)
        reason, measured, ratio = entry.get("reason"), entry.get("measured"), entry.get("ratio")
        if not (isinstance(reason, str) and reason.strip()):
            _fail(at, "reason", "a one-line explanation", reason)
        if measured is not None and not isinstance(measured, str):
            _fail(at, "measured", "the evidence as text, or null", measured)
        if ratio is not None and not _positive(ratio):
            _fail(at, "ratio", "a positive number, or null", ratio)
        out[name] = Decision(name, usable(name, entry["value"]), reason, measured, limit,
                             tuple(usable(name, c) for c in candidates or ()), tuple(dict(s) for s in shapes or ()),
                             ratio)
    return out


#: values forced by tests and tools, by decision name (:func:`forced_policy`)
FORCED: dict = {}
_MISSING = object()


@contextlib.contextmanager
def forced_policy(**values):
    """Force decisions (by name, in the form calls read) inside a ``with`` block. Launch
    plans made before keep what they chose: tests and tools make fresh ones."""
    unknown = sorted(set(values) - set(DECISIONS))
    if unknown:
        raise ValueError(f"unknown policy decision(s) {', '.join(unknown)}; choose from {', '.join(DECISIONS)}")
    previous = dict(FORCED)
    FORCED.update(values)
    try:
        yield
    finally:
        FORCED.clear()
        FORCED.update(previous)


def decision(name: str, table) -> Decision:
    """The entry ``name`` of ``table``'s policy (a :class:`rlscan._triton.settings.Table`,
    whose loader filled the entries it lacks from the shipped table)."""
    return table.policy[name]


def value(name: str, table):
    """What calls planned with ``table`` use for the decision ``name``: a forced value, else
    the table's."""
    forced = FORCED.get(name, _MISSING)
    return table.policy[name].value if forced is _MISSING else forced
