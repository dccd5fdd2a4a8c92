"""Repeat calls skip the checks.

An op call's arguments are checked once per *signature*: for every tensor argument its
type, shape, strides, dtype, device, 16-byte alignment and ``requires_grad``; for every
other argument its type and value; and the backend, the grad mode and any forced launch
settings. The first call with a signature runs the checked path; the dispatcher reports
what it ran (:class:`rlscan._dispatch.Ran`: the op, its scalars, the runner). The replay is
built from that and the op's argument→input mapping: the kernel input named ``x`` in
``OpSpec.inputs`` is the op function's argument named ``x`` (or nothing, where that
argument is a float or absent). It is kept in the signature cache (:mod:`rlscan._cache`),
and later calls with the same signature allocate the outputs and run the runner directly.

A call is replayed only when its checks depend on nothing but the signature and the op's
function handed its arguments to the kernel as they came. Calls that check values (a tensor
γ/λ, action indices or a mask on the CPU), convert arguments (broadcast coefficients), run
more than one op or none (the masked ops' two scans and one-pass kernels), write into
``out=``, raise, or run inside ``torch.compile`` always take the checked path. numpy
arrays are replayed on the CPU loop only (whose views do not depend on alignment, which an
array's key leaves out), which takes them in place of the tensors that wrapped them on the
checked call; numpy outputs are allocated as the checked path laid them out. A call that
recorded for the fused backward is replayed through the op's autograd function.
"""
from __future__ import annotations

import functools
import inspect
import operator

import numpy as np
import torch

from . import _backend, _cache, _dispatch
from ._autograd import with_fused_backward
from ._dispatch import recording_slot
from ._triton import launch as _launch

_CHECKED_PATH = object()  # the cache's entry for a signature that must always be checked


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


