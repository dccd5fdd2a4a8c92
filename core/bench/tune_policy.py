"""``rlscan tune``'s second part: re-measure the settings table's policy decisions.

A decision of the table's ``policy`` that lists ``candidates`` and ``shapes`` is a choice
(:mod:`rlscan._triton.policy`); one with a ``limit`` is a bound and is left alone. For each
choice, at each of its shapes, the call it decides (:data:`PROBES`) runs under each
candidate (``forced_policy``, on fresh launch plans), is checked against the float64 truth
(:mod:`rlscan.bench.check`; a wrong or failing candidate is dropped) and timed. The
candidate with the smallest geometric mean, over the shapes, of
``time(candidate) / time(the table's value)`` becomes the value; the entry keeps its
reason and records what was measured and ``ratio = time(the table's value) / time(chosen)``.
"""
from __future__ import annotations

import copy
import math
import time
import warnings
from typing import Callable, NamedTuple, Optional

import torch

from .._triton import policy, settings
from .cases import CASES, make_inputs, outputs_of
from .check import TOLERANCE, relative_error, truth

ACTIONS = 4  # retrace_from_q's probe: actions per step


class Probe(NamedTuple):
    """A call a decision decides that the bench's cases do not make (a mask, action tables):
    the inputs :func:`rlscan.bench.cases.make_inputs` draws (``series``, ``flags``, ``batch``)
    and ``run(module, inputs, **extra)``."""

    name: str
    series: tuple
    flags: tuple
    batch: tuple
    run: Callable

    def call(self, module, d: dict, **kw):
        return self.run(module, d, **kw)


def _masked_gae(m, d, **kw):
    return m.gae(d["rewards"], d["values"], bootstrap_value=d["bootstrap_value"], terminated=d["terminated"],
                 mask=d["mask"], **CASES["gae"].params, **kw)


def _retrace_from_q(m, d, **kw):
    return m.retrace_from_q(d["rewards"], d["q_values"], d["actions"], d["target_probs"], d["behaviour_log_probs"],
                            bootstrap_value=d["bootstrap_value"], terminated=d["terminated"], gamma=0.99, lmbda=1.0,
                            c_clip=1.0, **kw)


MASKED_GAE = Probe("gae with a mask", ("rewards", "values"), ("terminated", "mask"), ("bootstrap_value",), _masked_gae)
RETRACE_FROM_Q = Probe("retrace_from_q", ("rewards", "behaviour_log_probs"), ("terminated",), ("bootstrap_value",),
                       _retrace_from_q)


def _inputs(case, T: int, N: int, layout: str, device) -> dict:
    """The probe's inputs at ``[T, N]`` in ``layout``, float32: the bench's, with a mask that
    keeps most steps, or action tables of ``ACTIONS`` actions."""
    inputs = make_inputs(case, T, N, torch.float32, layout, device)
    if "mask" in inputs:
        inputs["mask"] = ~inputs["mask"]  # drawn as rare flags: kept where none is drawn
    if case is RETRACE_FROM_Q:
        gen = torch.Generator(device=device).manual_seed(1)
        shape = (T, N, ACTIONS) if layout == "tn" else (N, T, ACTIONS)

        def table(draw):
            x = draw(shape, generator=gen, device=device)
            return x if layout == "tn" else x.transpose(0, 1)

        inputs["q_values"] = table(torch.randn)
        inputs["target_probs"] = torch.softmax(table(torch.randn), dim=-1)
        actions = torch.randint(0, ACTIONS, shape[:2], generator=gen, device=device)
        inputs["actions"] = actions if layout == "tn" else actions.t()
    return inputs


#: the call each choice decides: a bench case, run at the decision's shapes
PROBES = {
    "state_in_steps_per_warp": CASES["vtrace"],
    "gae_row_min_t": MASKED_GAE,
    "gae_row_tiles": MASKED_GAE,
    "retrace_table_elements": RETRACE_FROM_Q,
}


