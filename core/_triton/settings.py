"""Launch settings as data: the table of shape classes, its loader, and the matcher.

A table (``tables/h200.json`` ships with rlscan; ``rlscan tune`` writes one for another
GPU) lists shape classes in match order. Each class has conditions (``when``) on the call
and an ordered list of settings; the first class whose conditions all hold decides the
call, and its settings whose own ``when`` holds are the candidates, best first::

    configs_for(T, B, time_contiguous, n_sm, reverse, deterministic, series, words)
        = (setting(c) for c in first_matching_class.settings if c.when holds)

Conditions (every one optional; all must hold):

* ``T``, ``B``, ``series``: ``[lo, hi]``, inclusive, ``null`` for no bound (``series`` is
  the number of ``[T, B]`` tensors the kernel reads and writes, 0 where unknown);
* ``time_contiguous``, ``reverse``, ``deterministic`` (``torch.use_deterministic_algorithms``),
  ``words`` (computed in float32, so a pair fits one 64-bit word): ``true`` or ``false``;
* ``programs_per_sm``: ``{"block_b": b, "min": lo, "below": hi}``, holding where
  ``lo * n_sm <= ceil(B / b) < hi * n_sm`` (either bound optional).

Under ``torch.use_deterministic_algorithms(True)`` no chained kind is a candidate, whatever
the conditions say (:func:`applies`): their look-back makes the last bits vary run to run.
A class that such a call can match keeps a setting of another kind without conditions.

A setting holds :class:`Config` fields (``kind``, ``block_b``, ``num_warps``, ``block_t``,
``stripes``, ``steps``, ``stages``, ``unroll``, ``step_scan``, ``lookback``, ``link``) and
a chunking rule, ``chunks``:

* ``"one"``: time is not split (a chained kind still runs one window per program);
* ``"split_if_few_blocks"``: where the environment blocks alone make fewer programs than
  SMs, ``T >= 1024`` and there are at least 4 windows, time is split into chunks for about
  ``programs_per_sm`` programs per SM, run in two launches;
* ``"split"``: always ``min(max_chunks, ceil(programs_per_sm * n_sm / blocks))`` chunks.

Sizes never exceed the problem: ``block_b <= pow2(B)``, ``block_t <= pow2(T)`` and
``stripes <= pow2(ceil(T / steps))``. Each setting also carries a one-line ``reason`` and
``measured`` (the ratio that chose it, or ``null`` for a fallback nobody timed).

Beside the classes, a table's ``policy`` section holds the launch decisions that apply across
them or to kernels outside the engine (the local-memory limit, how tiles take the state
carried in, GAE's masked row kernels, Retrace's table prologue), each with its reason and
evidence: :mod:`rlscan._triton.policy`. A table that lacks some takes the shipped table's.

Which table: ``RLSCAN_SETTINGS=/path.json`` if set, else
``~/.cache/rlscan/settings/<GPU name>.json`` if present, else a shipped table
(``tables/*.json``, one per card it was measured on): the one measured on this GPU's model
(``H100`` in ``NVIDIA H100 80GB HBM3``) with its SM count, else the closest by SM count, with
a note that ``rlscan plan`` prints. Without a GPU, ``h200.json``. A user table that does not
load or validate warns once and the shipped one is used.
"""
from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path
from typing import Callable, NamedTuple, Optional

from . import policy as _policy


class Config(NamedTuple):
    kind: str  # "scan", "stripe", "block", "chained", "chained_scan" or "chained_stripe"
    block_b: int  # environments per program
    num_warps: int
    block_t: int = 1  # scan, chained_scan: rows of time per tile
    stripes: int = 1  # stripe: stripes per window
    steps: int = 1  # stripe: steps per stripe
    n_chunks: int = 1  # programs along time
    chunk_len: int = 0
    block_c: int = 1
    stages: int = 0  # > 1: software-pipeline the loads of this many tiles (``tl.range(num_stages=)``)
    unroll: int = 0  # > 1: unroll the loop over tiles this many times
    test_lookback: bool = False  # chained kinds, tests only: make the look-back compose published pairs
    step_scan: str = "registers"  # block, chained: scan the steps in each thread ("registers") or "shuffles"
    lookback: int = 1  # chained kinds: predecessors read per round trip of the look-back
    link: str = "flags"  # chained kinds: pairs published with flags, or as one word each ("words", float32 only)


