"""Every public entry point answers every wrong argument by name, as docs/errors.md lists.

Each op, ``masked_whiten`` and each adapter's entry points get, one argument at a time, a
wrong value of each kind: type, dtype, shape, device (``meta``), layout (sparse, nested and
masked tensors, numpy masked, read-only, reversed, big-endian and zero-size arrays), NaN and
±inf in floats and coefficients. Hypothesis draws what the rest of the call is: its length,
time axis, torch or numpy, which form of the op (bootstrap value, next values, a mask), and
which accepted value whose loop compiles of its own runs (``COMPILES``). The answer must be
one of:

* a ``TypeError`` or ``ValueError`` whose message names the argument and matches a row of
  docs/errors.md listed for that argument (so that the page lists every error a user can
  meet: :func:`rlscan_testing.documented`);
* for a value the docs accept (numpy's bools and scalars, read-only arrays, strided views,
  non-binary flags, NaN and infinity in the data, a clip of inf, ``out=`` arrays), the
  documented result: that of the plain equivalent value, or the float64 reference's.

Anything else fails: another exception, a warning, a different result.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import pathlib
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import rlscan
from rlscan_testing import assert_close, count_example, documented

ROOT = pathlib.Path(__file__).resolve().parent.parent

# ----------------------------------------------------------------------------- the calls


@dataclass
class Ctx:
    """What hypothesis draws: the rest of the call."""

    T: int
    N: int  # at least 2: a wrong shape of one environment could broadcast
    time_first: bool  # [T, N] with time_dim=0, else [N, T] with time_dim=-1 or 1
    time_dim: int
    dtype: torch.dtype
    numpy: bool
    form: str  # "bootstrap", "next" or "mask"
    gen: torch.Generator

    @property
    def shape(self):
        return (self.T, self.N) if self.time_first else (self.N, self.T)

    def box(self, x: torch.Tensor):
        return x.numpy() if self.numpy else x

    def series(self, low=None, high=None, shape=None):
        shape = shape or self.shape
        x = torch.randn(shape, generator=self.gen, dtype=torch.float64)
        if low is not None:
            x = low + (high - low) * torch.rand(shape, generator=self.gen, dtype=torch.float64)
        return self.box(x.to(self.dtype))

    def batch(self):
        return self.box(torch.randn((self.N,), generator=self.gen, dtype=torch.float64).to(self.dtype))

    def flags(self, dtype=torch.bool, shape=None):
        return self.box((torch.rand(shape or self.shape, generator=self.gen) < 0.3).to(dtype))


@dataclass
class Entry:
    """A public function, the valid arguments of one call of it, and each argument's kind."""

    name: str
    fn: Callable
    args: Callable  # Ctx -> {name: value}
    kinds: dict  # name -> kind (see WRONG)
    reference: Optional[Callable] = None  # the float64 reference, called with the same arguments
    forms: tuple = ("bootstrap",)
    torch_only: bool = False
    needs: Optional[str] = None  # a module the entry point needs
    optional: tuple = ()  # arguments for which None is a valid value (absent)
    time_first: Optional[bool] = None  # a fixed layout ([T, N], or [N, T] with time_dim=-1); None: drawn
    same_when_none: dict = field(default_factory=dict)  # form -> arguments that a call of it does not read


def _value_op(name, series, next_name="next_values", clips=(), masked=False, coefs=("gamma", "lmbda"),
              same_when_none=None):
    def args(c: Ctx):
        a = {s: c.series() if s != "log_rhos" else c.series(-0.5, 0.5) for s in series}
        if c.form == "next":
            a[next_name] = c.series()
            a["truncated"] = c.flags()
        elif c.form != "mask" or name != "discounted_returns":
            a["bootstrap_value"] = c.batch()
        a["terminated"] = c.flags()
        if c.form == "mask":
            a["mask"] = c.flags(torch.int64)
        a.update({k: 0.9 for k in coefs})
        a.update({k: 1.2 for k in clips})
        a["time_dim"] = c.time_dim
        return a

    kinds = {s: "series" for s in series}
    kinds.update({next_name: "series", "truncated": "flag", "bootstrap_value": "batch", "terminated": "flag",
                  "mask": "mask", "time_dim": "time_dim", "exact": "bool", "out_dtype": "out_dtype", "out": "out"})
    kinds.update({k: "coef" for k in coefs})
    kinds.update({k: "clip" for k in clips})
    if name == "gae":
        kinds["whiten"] = "bool"
    optional = (next_name, "truncated", "bootstrap_value", "terminated", "mask")
    return Entry(name, getattr(rlscan, name), args, kinds, getattr(rlscan.reference, name),
                 ("bootstrap", "next", "mask") if masked else ("bootstrap", "next"), optional=optional,
                 same_when_none=same_when_none or {})


