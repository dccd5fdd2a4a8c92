"""Repeat calls skip the checks.

An op call's arguments are checked once per *signature*: for every tensor argument its
type, shape, strides, dtype, device, 16-byte alignment and ``requires_grad``; for every
other argument its type and value; and the backend, the grad mode and any forced launch
settings. The first call with a signature runs the checked path and records what it
ran: which arguments became the kernel's inputs, the scalars, the output dtype, and the
runner (a Triton launch plan, or the CPU loop on a fixed layout). Later calls with the
same signature allocate the outputs and run the runner directly.

A call is recorded only when its checks depend on nothing but the signature. Calls that
check values (a tensor γ/λ or action indices on the CPU), convert arguments (broadcast
coefficients), need gradients on the CPU path, write into ``out=``, are split into several launches,
raise, or run inside ``torch.compile`` always take the checked path. numpy arrays, any
argument, are replayed on the CPU loop only (whose views do not depend on alignment, which
an array's key leaves out), which takes them where the checked call passed the tensors
that wrap them; numpy outputs are allocated as the checked path laid them out. A call that
records the fused backward (the Triton path) is replayed through the op's autograd function.
"""
from __future__ import annotations

import functools
import operator
import threading

import numpy as np
import torch

from . import _backend
from ._autograd import with_fused_backward
from ._triton import launch as _launch

_MAX_ENTRIES = 1024
_CHECKED_PATH = object()  # the cache's entry for a signature that must always be checked
_CACHE: dict = {}
_local = threading.local()


class _Uncacheable(Exception):
    pass


def _value_key(v):
    kind = type(v)
    if kind is torch.Tensor:
        # get_device() is -1 off CUDA: a tensor without storage (meta) is told apart by its device
        at = v.data_ptr()
        return v.shape, v.stride(), v.dtype, v.get_device(), at & 15 if at else v.device, v.requires_grad
    if v is None or kind in (float, int, bool, str, torch.dtype):
        return kind, v
    if kind is np.ndarray:
        return kind, v.shape, v.strides, v.dtype
    raise _Uncacheable


def record(call, tensors: tuple, scalars: tuple, outs: tuple, runner) -> None:
    """Note what a checked call ran (``Call.run`` calls this after filling fresh outputs)."""
    log = getattr(_local, "log", None)
    if log is not None:
        log.append((call, tensors, scalars, outs, runner))


def record_grad(call, op, tensors: tuple, scalars: tuple, exact: bool, outs: tuple) -> None:
    """Note a checked call that recorded the fused backward (``Call.run`` calls this)."""
    log = getattr(_local, "log", None)
    if log is not None:
        log.append(("grad", call, op, tensors, scalars, exact, outs))


class _GradEntry:
    """A recorded call that runs the op's autograd function, replayed on new arguments with
    the same signature (the same ``requires_grad`` flags). The checked call, without its
    tensors, stands for the call that backward reads (shapes, time axis, dtypes); its anchor
    is the op's input at ``anchor_slot``, which the autograd function puts back."""

    __slots__ = ("pick", "call", "op", "scalars", "exact", "wrap")

    def __call__(self, arguments: tuple):
        return self.wrap(with_fused_backward(self.call, self.op, self.pick(arguments), self.scalars, self.exact))


class _Entry:
    """A recorded call, replayed on new arguments with the same signature.

    The arguments are seen as one tuple, ``args + kwargs' values + (None,)``: the keyword
    names and their order are part of the signature, so positions in it are fixed."""

    __slots__ = ("pick", "anchor", "runner", "scalars", "dtype", "n_out", "wrap", "empty_like")

    def __call__(self, arguments: tuple):
        tensors = self.pick(arguments)
        anchor = arguments[self.anchor]
        dtype, empty_like = self.dtype, self.empty_like
        if self.n_out == 1:
            outs = (empty_like(anchor, dtype=dtype),)
        else:
            outs = tuple([empty_like(anchor, dtype=dtype) for _ in range(self.n_out)])
        self.runner(tensors, outs, self.scalars)
        return self.wrap(outs)


def _source(t, arguments: tuple, origins: dict) -> int:
    """Where tensor ``t`` (or the numpy array it wraps) sits among the arguments (the last
    place, ``None``, for ``None``). A tensor passed as two arguments makes the call
    uncacheable: which argument it stood for would be a guess on the next call."""
    if t is None:
        return len(arguments) - 1
    origin = origins.get(id(t), t)
    places = [i for i, a in enumerate(arguments) if a is origin]
    if len(places) != 1:
        raise _Uncacheable
    return places[0]