KINDS = ("scan", "stripe", "block", "chained", "chained_scan", "chained_stripe")
CHAINED = ("chained", "chained_scan", "chained_stripe")  # one launch, windows chained by a decoupled look-back
FAMILIES = {"scan": "tile", "chained_scan": "tile", "stripe": "stripe", "block": "stripe", "chained": "stripe",
            "chained_stripe": "stripe"}  # steps in a tile across threads, or held in each thread

# Largest BLOCK_C * BLOCK_B tile of chunk pairs one program folds in registers.
MAX_CHUNK_TILE = 4096
SPLIT_MIN_T = 1024  # below this, a second launch does not pay for itself
SPLIT_MIN_WINDOWS = 4

TABLES = Path(__file__).with_name("tables")
SHIPPED = TABLES / "h200.json"  # the table for calls planned without a GPU
CACHE_DIR = Path("~/.cache/rlscan/settings")
DEFAULT_N_SM = 132  # an H200's, assumed where no GPU is present


def pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def window(cfg: Config) -> int:
    """Steps one program covers per pass: a tile's rows, or stripes times steps."""
    return cfg.block_t if cfg.kind in ("scan", "chained_scan") else cfg.stripes * cfg.steps


def with_chunks(cfg: Config, T: int, n_chunks: int) -> Config:
    """Split ``T`` into about ``n_chunks`` chunks, each a whole number of windows (for the
    chained kernels, one window each: ``n_chunks`` is then ``⌈T / window⌉``)."""
    w = window(cfg)
    if cfg.kind in CHAINED:
        return cfg._replace(n_chunks=math.ceil(T / w), chunk_len=w, block_c=1)
    chunk_len = math.ceil(math.ceil(T / max(1, n_chunks)) / w) * w
    n = max(1, math.ceil(T / chunk_len))
    return cfg._replace(n_chunks=n, chunk_len=chunk_len, block_c=pow2(n))


# ----------------------------------------------------------------------------- the schema

_RANGES = ("T", "B", "series")
_FLAGS = ("time_contiguous", "reverse", "deterministic", "words")
_POW2_FIELDS = ("block_b", "num_warps", "block_t", "stripes", "steps")
_INT_FIELDS = ("stages", "unroll", "lookback")
_CHOICES = {"step_scan": ("registers", "shuffles"), "link": ("flags", "words")}
_CHUNKS = ("one", "split_if_few_blocks", "split")
_SETTING_KEYS = set(("kind", "chunks", "programs_per_sm", "max_chunks", "when", "reason", "measured", "ratio")
                    + _POW2_FIELDS + _INT_FIELDS + tuple(_CHOICES))
_CLASS_KEYS = {"name", "when", "shape", "settings"}
_TOP_KEYS = {"format", "gpu", "n_sm", "source", "policy", "classes"}


class Setting(NamedTuple):
    config: Config  # chunk fields unset: they depend on the shape
    chunks: str
    programs_per_sm: float
    max_chunks: int
    when: dict
    reason: str
    measured: Optional[str]
    ratio: Optional[float]


class ShapeClass(NamedTuple):
    name: str
    when: dict
    shape: dict  # the representative shape ``rlscan tune`` times: N, T, layout
    settings: tuple


class Table(NamedTuple):
    gpu: str
    n_sm: int
    source: str
    classes: tuple
    path: str  # where it was read from
    raw: dict  # the JSON as read, for ``rlscan tune`` to rewrite
    policy: dict  # name -> :class:`rlscan._triton.policy.Decision`, every decision


