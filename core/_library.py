"""Every op as a PyTorch custom op (``torch.ops.rlscan.*``).

``torch.compile`` sees a custom op as one opaque node with a fake implementation for
shapes and dtypes, so a compiled function that calls any rlscan op traces with no graph
break, on CUDA and on CPU, and CUDA graphs capture the real launch. Eager calls skip the
dispatcher (it costs more than a launch) and run the same implementation directly.

A custom op runs its op through the :class:`rlscan._call.CallArgs` of arguments that are
checked already. The function that builds them (``_call.trusted_call``) is handed to
:func:`register_fused` by the op's module: the call machinery uses this layer (a call
inside ``torch.compile`` runs the op's custom op), so this layer does not import it.

``rlscan::linear_scan``, whose registered autograd formula makes every op differentiable
compiled or not, is defined with the linear scan (``ops/linear_scan/op.py``).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.library import Library

from . import _backend, _cache
from ._spec import OpSpec, tensor_signature
from ._triton import launch as _launch

_FUSED: dict = {}


class _Runners:
    """One op's custom op: its runner by call signature, from the signature cache.

    Inside a compiled graph the op runs on arguments the graph has already checked, once per
    replay, so its runner (a Triton launch plan or the CPU loop on a fixed layout) is looked
    up by the tensors' signature (shapes, strides, dtypes, alignment) and the options, and
    run on fresh outputs: no call is checked and no layout planned again."""

    def __init__(self, spec: OpSpec, new_call: Callable):
        self.spec, self.new_call = spec, new_call

    def __call__(self, tensors: list, scalars: list, time_dim: int, exact: bool, out_dtype) -> list:
        key = ("custom op", id(self.spec), tuple(map(tensor_signature, tensors)), time_dim, exact, out_dtype,
               _backend.get_backend()) + _launch.settings_key()
        found = _cache.CACHE.get(key)
        if found is not None:
            runner, dtype = found
            anchor = tensors[0]
            outs = tuple([torch.empty_like(anchor, dtype=dtype) for _ in range(self.spec.n_out)])
            runner(tuple(tensors), outs, tuple(scalars))
            return list(outs)
        call = self.new_call(self.spec, tensors, time_dim, out_dtype)
        outs = call.new_outputs(self.spec.n_out)
        if 0 not in call.shape:
            runner = call.compute(self.spec, tuple(tensors), tuple(scalars), outs, exact)
            if runner is not None:  # None: split into several launches, planned each time
                _cache.CACHE.keep(key, (runner, outs[0].dtype))
        return list(outs)


# The fused ops are defined through a plain Library, not ``custom_op``: they never need
# autograd (a call that does takes the op's differentiable form), and ``custom_op``'s
# Python autograd layer and dynamo guards cost more per call inside a compiled graph than
# the launch itself.
_LIB = Library("rlscan", "FRAGMENT")
_FUSED_SCHEMA = "(Tensor?[] tensors, float[] scalars, int time_dim, bool exact, ScalarType? out_dtype) -> Tensor[]"


def register_fused(spec: OpSpec, new_call: Callable):
    """Register ``rlscan::<spec.name>``, the op's fused kernel, and return it.

    ``new_call(spec, tensors, time_dim, out_dtype)`` is the :class:`~rlscan._call.CallArgs` that
    runs the op on arguments that are checked already (``rlscan._call.trusted_call``)."""
    runners = _Runners(spec, new_call)

    def fake(tensors, scalars, time_dim, exact, out_dtype):
        return list(new_call(spec, tensors, time_dim, out_dtype).new_outputs(spec.n_out))

    _LIB.define(spec.name + _FUSED_SCHEMA)
    _LIB.impl(spec.name, runners, "CompositeExplicitAutograd")
    torch.library.register_fake(f"rlscan::{spec.name}", fake, lib=_LIB)
    op = getattr(torch.ops.rlscan, spec.name).default
    _FUSED[spec.name] = op
    return op


def fused(spec: OpSpec):
    return _FUSED[spec.name]