class _Entry:
    """A checked call's runner, replayed on new arguments with the same signature.

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


class _GradEntry:
    """A checked call that ran the op's autograd function, replayed on new arguments with the
    same signature (the same ``requires_grad`` flags). ``args`` is the checked call's, without
    its anchor (the replay's own first input takes its place); ``fused`` holds the forward
    runner, and ``args.backward_key`` names where the backward scans keep theirs."""

    __slots__ = ("pick", "anchor", "args", "op", "scalars", "fused", "wrap")

    def __call__(self, arguments: tuple):
        args = self.args._replace(anchor=arguments[self.anchor])
        return self.wrap(with_fused_backward(args, self.op, self.pick(arguments), self.scalars, self.fused))


@functools.lru_cache(maxsize=None)
def _parameters(fn) -> tuple:
    """The names of ``fn``'s parameters, in order."""
    return tuple(inspect.signature(fn).parameters)


def _places(fn, n_args: int, names: tuple, arguments: tuple, op) -> list:
    """Where each kernel input of ``op`` sits among the arguments: the argument of its name
    (``OpSpec.inputs``), or the last place (``None``) where that argument is absent or not
    an array (a float ``gamma``)."""
    parameters = _parameters(fn)
    places = []
    for name, _ in op.inputs:
        if name in names:
            place = n_args + names.index(name)
        else:
            k = parameters.index(name) if name in parameters else -1
            if not 0 <= k < n_args:
                if name not in parameters:
                    raise _Uncacheable  # a kernel input the op computes (the next kept values)
                k = len(arguments) - 1
            place = k
        if not isinstance(arguments[place], (torch.Tensor, np.ndarray)):
            place = len(arguments) - 1
        places.append(place)
    return places


def _passed_as_is(t, argument) -> bool:
    """Whether the checked call handed the kernel ``argument`` itself (or the tensor that
    wraps a numpy array), not a conversion of it: only then may a replay pass the argument."""
    if argument is None:
        return t is None
    if t is argument:
        return True
    return type(argument) is np.ndarray and t is not None and t.data_ptr() == argument.ctypes.data \
        and t.shape == argument.shape


def _picker(places: list):
    return (lambda a: (a[places[0]],)) if len(places) == 1 else operator.itemgetter(*places)


def _entry(fn, n_args: int, names: tuple, arguments: tuple, ran: list, result, key):
    if len(ran) != 1:
        raise _Uncacheable
    ran = ran[0]
    args = ran.args
    if args.checked_values:
        raise _Uncacheable
    places = _places(fn, n_args, names, arguments, ran.op)
    if not all(_passed_as_is(t, arguments[p]) for t, p in zip(ran.tensors, places)):
        raise _Uncacheable
    numpy_in = any(type(arguments[p]) is np.ndarray for p in places)
    if ran.kind == "grad":
        if numpy_in or args.numpy_io:
            raise _Uncacheable
        entry = _GradEntry()
        entry.args = args._replace(anchor=None, backward_key=key)  # holds no tensor of the first call
        entry.op, entry.scalars, entry.fused = ran.op, tuple(ran.scalars), ran.fused
        entry.wrap = _wrap(result, ran.outs)
    else:
        if ran.runner is None or (numpy_in and not _takes_numpy(ran.runner)):
            raise _Uncacheable
        entry = _Entry()
        entry.runner, entry.scalars, entry.n_out = ran.runner, tuple(ran.scalars), len(ran.outs)
        entry.dtype, entry.empty_like = ran.outs[0].dtype, torch.empty_like
        same = operator.is_
        if args.numpy_io:
            entry.dtype, entry.empty_like = _numpy_outputs(args, arguments[places[0]], ran.outs)
            same = lambda r, o: isinstance(r, np.ndarray) and r.ctypes.data == o.data_ptr()  # noqa: E731
        entry.wrap = _wrap(result, ran.outs, same)
    entry.pick, entry.anchor = _picker(places), places[0]
    return entry


def _wrap(result, outs: tuple, same=operator.is_):
    """How the op's function wraps the outputs ``outs`` into its ``result``."""
    if len(outs) == 1 and same(result, outs[0]):
        return lambda o: o[0]
    if isinstance(result, tuple) and len(result) == len(outs) and all(same(a, b) for a, b in zip(result, outs)):
        kind = type(result)
        return (lambda o: o) if kind is tuple else (lambda o: kind(*o))
    raise _Uncacheable


def _takes_numpy(runner) -> bool:
    """Whether ``runner`` may be handed the numpy arrays a call passed, in place of the tensors
    that wrapped them on the checked call: the CPU loop's views take either; a launch plan
    reads tensors, and its signature holds their alignment."""
    from ._cpu import CpuRunner  # here, not at the top: numba loads with the first CPU call

    return isinstance(runner, CpuRunner)


def _numpy_outputs(args, anchor: np.ndarray, outs) -> tuple:
    """``(dtype, empty_like)`` that allocate numpy outputs laid out as the checked call's
    ``outs``; only the CPU loop replays numpy calls, and only into its compute dtype."""
    dtype = outs[0].dtype
    if dtype != args.compute_dtype:
        raise _Uncacheable
    np_dtype = torch.empty((), dtype=dtype).numpy().dtype
    probe = np.empty_like(anchor, dtype=np_dtype)
    if any(probe.strides != tuple(s * o.element_size() for s in o.stride()) for o in outs):
        raise _Uncacheable
    return np_dtype, np.empty_like


def fast_path(fn):
    """Let repeat calls of the op function ``fn`` with the same signature skip the checks."""

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if torch.compiler.is_compiling() or getattr(recording_slot, "ran", None) is not None:
            return fn(*args, **kwargs)
        arguments = args + tuple(kwargs.values()) + (None,)
        try:
            key = (fn, tuple(kwargs), tuple(map(_value_key, arguments)), _backend.get_backend(),
                   torch.is_grad_enabled(), _launch.settings_key())
        except (_Uncacheable, RuntimeError):  # RuntimeError: a tensor without strides or storage (sparse)
            return fn(*args, **kwargs)
        entry = _cache.CACHE.get(key)
        if entry is _CHECKED_PATH:
            return fn(*args, **kwargs)
        if entry is not None:
            return entry(arguments)
        with _dispatch.recording() as ran:
            result = fn(*args, **kwargs)
        try:
            entry = _entry(fn, len(args), tuple(kwargs), arguments, ran, result, key)
        except _Uncacheable:
            entry = _CHECKED_PATH
        _cache.CACHE.keep(key, entry)
        return result

    return op