def _forward_op(name, coefs=()):
    def args(c: Ctx):
        a = {"x": c.series(), "dones": c.flags(), "initial": c.batch(), "time_dim": c.time_dim}
        a.update({k: 0.9 for k in coefs})
        return a

    kinds = {"x": "series", "dones": "flag", "initial": "batch", "time_dim": "time_dim", "exact": "bool",
             "out_dtype": "out_dtype", "out": "out", **{k: "coef" for k in coefs}}
    return Entry(name, getattr(rlscan, name), args, kinds, getattr(rlscan.reference, name),
                 optional=("dones", "initial"))


def _linear_scan_args(c: Ctx):
    return {"alpha": c.series(), "beta": c.series(-1.0, 1.0), "initial": c.batch(), "reverse": True,
            "time_dim": c.time_dim}


def _retrace_from_q_args(c: Ctx, actions=3):
    table = c.shape + (actions,)
    probs = torch.softmax(torch.randn(table, generator=c.gen, dtype=torch.float64), -1).to(c.dtype)
    return {"rewards": c.series(), "q_values": c.box(torch.randn(table, generator=c.gen).to(c.dtype)),
            "actions": c.box(torch.randint(0, actions, c.shape, generator=c.gen)), "target_probs": c.box(probs),
            "behaviour_log_probs": c.series(-1.5, -0.5), "bootstrap_value": c.batch(), "terminated": c.flags(),
            "gamma": 0.9, "lmbda": 0.9, "c_clip": 1.0, "time_dim": c.time_dim}


def _whiten_args(c: Ctx):
    mask = torch.ones(c.shape, dtype=torch.int64)  # every position kept: at least two, for the variance
    return {"values": c.series(), "mask": c.box(mask), "shift_mean": True, "eps": 1e-8, "zero_skipped": False}


OPS = [
    _value_op("gae", ("rewards", "values"), masked=True),
    _value_op("td_lambda", ("rewards", "values"), masked=True, same_when_none={"next": ("values",)}),
    _value_op("discounted_returns", ("rewards",), masked=True, coefs=("gamma",)),
    _value_op("vtrace", ("rewards", "values", "log_rhos"), clips=("rho_clip", "c_clip", "pg_rho_clip")),
    _value_op("retrace", ("rewards", "q_taken", "expected_q", "log_rhos"), next_name="next_expected_q",
              clips=("c_clip",)),
    Entry("retrace_from_q", rlscan.retrace_from_q, _retrace_from_q_args,
          {"rewards": "series", "q_values": "table", "actions": "index", "target_probs": "table",
           "behaviour_log_probs": "series", "bootstrap_value": "batch", "terminated": "flag", "gamma": "coef",
           "lmbda": "coef", "c_clip": "clip", "time_dim": "time_dim", "exact": "bool", "out": "out"},
          rlscan.reference.retrace_from_q, optional=("bootstrap_value", "terminated")),
    _forward_op("eligibility_traces", ("gamma", "lmbda")),
    _forward_op("episodic_cumsum"),
    Entry("linear_scan", rlscan.linear_scan, _linear_scan_args,
          {"alpha": "series", "beta": "series_or_float", "initial": "batch", "reverse": "bool",
           "time_dim": "time_dim", "exact": "bool", "out_dtype": "out_dtype", "out": "out"},
          rlscan.reference.linear_scan, optional=("initial",)),
    Entry("masked_whiten", rlscan.masked_whiten, _whiten_args,
          {"values": "series", "mask": "mask", "shift_mean": "bool", "eps": "eps", "zero_skipped": "bool"},
          rlscan.reference.masked_whiten),
]


def _cleanrl_args(c: Ctx):
    return {"rewards": c.series(), "values": c.series(), "dones": c.flags(torch.float32),
            "next_value": c.box(torch.randn(1, c.N, generator=c.gen).to(c.dtype)),
            "next_done": c.flags(torch.float32, shape=(c.N,)), "gamma": 0.99, "gae_lambda": 0.95}