def _timed_candidate(case, inputs, name, value, want, clock, device) -> tuple:
    """``(seconds, None)`` for the call under ``name = value``, or ``(None, why it is dropped)``."""
    import rlscan

    from .explain import fresh_plans

    def call():
        with policy.forced_policy(**{name: value}), rlscan.use_backend("triton"):
            return case.call(rlscan, inputs)

    with fresh_plans(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = outputs_of(call())
        except Exception as exc:  # noqa: BLE001 - a candidate that cannot run here is dropped, not fatal
            return None, f"failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
        err = relative_error(got, want)
        if not err <= TOLERANCE[torch.float32]:
            return None, f"wrong result (relative error {err:.2e})"
        return clock(call, device), None


def tune_policy(table: settings.Table, raw: dict, *, device, gpu: str, clock: Callable, budget_s: float = 600.0,
                progress: Callable = print, names: Optional[tuple] = None) -> dict:
    """``raw`` (parsed JSON of a table) with its choices re-measured on this GPU, validated.
    ``names``: the decisions to tune (default: every choice of ``table``)."""
    raw = copy.deepcopy(raw)
    entries = raw.setdefault("policy", {})
    deadline = time.monotonic() + budget_s
    for name in names or tuple(policy.DECISIONS):
        d = policy.decision(name, table)
        if d.limit or name not in PROBES:
            continue
        if time.monotonic() > deadline:
            progress(f"policy {name}: budget spent, the table's value stays")
            continue
        case = PROBES[name]
        ratios: dict = {}  # candidate index -> [time / time of the table's value, per shape]
        failed: set = set()
        measured_at = 0  # shapes where the table's value ran
        for shape in d.shapes:
            N, T, layout = shape["N"], shape["T"], shape["layout"]
            inputs = _inputs(case, T, N, layout, device)
            want, _ = truth(case, inputs, T, N)
            base, _ = _timed_candidate(case, inputs, name, d.value, want, clock, device)
            if base is None:
                progress(f"policy {name}: the table's value fails at {N} x {T} ({layout}); skipped")
                continue
            measured_at += 1
            for i, candidate in enumerate(d.candidates):
                if time.monotonic() > deadline:
                    break
                seconds, why = (base, None) if candidate == d.value else _timed_candidate(
                    case, inputs, name, candidate, want, clock, device)
                label = f"policy {name} = {policy_json(name, candidate)} at {N} x {T} ({layout})"
                if seconds is None:
                    failed.add(i)
                    progress(f"  {label}: dropped, {why}")
                    continue
                ratios.setdefault(i, []).append(seconds / base)
                progress(f"  {label}: {seconds * 1e6:.1f} us")
        complete = {i: r for i, r in ratios.items() if i not in failed and len(r) == measured_at}
        if not complete:
            continue
        score = {i: math.exp(sum(math.log(x) for x in r) / len(r)) for i, r in complete.items()}
        best = min(score, key=score.get)
        shapes = ", ".join(f"{s['N']} x {s['T']} ({s['layout']})" for s in d.shapes)
        entry = entries.setdefault(name, copy.deepcopy(table.raw.get("policy", {}).get(name) or _entry_of(d)))
        entry.update(value=policy_json(name, d.candidates[best]),
                     measured=f"rlscan tune on {gpu}: {1 / score[best]:.2f}x the speed of "
                              f"{policy_json(name, d.value)}, geometric mean over {shapes}",
                     ratio=round(1 / score[best], 4))
        progress(f"policy {name}: {policy_json(name, d.candidates[best])} ({1 / score[best]:.2f}x)")
    settings.validate(raw, "the tuned table")
    return raw


def policy_json(name: str, value):
    """A decision's value in the table's JSON form (an open bound of ``gae_row_tiles`` as null)."""
    if name == "gae_row_tiles":
        return [[None if most == math.inf else most, t, w, lb] for most, t, w, lb in value]
    return value


def _entry_of(d: policy.Decision) -> dict:
    """A decision as a JSON entry (for a table whose own section lacked it)."""
    entry = dict(value=policy_json(d.name, d.value), reason=d.reason, measured=d.measured)
    if d.limit:
        entry["limit"] = d.limit
    else:
        entry.update(candidates=[policy_json(d.name, c) for c in d.candidates], shapes=[dict(s) for s in d.shapes])
    return entry