def _entry(log, arguments: tuple, result):
    if len(log) != 1:
        raise _Uncacheable
    if log[0][0] == "grad":
        return _grad_entry(log[0][1:], arguments, result)
    call, tensors, scalars, outs, runner = log[0]
    if runner is None or call.checked_values:
        raise _Uncacheable
    origins = getattr(call, "origins", {})
    if origins and not _takes_numpy(runner):
        raise _Uncacheable
    entry = _Entry()
    sources = [_source(t, arguments, origins) for t in tensors]
    entry.pick = (lambda a: (a[sources[0]],)) if len(sources) == 1 else operator.itemgetter(*sources)
    entry.anchor = _source(call.anchor, arguments, origins)
    entry.runner, entry.scalars, entry.n_out = runner, tuple(scalars), len(outs)
    entry.dtype, entry.empty_like = outs[0].dtype, torch.empty_like
    if call.numpy_io:
        entry.dtype, entry.empty_like = _numpy_outputs(call, runner, outs)
        same = lambda r, o: isinstance(r, np.ndarray) and r.ctypes.data == o.data_ptr()  # noqa: E731
    else:
        same = operator.is_
    if len(outs) == 1 and same(result, outs[0]):
        entry.wrap = lambda o: o[0]
    elif isinstance(result, tuple) and len(result) == len(outs) and all(same(a, b) for a, b in zip(result, outs)):
        kind = type(result)
        entry.wrap = (lambda o: o) if kind is tuple else (lambda o: kind(*o))
    else:
        raise _Uncacheable
    return entry


def _wrap(result, outs: tuple, same=operator.is_):
    """How the op's function wraps the outputs ``outs`` into its ``result``."""
    if len(outs) == 1 and same(result, outs[0]):
        return lambda o: o[0]
    if isinstance(result, tuple) and len(result) == len(outs) and all(same(a, b) for a, b in zip(result, outs)):
        kind = type(result)
        return (lambda o: o) if kind is tuple else (lambda o: kind(*o))
    raise _Uncacheable


def _grad_entry(recorded, arguments: tuple, result):
    call, op, tensors, scalars, exact, outs = recorded
    if call.checked_values or call.numpy_io:
        raise _Uncacheable
    entry = _GradEntry()
    sources = [_source(t, arguments, {}) for t in tensors]
    entry.pick = operator.itemgetter(*sources) if len(sources) > 1 else (lambda a: (a[sources[0]],))
    slots = [k for k, t in enumerate(tensors) if t is call.anchor]
    if not slots:
        raise _Uncacheable
    template = call.copy()
    template.anchor = template.origins = None  # hold no tensor of the first call
    template.anchor_slot = slots[0]
    template.backward_runners = {}  # shared by the replays' calls (see _autograd.run_backward)
    entry.call, entry.op, entry.scalars, entry.exact = template, op, tuple(scalars), exact
    entry.wrap = _wrap(result, outs)
    return entry


def _takes_numpy(runner) -> bool:
    """Whether ``runner`` may be handed the numpy arrays a call passed, in place of the tensors
    that wrapped them on the checked call: the CPU loop's views take either; a launch plan
    reads tensors, and its signature holds their alignment."""
    from ._cpu import CpuRunner  # here, not at the top: numba loads with the first CPU call

    return isinstance(runner, CpuRunner)


def _numpy_outputs(call, runner, outs) -> tuple:
    """``(dtype, empty_like)`` that allocate numpy outputs laid out as the checked call's
    ``outs``; only the CPU loop replays numpy calls, and only into its compute dtype."""
    dtype = outs[0].dtype
    if dtype != call.compute_dtype:
        raise _Uncacheable
    anchor = call.origins[id(call.anchor)]
    np_dtype = torch.empty((), dtype=dtype).numpy().dtype
    probe = np.empty_like(anchor, dtype=np_dtype)
    if any(probe.strides != tuple(s * o.element_size() for s in o.stride()) for o in outs):
        raise _Uncacheable
    return np_dtype, np.empty_like


def fast_path(fn):
    """Let repeat calls of the op function ``fn`` with the same signature skip the checks."""

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if torch.compiler.is_compiling() or getattr(_local, "log", None) is not None:
            return fn(*args, **kwargs)
        arguments = args + tuple(kwargs.values()) + (None,)
        try:
            key = (fn, tuple(kwargs), tuple(map(_value_key, arguments)), _backend.get_backend(),
                   torch.is_grad_enabled(), _launch.settings_key())
        except (_Uncacheable, RuntimeError):  # RuntimeError: a tensor without strides or storage (sparse)
            return fn(*args, **kwargs)
        entry = _CACHE.get(key)
        if entry is _CHECKED_PATH:
            return fn(*args, **kwargs)
        if entry is not None:
            return entry(arguments)
        _local.log = log = []
        try:
            result = fn(*args, **kwargs)
        finally:
            _local.log = None
        try:
            entry = _entry(log, arguments, result)
        except _Uncacheable:
            entry = _CHECKED_PATH
        if len(_CACHE) >= _MAX_ENTRIES:
            _CACHE.clear()
        _CACHE[key] = entry
        return result

    return op