def _cleanrl_truncation_args(c: Ctx):
    return {"rewards": c.series(), "values": c.series(), "terminations": c.flags(torch.float32),
            "truncations": c.flags(torch.float32), "next_value": c.box(torch.randn(c.N, generator=c.gen).to(c.dtype)),
            "final_values": c.series(), "gamma": 0.99, "gae_lambda": 0.95}


def _rllib_vtrace_args(c: Ctx):
    return {"target_action_log_probs": c.series(-1.0, 0.0), "behaviour_action_log_probs": c.series(-1.0, 0.0),
            "discounts": c.series(0.9, 1.0), "rewards": c.series(), "values": c.series(), "bootstrap_values": c.batch(),
            "clip_rho_threshold": 1.0, "clip_pg_rho_threshold": 1.0}


def _verl_args(c: Ctx):
    mask = (torch.arange(c.T) < torch.randint(2, c.T + 1, (c.N, 1), generator=c.gen)).long()
    return {"token_level_rewards": c.series(shape=(c.N, c.T)), "values": c.series(shape=(c.N, c.T)),
            "response_mask": mask, "gamma": 1.0, "lam": 0.95}


def _adapter(module: str, function: str):
    def fn(**kwargs):
        return getattr(importlib.import_module(f"rlscan.adapters.{module}"), function)(**kwargs)

    return fn


ADAPTERS = [
    Entry("cleanrl.gae", _adapter("cleanrl", "gae"), _cleanrl_args,
          {"rewards": "series", "values": "series", "dones": "flag", "next_value": "batch", "next_done": "flag",
           "gamma": "unit_float", "gae_lambda": "unit_float", "exact": "bool"}, torch_only=True, time_first=True),
    Entry("cleanrl.gae_with_truncation", _adapter("cleanrl", "gae_with_truncation"), _cleanrl_truncation_args,
          {"rewards": "series", "values": "series", "terminations": "flag", "truncations": "flag",
           "next_value": "batch", "final_values": "series", "gamma": "unit_float", "gae_lambda": "unit_float",
           "exact": "bool"}, torch_only=True, time_first=True),
    Entry("rllib.vtrace_torch", _adapter("rllib", "vtrace_torch"), _rllib_vtrace_args,
          {"target_action_log_probs": "series", "behaviour_action_log_probs": "series", "discounts": "coef_tensor",
           "rewards": "series", "values": "series", "bootstrap_values": "batch", "clip_rho_threshold": "threshold",
           "clip_pg_rho_threshold": "threshold", "exact": "bool"}, needs="ray", time_first=True),
    Entry("verl.compute_gae_advantage_return", _adapter("verl", "compute_gae_advantage_return"), _verl_args,
          {"token_level_rewards": "series", "values": "series", "response_mask": "mask", "gamma": "unit_or_0d",
           "lam": "unit_or_0d"}, torch_only=True),
]


def _ppo_model():
    from stable_baselines3 import PPO

    return PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")