def _fail(where: str, field: str, expected: str, got) -> None:
    raise ValueError(f"{where}: field {field!r}: expected {expected}, got {got!r}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) and math.isfinite(x)


def _check_when(when, where: str) -> dict:
    if not isinstance(when, dict):
        _fail(where, "when", "an object of conditions", when)
    for key, value in when.items():
        if key in _RANGES:
            ok = (isinstance(value, list) and len(value) == 2 and all(v is None or (_is_int(v) and v >= 0)
                                                                      for v in value)
                  and (None in value or value[0] <= value[1]))
            if not ok:
                _fail(where, f"when.{key}", "[lo, hi] of whole numbers >= 0 (null: no bound), lo <= hi", value)
        elif key in _FLAGS:
            if not isinstance(value, bool):
                _fail(where, f"when.{key}", "true or false", value)
        elif key == "programs_per_sm":
            ok = (isinstance(value, dict) and set(value) <= {"block_b", "min", "below"}
                  and _is_int(value.get("block_b")) and value["block_b"] >= 1
                  and ("min" in value or "below" in value)
                  and all(_is_number(value[k]) and value[k] >= 0 for k in ("min", "below") if k in value))
            if not ok:
                _fail(where, "when.programs_per_sm", '{"block_b": whole >= 1, "min" and/or "below": numbers >= 0}',
                      value)
        else:
            _fail(where, "when", f"conditions among {', '.join(_RANGES + _FLAGS + ('programs_per_sm',))}",
                  f"unknown condition {key}")
    return dict(when)


def _check_setting(entry, where: str) -> Setting:
    if not isinstance(entry, dict):
        _fail(where, "(setting)", "an object", entry)
    unknown = sorted(set(entry) - _SETTING_KEYS)
    if unknown:
        _fail(where, unknown[0], f"one of the fields {', '.join(sorted(_SETTING_KEYS))}", "an unknown field")
    kind = entry.get("kind")
    if kind not in KINDS:
        _fail(where, "kind", f"one of {', '.join(KINDS)}", kind)
    fields = {"kind": kind}
    for name in ("block_b", "num_warps"):
        if name not in entry:
            _fail(where, name, "a power of two (required)", None)
    for name in _POW2_FIELDS:
        if name in entry:
            v = entry[name]
            if not (_is_int(v) and v >= 1 and v & (v - 1) == 0):
                _fail(where, name, "a power of two >= 1", v)
            fields[name] = v
    for name in _INT_FIELDS:
        if name in entry:
            v = entry[name]
            if not (_is_int(v) and v >= (1 if name == "lookback" else 0)):
                _fail(where, name, "a whole number >= 1" if name == "lookback" else "a whole number >= 0", v)
            fields[name] = v
    for name, choices in _CHOICES.items():
        if name in entry:
            if entry[name] not in choices:
                _fail(where, name, f"one of {', '.join(choices)}", entry[name])
            fields[name] = entry[name]
    chunks = entry.get("chunks")
    if chunks not in _CHUNKS:
        _fail(where, "chunks", f"one of {', '.join(_CHUNKS)}", chunks)
    programs, max_chunks = entry.get("programs_per_sm", 0), entry.get("max_chunks", 0)
    if chunks != "one" and not (_is_number(programs) and programs > 0):
        _fail(where, "programs_per_sm", f"a positive number (chunks {chunks!r} needs it)", entry.get("programs_per_sm"))
    if chunks == "split" and not (_is_int(max_chunks) and max_chunks >= 1):
        _fail(where, "max_chunks", "a whole number >= 1 (chunks 'split' needs it)", entry.get("max_chunks"))
    reason = entry.get("reason")
    if not (isinstance(reason, str) and reason.strip()):
        _fail(where, "reason", "a one-line explanation", reason)
    measured = entry.get("measured")
    if measured is not None and not isinstance(measured, str):
        _fail(where, "measured", "the measured ratio as text, or null", measured)
    ratio = entry.get("ratio")
    if ratio is not None and not (_is_number(ratio) and ratio > 0):
        _fail(where, "ratio", "a positive number, or null", ratio)
    when = _check_when(entry.get("when", {}), where)
    return Setting(Config(**fields), chunks, programs, max_chunks, when, reason, measured, ratio)


def validate(raw, path: str = "<table>") -> Table:
    """The table ``raw`` (parsed JSON) checked and converted; ``ValueError`` names the class,
    the setting and the field that is wrong."""
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object with 'classes', got {type(raw).__name__}")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        _fail(path, unknown[0], f"one of the top-level fields {', '.join(sorted(_TOP_KEYS))}", "an unknown field")
    if raw.get("format", 1) != 1:
        _fail(path, "format", "1", raw.get("format"))
    n_sm = raw.get("n_sm", DEFAULT_N_SM)
    if not (_is_int(n_sm) and n_sm >= 1):
        _fail(path, "n_sm", "a whole number >= 1", n_sm)
    classes = raw.get("classes")
    if not (isinstance(classes, list) and classes):
        _fail(path, "classes", "a non-empty list of shape classes", classes)
    out, names = [], set()
    for i, entry in enumerate(classes):
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"{path}: class {i} ({name!r})"
        if not isinstance(entry, dict):
            _fail(where, "(class)", "an object", entry)
        unknown = sorted(set(entry) - _CLASS_KEYS)
        if unknown:
            _fail(where, unknown[0], f"one of the fields {', '.join(sorted(_CLASS_KEYS))}", "an unknown field")
        if not (isinstance(name, str) and name.strip()) or name in names:
            _fail(where, "name", "a name no other class has", name)
        names.add(name)
        when = _check_when(entry.get("when", {}), where)
        shape = entry.get("shape")
        if not (isinstance(shape, dict) and set(shape) == {"N", "T", "layout"} and _is_int(shape["N"])
                and _is_int(shape["T"]) and shape["N"] >= 1 and shape["T"] >= 1 and shape["layout"] in ("tn", "nt")):
            _fail(where, "shape", '{"N": whole >= 1, "T": whole >= 1, "layout": "tn" or "nt"}', shape)
        settings = entry.get("settings")
        if not (isinstance(settings, list) and settings):
            _fail(where, "settings", "a non-empty list of settings", settings)
        checked = tuple(_check_setting(s, f"{where}, setting {j}") for j, s in enumerate(settings))
        if all(s.when for s in checked):
            _fail(where, "settings", "at least one setting without 'when' (so every call gets one)",
                  "only conditional settings")
        if when.get("deterministic") is not False and all(s.when or s.config.kind in CHAINED for s in checked):
            _fail(where, "settings", "a setting of a kind other than chained without 'when' (so every call under "
                                     "deterministic algorithms gets one)", "only chained or conditional settings")
        out.append(ShapeClass(name, when, dict(shape), checked))
    if out[-1].when:
        _fail(f"{path}: class {len(out) - 1} ({out[-1].name!r})", "when",
              "no conditions on the last class (it catches every call the others do not)", out[-1].when)
    decisions = _policy.validate(raw.get("policy", {}), path)
    missing = [name for name in _policy.DECISIONS if name not in decisions]
    if missing:
        if Path(path) == SHIPPED:
            _fail(path, "policy", f"every decision ({', '.join(_policy.DECISIONS)})", f"none for {', '.join(missing)}")
        decisions.update({name: shipped().policy[name] for name in missing})
    return Table(str(raw.get("gpu", "")), n_sm, str(raw.get("source", "")), tuple(out), path, raw, decisions)


def load(path) -> Table:
    """Read and validate the table at ``path`` (``ValueError`` if it is malformed)."""
    path = Path(path).expanduser()
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot read a settings table ({type(exc).__name__}: {exc})") from None
    return validate(raw, str(path))


# ----------------------------------------------------------------------------- which table

def device_file_name(device_name: str) -> str:
    """``"NVIDIA H200"`` -> ``"nvidia-h200.json"``."""
    return (re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "gpu") + ".json"


def cache_path(device_name: str) -> Path:
    """Where ``rlscan tune`` writes, and the loader looks for, this GPU's table."""
    return CACHE_DIR.expanduser() / device_file_name(device_name)


_LOADED: dict = {}
_WARNED: set = set()


def gpu_model(device_name: str) -> str:
    """The model in a GPU's name, which tables are matched by: ``"NVIDIA H100 80GB HBM3"`` ->
    ``"h100"``, ``"NVIDIA A100-SXM4-80GB"`` -> ``"a100"``, ``"NVIDIA GeForce RTX 4090"`` -> ``"4090"``
    (the first word of letters then digits, or of 3+ digits; the whole name where none is)."""
    words = re.findall(r"[a-z]+\d+[a-z]*|\d{3,}[a-z]*", device_name.lower())
    return words[0] if words else device_name.lower().strip()


def _read_shipped(path: Path) -> Table:
    key = ("shipped", str(path))
    if key not in _LOADED:
        _LOADED[key] = load(path)
    return _LOADED[key]


def shipped() -> Table:
    """The table for calls planned without a GPU (measured on an H200)."""
    return _read_shipped(SHIPPED)


def shipped_tables() -> tuple:
    """Every table that ships with rlscan, ``h200.json`` first."""
    if "shipped tables" not in _LOADED:
        paths = sorted(TABLES.glob("*.json"), key=lambda p: (p != SHIPPED, p.name))
        _LOADED["shipped tables"] = tuple(_read_shipped(p) for p in paths)
    return _LOADED["shipped tables"]


class Choice(NamedTuple):
    table: Table
    note: Optional[str]  # why a table measured on another card stands in, or None


def shipped_for(device_name: Optional[str], n_sm: Optional[int] = None) -> Choice:
    """The shipped table for a GPU: the one measured on its model with its SM count; else the
    one whose SM count is closest (its model's first, the H200's on a tie), with a note."""
    if not device_name:
        return Choice(shipped(), None)
    tables = shipped_tables()
    model = gpu_model(device_name)
    same_model = [t for t in tables if gpu_model(t.gpu) == model]
    for t in same_model:
        if n_sm is None or t.n_sm == n_sm:
            return Choice(t, None)
    sms = DEFAULT_N_SM if n_sm is None else n_sm
    best = min(same_model or tables, key=lambda t: (abs(t.n_sm - sms), t.path != str(SHIPPED)))
    about = f"{device_name} ({n_sm} SMs)" if n_sm is not None else f"{device_name} (SMs not given)"
    return Choice(best, f"no shipped table was measured on {about}; {Path(best.path).name}, measured on {best.gpu} "
                        f"({best.n_sm} SMs), is the closest. `rlscan tune` measures one for this GPU")


def current_device_name() -> Optional[str]:
    """The name of the current CUDA device, or ``None`` without one."""
    try:
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no usable CUDA: no device table
        return None


def table_path(device_name: Optional[str] = None, n_sm: Optional[int] = None) -> Path:
    """The file the loader reads for ``device_name``: ``RLSCAN_SETTINGS``, the device's
    cached table, or the shipped table for it (:func:`shipped_for`), in that order."""
    env = os.environ.get("RLSCAN_SETTINGS", "").strip()
    if env:
        return Path(env).expanduser()
    if device_name:
        cached = cache_path(device_name)
        if cached.is_file():
            return cached
    return Path(shipped_for(device_name, n_sm).table.path)


def active_table(device_name: Optional[str] = None, n_sm: Optional[int] = None) -> Table:
    """The table calls on ``device_name`` (of ``n_sm`` SMs) use; a user table that fails to
    load warns once and the shipped table for the device stands in."""
    path = table_path(device_name, n_sm)
    if path.parent == TABLES:
        return _read_shipped(path)
    key = ("user", str(path))
    if key not in _LOADED:
        try:
            _LOADED[key] = load(path)
        except ValueError as exc:
            fallback = shipped_for(device_name, n_sm).table
            if key not in _WARNED:
                _WARNED.add(key)
                warnings.warn(f"rlscan: ignoring the launch settings table {path} ({exc}); using the shipped "
                              f"{Path(fallback.path).name}", RuntimeWarning, stacklevel=3)
            _LOADED[key] = fallback
    return _LOADED[key]


def clear_cache() -> None:
    """Forget loaded tables (after ``RLSCAN_SETTINGS`` or a table file changes)."""
    _LOADED.clear()
    _WARNED.clear()


def kept(key, make: Callable):
    """``make()``, made once for ``key`` and kept until :func:`clear_cache` (for a table that
    a call looks up every time, such as the table of a device)."""
    key = ("kept", key)
    if key not in _LOADED:
        _LOADED[key] = make()
    return _LOADED[key]


# ----------------------------------------------------------------------------- the matcher

class Query(NamedTuple):
    T: int
    B: int
    time_contiguous: bool
    n_sm: int
    reverse: bool
    deterministic: bool
    series: int
    words: bool


def holds(when: dict, q: Query) -> bool:
    """Whether every condition of ``when`` holds for the call ``q``."""
    for key, value in when.items():
        if key in _RANGES:
            x, (lo, hi) = getattr(q, key), value
            if (lo is not None and x < lo) or (hi is not None and x > hi):
                return False
        elif key == "programs_per_sm":
            programs = math.ceil(q.B / value["block_b"])
            if "min" in value and programs < value["min"] * q.n_sm:
                return False
            if "below" in value and programs >= value["below"] * q.n_sm:
                return False
        elif getattr(q, key) != value:
            return False
    return True


def match(q: Query, table: Table) -> ShapeClass:
    """The first class of ``table`` whose conditions hold for ``q`` (the last holds for all)."""
    for c in table.classes:
        if holds(c.when, q):
            return c
    return table.classes[-1]  # unreachable for a validated table


def resolve(s: Setting, q: Query) -> Config:
    """The setting ``s`` sized for the call ``q``: capped at the problem, time chunked."""
    cfg = s.config
    cfg = cfg._replace(block_b=min(cfg.block_b, pow2(q.B)), block_t=min(cfg.block_t, pow2(q.T)))
    cfg = cfg._replace(stripes=min(cfg.stripes, pow2(math.ceil(q.T / cfg.steps))))
    blocks = math.ceil(q.B / cfg.block_b)
    if s.chunks == "split":
        return with_chunks(cfg, q.T, min(s.max_chunks, math.ceil(s.programs_per_sm * q.n_sm / blocks)))
    if s.chunks == "split_if_few_blocks":
        windows = math.ceil(q.T / window(cfg))
        if blocks < q.n_sm and windows >= SPLIT_MIN_WINDOWS and q.T >= SPLIT_MIN_T:
            n = min(windows, math.ceil(s.programs_per_sm * q.n_sm / blocks), max(1, MAX_CHUNK_TILE // cfg.block_b))
            return with_chunks(cfg, q.T, n)
    return with_chunks(cfg, q.T, 1)


def applies(s: Setting, q: Query) -> bool:
    """Whether the setting ``s`` is a candidate for the call ``q``: its conditions hold, and it
    is not a chained kind where ``q`` runs under ``torch.use_deterministic_algorithms`` (a
    decoupled look-back composes predecessors in the order they finish, so its last bits vary
    run to run), whatever the table's conditions say."""
    return holds(s.when, q) and not (q.deterministic and s.config.kind in CHAINED)


def candidates(q: Query, table: Table) -> tuple:
    """``(class, settings)``: the class matched and its settings that apply to ``q``, in order."""
    c = match(q, table)
    return c, tuple(s for s in c.settings if applies(s, q))


def configs_for(T: int, B: int, time_contiguous: bool, n_sm: int, reverse: bool = True, deterministic: bool = False,
                series: int = 0, words: bool = True, table: Optional[Table] = None) -> tuple:
    """The launch settings for a ``[T, B]`` problem, best first (:class:`Config` tuples):
    the first shape class of ``table`` (default: :func:`active_table`) matching the call,
    its settings that apply, each sized for the shape."""
    q = Query(int(T), int(B), bool(time_contiguous), int(n_sm), bool(reverse), bool(deterministic), int(series),
              bool(words))
    _, chosen = candidates(q, active_table(current_device_name(), n_sm) if table is None else table)
    return tuple(dict.fromkeys(resolve(s, q) for s in chosen))  # a setting listed twice is tried once


def dumps(raw: dict) -> str:
    """A table as JSON text laid out for reading: each policy decision's fields on a line
    each; one class condition per line, each setting's fields on one line and its reason
    and measurement on the next two."""
    one = lambda x: json.dumps(x, ensure_ascii=False)  # noqa: E731
    lines = ["{"]
    for key in ("format", "gpu", "n_sm", "source"):
        if key in raw:
            lines.append(f" {one(key)}: {one(raw[key])},")
    if "policy" in raw:
        lines.append(' "policy": {')
        names = list(raw["policy"])
        for i, name in enumerate(names):
            entry = raw["policy"][name]
            fields = [f"{one(k)}: {one(v)}" for k, v in entry.items()]
            lines.append(f"  {one(name)}: {{" + ",\n   ".join(fields) + "}" + ("," if i < len(names) - 1 else ""))
        lines.append(" },")
    lines.append(' "classes": [')
    for i, c in enumerate(raw["classes"]):
        lines.append("  {")
        lines.append(f'   "name": {one(c["name"])},')
        lines.append(f'   "when": {one(c.get("when", {}))},')
        lines.append(f'   "shape": {one(c["shape"])},')
        lines.append('   "settings": [')
        for j, s in enumerate(c["settings"]):
            fields = {k: v for k, v in s.items() if k not in ("reason", "measured", "ratio")}
            notes = [f'"reason": {one(s.get("reason"))}', f'"measured": {one(s.get("measured"))}']
            if s.get("ratio") is not None:
                notes.append(f'"ratio": {one(s["ratio"])}')
            lines.append(f"    {one(fields)[:-1]},")
            lines.append("     " + ",\n     ".join(notes) + "}" + ("," if j < len(c["settings"]) - 1 else ""))
        lines.append("   ]")
        lines.append("  }" + ("," if i < len(raw["classes"]) - 1 else ""))
    lines.append(" ]")
    lines.append("}")
    return "\n".join(lines) + "\n"