def _ppo_alg():
    spec = importlib.util.spec_from_file_location("rsl_rl_env", ROOT / "integration_tests" / "rsl_rl_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_runner(module.train_cfg()).alg


_OBJECTS: dict = {}


def _object(make):
    """One of the framework objects the adapters take, made once."""
    if make not in _OBJECTS:
        _OBJECTS[make] = make()
    return _OBJECTS[make]


def _learner_base():
    from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    return PPOTorchLearner


def _rollout_buffer():
    from stable_baselines3.common.buffers import RolloutBuffer

    return RolloutBuffer


SWITCHES = [  # entry points that take a framework object and a switch
    Entry("sb3.enable", _adapter("sb3", "enable"),
          lambda c: {"model": _object(_ppo_model), "exact": True}, {"model": "object", "exact": "bool"},
          needs="stable_baselines3"),
    Entry("sb3.rlscan_buffer_class", _adapter("sb3", "rlscan_buffer_class"),
          lambda c: {"base": _rollout_buffer()}, {"base": "object"}, needs="stable_baselines3"),
    Entry("rsl_rl.enable", _adapter("rsl_rl", "enable"),
          lambda c: {"alg": _object(_ppo_alg), "exact": True}, {"alg": "object", "exact": "bool"}, needs="rsl_rl"),
    Entry("rllib.learner_class", _adapter("rllib", "learner_class"),
          lambda c: {"base": _learner_base(), "exact": True}, {"base": "object", "exact": "bool"}, needs="ray"),
    Entry("rllib.RLScanGAE", _adapter("rllib", "RLScanGAE"), lambda c: {"gamma": 0.99, "lambda_": 0.95, "exact": True},
          {"gamma": "unit_float", "lambda_": "unit_float", "exact": "bool"}, needs="ray"),
]
ENTRIES = OPS + ADAPTERS + SWITCHES

# ----------------------------------------------------------------------------- wrong values

ERROR = "error"  # a TypeError or ValueError that names the argument
REFERENCE = "reference"  # the float64 reference's result (an adapter's: NaN and inf not hidden)
OUT = "out"  # the result is the objects passed as out=, holding the result without out=


class Same(tuple):
    """The result of the call with ``value`` instead (the value the docs say it means)."""

    def __new__(cls, value):
        return super().__new__(cls, (value,))


def _torch(x):
    return torch.from_numpy(x) if isinstance(x, np.ndarray) else x


def _like(x, t: torch.Tensor):
    """``t`` in ``x``'s container (a numpy array where ``x`` is one)."""
    return t.numpy() if isinstance(x, np.ndarray) else t


def _with(x, value):
    """``x`` with ``value`` at its first element."""
    t = _torch(x).clone()
    t.view(-1)[0] = value
    return _like(x, t)


def _strided(x):
    """The values of ``x`` in a view into a larger buffer (every other element of each axis)."""
    t = _torch(x)
    big = torch.zeros(tuple(2 * n for n in t.shape), dtype=t.dtype)
    view = big[tuple(slice(None, None, 2) for _ in t.shape)]
    view.copy_(t)
    return view.numpy() if isinstance(x, np.ndarray) else view


def _read_only(x):
    a = np.array(_torch(x).numpy())
    a.flags.writeable = False
    return a


def _grown(x, dim: int = 0):
    t = _torch(x)
    return _like(x, torch.cat([t, t.narrow(dim, 0, 1)], dim))


def _tensor_values(kind: str, x, c: Ctx, anchor: bool):
    """Wrong values of a tensor (or array) argument, as ``(label, value, expectation)``."""
    t = _torch(x)
    floating = t.is_floating_point()
    yield "a list", t.tolist(), ERROR
    yield "a str", "x", ERROR
    if kind not in ("series_or_float",):
        yield "a float", 0.5, ERROR
    yield "complex", _like(x, t.to(torch.complex64)), ERROR
    if floating:
        yield "int64", _like(x, t.to(torch.int64)), ERROR
        if kind != "flag":
            yield "bool", _like(x, t != 0), ERROR
    elif kind == "index":
        yield "float actions", _like(x, t.to(torch.float32)), ERROR
        yield "an action out of range", _with(x, 1000), ERROR
        yield "a negative action", _with(x, -1), ERROR
        yield "int32 actions", _like(x, t.to(torch.int32)), Same(x)
    if t.dim():
        yield "one more step or environment", _grown(x), ERROR
        yield "one axis fewer", _like(x, t.select(-1, 0)), ERROR
        yield "zero-size", _like(x, t.narrow(0, 0, 0)), ERROR
    yield "on the meta device", t.to("meta"), ERROR
    yield "sparse", t.to_sparse(), ERROR
    everywhere = torch.ones_like(t, dtype=torch.bool)
    yield "a torch.masked.MaskedTensor", _prototype(torch.masked.masked_tensor, t, everywhere), ERROR
    if t.dim():
        yield "a nested tensor", _prototype(torch.nested.nested_tensor, [t]), ERROR
    numpy = t.numpy()
    yield "a numpy masked array", np.ma.masked_array(numpy, mask=np.zeros(numpy.shape, bool)), ERROR
    yield "a numpy array of objects", numpy.astype(object), ERROR
    if numpy.dtype.itemsize > 1:
        yield "big-endian numpy", numpy.astype(numpy.dtype.newbyteorder(">")), ERROR
    if t.dim() and t.shape[0] > 1:
        yield "a reversed numpy view", numpy[::-1], ERROR
    if c.numpy or not anchor:
        yield "a read-only numpy array", _read_only(x), Same(x)
    yield "a strided view", _strided(x), Same(x)
    if kind in ("series", "batch", "table", "series_or_float"):
        for value in (math.nan, math.inf, -math.inf):
            yield f"{value} at one element", _with(x, value), REFERENCE
    if kind == "flag":
        for value in (math.nan, math.inf, 2.0):
            yield f"a float flag of {value}", _with(_like(x, t.to(c.dtype)), value), Same(_with(x, True))
        yield "uint8 flags", _like(x, t.to(torch.uint8)), Same(x)
    if kind == "mask":
        yield "a mask of 0.5", _with(_like(x, t.to(torch.float32)), 0.5), ERROR
        yield "a mask of NaN", _with(_like(x, t.to(torch.float32)), math.nan), ERROR
        yield "a bool mask", _like(x, t != 0), Same(x)
        yield "a float mask", _like(x, t.to(torch.float64)), Same(x)


def _prototype(make, *args):
    """A nested or masked tensor, without torch's warning that their API is a prototype."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make(*args)


def _scalar_values(kind: str, value, c: Ctx):
    """Wrong values of a float, a switch, ``time_dim`` or ``out_dtype``."""
    if kind in ("coef", "unit_float", "unit_or_0d", "coef_tensor"):
        for bad in (1.5, -0.1, math.nan, math.inf, -math.inf):
            yield repr(bad), bad, ERROR
        yield "a str", "0.9", ERROR
        yield "None", None, ERROR
        yield "True", True, ERROR
        yield "numpy's True", np.bool_(True), ERROR
        yield "a list", [0.9], ERROR
        yield "complex", complex(0.9), ERROR
        yield "numpy's float64", np.float64(value), Same(value)
        yield "an int", 1, Same(1.0)
        if kind == "coef":
            yield "a tensor holding NaN", torch.full(c.shape, math.nan), ERROR
            yield "a tensor of 1.5", torch.tensor(1.5), ERROR
            yield "an int64 tensor", torch.ones(c.shape, dtype=torch.int64), ERROR
            yield "a tensor that does not broadcast", torch.full((c.T + c.N + 1,), 0.9), ERROR
            yield "a meta tensor", torch.full(c.shape, 0.9, device="meta"), ERROR
            yield "a sparse tensor", torch.full(c.shape, 0.9).to_sparse(), ERROR
    elif kind in ("clip", "threshold"):
        for bad in (-1.0, math.nan, -math.inf):
            yield repr(bad), bad, ERROR
        yield "a str", "1", ERROR
        yield "True", True, ERROR
        yield "a list", [1.0], ERROR
        yield "inf", math.inf, REFERENCE
        yield "numpy's float64", np.float64(value), Same(value)
        yield "an int", 2, Same(2.0)
        if kind == "clip":
            yield "None", None, ERROR
            yield "a tensor", torch.tensor(1.0), ERROR
        else:  # RLlib's: None is no clip, a one-element tensor a float
            yield "None", None, Same(math.inf)
            yield "a one-element tensor", torch.tensor(value), Same(value)
            yield "a tensor of two", torch.tensor([value, value]), ERROR
    elif kind == "bool":
        for bad in (1, 0, 1.0, "yes", None, [True]):
            yield repr(bad), bad, ERROR
        yield "numpy's bool", np.bool_(value), Same(value)
    elif kind == "time_dim":
        for bad in (1.5, "0", None, True, 2, -3, [0]):
            yield repr(bad), bad, ERROR
        yield "numpy's int64", np.int64(value), Same(value)
        yield "counted from the other end", value - 2 if value >= 0 else value + 2, Same(value)
    elif kind == "out_dtype":
        for bad in (torch.int32, "float32", np.float32, torch.complex64, 1):
            yield repr(bad), bad, ERROR
        yield "float64", torch.float64, REFERENCE
    elif kind == "eps":
        for bad in (-1.0, math.nan, math.inf, "1e-8", None, True, torch.tensor(1e-8)):
            yield repr(bad), bad, ERROR
        yield "numpy's float64", np.float64(value), Same(value)
        yield "an int", 0, Same(0.0)
    elif kind == "object":
        for bad in ("x", None, 1, object()):
            yield repr(bad), bad, ERROR
    else:
        raise AssertionError(f"no wrong values for {kind!r}")


def _out_values(entry: Entry, args: dict, c: Ctx, n_out: int):
    """Wrong values of ``out=``, from the outputs of the call without it."""
    outs = _outputs(entry.fn(**args))
    fresh = [_like(o, torch.empty_like(_torch(o))) for o in outs]
    one = fresh[0] if n_out == 1 else tuple(fresh)
    yield "the right outputs", one, OUT
    yield "a str", "x", ERROR
    if n_out == 2:
        yield "one tensor for two outputs", fresh[0], ERROR
        yield "a list of one", [fresh[0]], ERROR
        yield "the same tensor twice", (fresh[0], fresh[0]), ERROR
    else:
        yield "a tuple for one output", (fresh[0], fresh[0]), ERROR

    def replaced(value):
        return value if n_out == 1 else (value,) + tuple(fresh[1:])

    t = _torch(fresh[0])
    longest = max(range(t.dim()), key=lambda d: t.shape[d])
    yield "of another shape", replaced(_like(fresh[0], t.unsqueeze(0))), ERROR
    yield "int32", replaced(_like(fresh[0], t.to(torch.int32))), ERROR
    yield "on the meta device", replaced(t.to("meta")), ERROR
    yield "a read-only numpy array", replaced(_read_only(fresh[0])), ERROR
    yield "sparse", replaced(t.to_sparse()), ERROR
    yield "a broadcast view", replaced(_like(fresh[0], t.narrow(longest, 0, 1).expand(t.shape))), ERROR
    yield "an input", replaced(next(v for v in args.values() if _is_array(v) and _torch(v).shape == t.shape
                                    and _torch(v).dtype == t.dtype)), ERROR
    yield "requiring grad", replaced(t.clone().requires_grad_()), ERROR
    yield "a strided view", replaced(_strided(fresh[0])), OUT


def _is_array(x) -> bool:
    return isinstance(x, (torch.Tensor, np.ndarray))


def _outputs(result) -> tuple:
    return tuple(result) if isinstance(result, tuple) else (result,)


def wrong_values(entry: Entry, args: dict, c: Ctx):
    """``(argument, label, value, expectation)`` for every argument of the call."""
    anchor = next(iter(args))
    for name, kind in entry.kinds.items():
        if name in args and args[name] is not None:
            value = args[name]
        elif name == "exact":
            value = False
        elif name == "out":
            n_out = len(_outputs(entry.fn(**args)))
            for label, bad, expect in _out_values(entry, args, c, n_out):
                yield name, label, bad, expect
            continue
        elif name == "out_dtype":
            value = None
        else:
            continue
        if kind == "coef_tensor":  # RLlib's discounts: a tensor that broadcasts to the rewards' shape, or a float
            found = [x for x in _tensor_values("series", value, c, False)
                     if x[2] is not REFERENCE and x[0] not in ("a float", "one axis fewer")]
            found.append(("a float", 0.5, Same(c.box(torch.full(c.shape, 0.5, dtype=c.dtype)))))
            found += [(f"{bad} at one element", _with(value, bad), ERROR) for bad in (math.nan, math.inf, 1.5, -0.5)]
        elif kind in ("series", "batch", "flag", "mask", "table", "index", "series_or_float"):
            if name in entry.same_when_none.get(c.form, ()):
                yield name, "None", None, Same(value)
            elif name not in entry.optional:
                yield name, "None", None, ERROR
            found = _tensor_values(kind, value, c, name == anchor)
            if kind == "series_or_float":
                found = list(found) + [("a float", 0.5, REFERENCE), ("a str", "0.5", ERROR), ("True", True, ERROR)]
        else:
            found = _scalar_values(kind, value, c)
        for label, bad, expect in found:
            if entry.torch_only and isinstance(bad, np.ndarray):
                expect = ERROR  # the adapter takes the framework's tensors only
            yield name, label, bad, expect

# ----------------------------------------------------------------------------- the property


def _finite(x) -> bool:
    if not _is_array(x):
        return not isinstance(x, float) or math.isfinite(x)
    t = _torch(x)
    return not (t.is_floating_point() or t.is_complex()) or bool(torch.isfinite(t).all())


def _call(entry: Entry, args: dict):
    """The entry point's result, and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = entry.fn(**args)
    return result, [f"{w.category.__name__}: {w.message}" for w in caught]


def _compare(result, expected, dtype, what):
    for k, (got, want) in enumerate(zip(_outputs(result), _outputs(expected))):
        if _is_array(want):
            assert _is_array(got) and tuple(got.shape) == tuple(want.shape), f"{what}: output {k}"
            assert_close(got, want, dtype, f"{what}: output {k}")


def check(entry: Entry, c: Ctx, args: dict, name: str, label: str, bad, expect) -> Optional[str]:
    """Why the entry point's answer to ``bad`` for ``name`` is wrong, or None."""
    what = f"{entry.name}({name}={label})"
    called = dict(args, **{name: bad})
    try:
        result, said = _call(entry, called)
    except (TypeError, ValueError) as error:
        message = str(error)
        if expect != ERROR:
            return f"{what} raised {type(error).__name__}: {message}"
        if name not in message:
            return f"{what}: the message does not name {name}: {message!r}"
        if not documented(name, type(error).__name__, message):
            return f"{what}: docs/errors.md lists no row for {name} that matches {type(error).__name__}: {message!r}"
        return None
    except Exception as error:  # noqa: BLE001 - any other exception is the failure this test looks for
        return f"{what} raised {type(error).__name__}: {error}"
    if said:
        return f"{what} warned: {said}"
    if expect == ERROR:
        return f"{what} was accepted"
    dtype = c.dtype
    if isinstance(expect, Same):
        expected, _ = _call(entry, dict(args, **{name: expect[0]}))
        _compare(result, expected, dtype, what)
    elif expect == OUT:
        assert all(r is o for r, o in zip(_outputs(result), _outputs(bad))), f"{what}: not the objects passed"
        _compare(result, entry.fn(**args), dtype, what)
    elif entry.reference is not None:
        options = ("exact", "out_dtype", "out", "whiten")
        _compare(result, entry.reference(**{k: v for k, v in called.items() if k not in options}), dtype, what)
    return None  # an adapter's: accepted, without a warning


@st.composite
def contexts(draw, entry: Entry):
    time_first = draw(st.booleans()) if entry.time_first is None else entry.time_first
    return Ctx(
        T=draw(st.integers(2, 6)), N=3, time_first=time_first,  # the loop of any width: few to compile
        time_dim=0 if time_first else draw(st.sampled_from([1, -1])) if entry.time_first is None else -1,
        dtype=torch.float32,  # dtypes are wrong values here, and test_fuzz's
        numpy=False if entry.torch_only else draw(st.booleans()), form=draw(st.sampled_from(entry.forms)),
        gen=torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1))),
    )


#: accepted values whose loop has types of its own (the CPU path compiles it, about a second
#: each): an example runs one of them, drawn, and every other wrong value
COMPILES = ("uint8 flags", "a float flag of nan", "a float flag of inf", "a float flag of 2.0", "int32 actions",
            "a bool mask", "a float mask", "float64", "a strided view")


def _param(entry: Entry):
    missing = entry.needs is not None and importlib.util.find_spec(entry.needs) is None
    return pytest.param(entry, id=entry.name,
                        marks=[pytest.mark.skipif(missing, reason=f"needs {entry.needs}, which is not installed")])


@pytest.mark.parametrize("entry", [_param(e) for e in ENTRIES])
# Each example makes a few hundred calls and reports every failure it meets, with the call drawn:
# shrinking one would take minutes and show no more.
@settings(max_examples=max(2, settings.default.max_examples // 10), phases=(Phase.explicit, Phase.generate))
@given(data=st.data())
def test_wrong_arguments(entry, data):
    """Each argument, one at a time, given a wrong value of each kind (this module's docstring)."""
    c = data.draw(contexts(entry), label="call")
    args = entry.args(c)
    if entry.name == "gae" and c.form == "mask":
        args["whiten"] = False
    found = list(wrong_values(entry, args, c))
    compiling = [k for k, (_, label, _, expect) in enumerate(found) if label in COMPILES and expect is not ERROR]
    if compiling:
        keep = data.draw(st.sampled_from(compiling), label="the accepted value with a loop of its own")
        found = [w for k, w in enumerate(found) if k == keep or k not in compiling]
    failures = [why for name, label, bad, expect in found
                if (why := check(entry, c, args, name, label, bad, expect)) is not None]
    count_example(f"test_arguments.py::test_wrong_arguments[{entry.name}]")
    assert not failures, "\n".join(failures)
