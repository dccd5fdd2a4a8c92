"""One op call's arguments: checked as they arrive, then frozen and handed to the dispatcher.

An op's public function names its arguments to a :class:`Call`, which checks each one
(type, dtype, shape, device) as it arrives. :meth:`Call.run` then freezes what was checked
into :class:`CallArgs` and hands it, with the op's kernel inputs, to the dispatcher
(:mod:`rlscan._dispatch`), which picks the path. What an op is (its inputs, outputs and
kernels) is its :class:`~rlscan._spec.OpSpec`.

:class:`CallArgs` is what every later layer sees of a call: the dispatcher, the CPU and
Triton runners, autograd and the custom ops. It is a named tuple, so no layer can note
anything on it: what a layer keeps for later calls lives in the signature cache
(:mod:`rlscan._cache`).
"""
from __future__ import annotations

import functools
import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch

from . import _dispatch
from ._dispatch import passed_outputs
from ._inputs import (
    check_bool,
    check_device,
    check_flag,
    check_float,
    check_shape,
    check_unit_interval,
    normalise_time_dim,
    to_tensor,
    type_name,
)
from ._spec import Masked, OpSpec

__all__ = ["Call", "CallArgs", "Coef", "passed_outputs", "trusted_call", "value_after_rule"]


class Coef(NamedTuple):
    """A per-step coefficient (``gamma``, ``lmbda``): a float, or a tensor broadcast to the inputs."""

    value: float  # used when tensor is None
    tensor: Optional[torch.Tensor]


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def _result_dtype(dtypes, out_dtype) -> torch.dtype:
    """``out_dtype`` when given, else the promoted dtype of the floating arguments."""
    if out_dtype is not None:
        return out_dtype
    first = dtypes[0]
    if all(d is first for d in dtypes):
        return first
    return functools.reduce(torch.promote_types, dtypes)


def _compute_dtype(dtypes) -> torch.dtype:
    """float64 where any floating argument is, else float32 (half types are computed in float32)."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


class CallArgs(NamedTuple):
    """The checked arguments of one op call, frozen.

    ``anchor`` is the op's first input, whose shape, device and time axis every other input
    was checked against; ``dtypes`` are the floating inputs' dtypes (they decide the result
    and compute dtypes). ``backward_key`` is set on a replayed call that records for
    backward: its fused backward scans keep their runners in the signature cache under it
    (see :func:`rlscan._autograd.run_backward`)."""

    anchor_name: str
    anchor: Optional[torch.Tensor]
    shape: torch.Size
    device: torch.device
    time_dim: int
    batch_shape: torch.Size
    dtypes: tuple
    out_dtype: Optional[torch.dtype]
    numpy_io: bool = False  # the anchor came as a numpy array: the results go back as arrays
    checked_values: bool = False  # a check read tensor values: repeat calls must check again
    backward_key: Optional[tuple] = None

    @property
    def result_dtype(self) -> torch.dtype:
        return _result_dtype(self.dtypes, self.out_dtype)

    @property
    def compute_dtype(self) -> torch.dtype:
        return _compute_dtype(self.dtypes)

    def new_outputs(self, n: int) -> tuple:
        """``n`` fresh outputs laid out as the anchor, in the result dtype."""
        dtype = self.result_dtype
        return tuple(torch.empty_like(self.anchor, dtype=dtype) for _ in range(n))

    def finish(self, outs) -> tuple:
        """The outputs as the caller gets them: numpy arrays for a numpy anchor."""
        if self.numpy_io:
            return tuple(o.numpy() for o in outs)
        return tuple(outs)

    def path(self) -> str:
        """``"triton"`` or ``"cpu"``: where the backend setting sends this call."""
        return _dispatch.path_of(self)

    def compute(self, op: OpSpec, tensors: tuple, scalars: tuple, outs: tuple, exact: bool, path=None):
        """Fill ``outs`` with ``op`` on ``tensors`` (:func:`rlscan._dispatch.compute`); returns the runner."""
        return _dispatch.compute(self, op, tensors, scalars, outs, exact, path)


class Call:
    """The arguments of one op call, checked as the op's function names them."""

    __slots__ = ("anchor_name", "anchor", "shape", "device", "time_dim", "batch_shape", "dtypes", "out_dtype",
                 "numpy_io", "checked_values")

    def __init__(self, anchor_name: str, anchor, time_dim, out_dtype=None):
        x, self.numpy_io = to_tensor(anchor_name, anchor)
        check_float(anchor_name, x)
        self.anchor_name = anchor_name
        self.anchor = x
        self.shape = x.shape
        self.device = x.device
        self.time_dim = normalise_time_dim(time_dim, x.ndim, anchor_name)
        self.batch_shape = self.shape[: self.time_dim] + self.shape[self.time_dim + 1 :]
        self.dtypes = [x.dtype]
        self.checked_values = False  # whether a check read tensor values (then repeat calls must check again)
        if out_dtype is not None and out_dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise TypeError(f"out_dtype must be a floating torch dtype or None, got {out_dtype!r}")
        self.out_dtype = out_dtype

    def args(self) -> CallArgs:
        """What was checked so far, frozen."""
        return CallArgs(self.anchor_name, self.anchor, self.shape, self.device, self.time_dim, self.batch_shape,
                        tuple(self.dtypes), self.out_dtype, self.numpy_io, self.checked_values)

    @property
    def result_dtype(self) -> torch.dtype:
        return _result_dtype(self.dtypes, self.out_dtype)

    @property
    def compute_dtype(self) -> torch.dtype:
        return _compute_dtype(self.dtypes)

    def new_outputs(self, n: int) -> tuple:
        return self.args().new_outputs(n)

    def finish(self, outs) -> tuple:
        return self.args().finish(outs)

    def path(self) -> str:
        """``"triton"`` or ``"cpu"``: where the backend setting sends this call."""
        return _dispatch.path_of(self)

    # -- arguments ---------------------------------------------------------------------

    def _tensor(self, name: str, x) -> torch.Tensor:
        t, _ = to_tensor(name, x)
        check_device(name, t, self.device, self.anchor_name)
        return t

    def series(self, name: str, x, required: bool = False) -> Optional[torch.Tensor]:
        """A floating tensor of the anchor's shape, or None (an error when ``required``)."""
        if x is None:
            if required:
                raise TypeError(f"{name} is required: a floating tensor of {self.anchor_name}'s shape, got None")
            return None
        x = self._tensor(name, x)
        check_float(name, x)
        check_shape(name, x, self.shape, self.anchor_name)
        self.dtypes.append(x.dtype)
        return x

    def batch(self, name: str, x) -> Optional[torch.Tensor]:
        """A floating tensor with one value per environment (the shape without ``time_dim``)."""
        if x is None:
            return None
        x = self._tensor(name, x)
        check_float(name, x)
        if x.shape != self.batch_shape:
            raise ValueError(
                f"{name} must have the batch shape of {self.anchor_name} (its shape without time_dim="
                f"{self.time_dim}), {tuple(self.batch_shape)}, got {tuple(x.shape)}"
            )
        self.dtypes.append(x.dtype)
        return x

    def table(self, name: str, x, like: Optional[torch.Tensor] = None) -> torch.Tensor:
        """A floating ``[*shape, A]`` table of per-action values (``A >= 1``)."""
        x = self._tensor(name, x)
        check_float(name, x)
        if x.shape[:-1] != self.shape or x.dim() != len(self.shape) + 1 or x.shape[-1] < 1:
            raise ValueError(
                f"{name} must have the shape of {self.anchor_name} plus a last axis of actions, "
                f"{tuple(self.shape)} + (A,), got {tuple(x.shape)}"
            )
        if like is not None and x.shape != like.shape:
            raise ValueError(f"{name} must have the shape of the action values, {tuple(like.shape)}, got {tuple(x.shape)}")
        self.dtypes.append(x.dtype)
        return x

    def actions(self, name: str, x, n_actions: int) -> torch.Tensor:
        """Integer action indices in ``[0, n_actions)``, of the anchor's shape."""
        x = self._tensor(name, x)
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor of action indices, got {x.dtype}")
        check_shape(name, x, self.shape, self.anchor_name)
        if x.device.type == "cpu" and not _compiling():
            self.checked_values = True
            if x.numel() and not bool(((x >= 0) & (x < n_actions)).all()):
                raise ValueError(f"{name} must lie in [0, {n_actions}) (the number of actions)")
        return x

    def flags(self, name: str, x) -> Optional[torch.Tensor]:
        """Episode flags (bool, uint8 or float 0/1) of the anchor's shape, or None."""
        if x is None:
            return None
        x = self._tensor(name, x)
        check_flag(name, x)
        check_shape(name, x, self.shape, self.anchor_name)
        return x

    def episode_ends(self, op_name: str, next_values, bootstrap_value, terminated, truncated, *, required: bool,
                     value_name: str = "values") -> tuple:
        """``(next_values, bootstrap_value, terminated, truncated)``, checked, with the rules that
        make the value after each step well defined (docs/semantics.md)."""
        next_values = self.series(f"next_{value_name}", next_values)
        bootstrap_value = self.batch("bootstrap_value", bootstrap_value)
        terminated = self.flags("terminated", terminated)
        truncated = self.flags("truncated", truncated)
        value_after_rule(op_name, next_values, bootstrap_value, truncated, required=required, value_name=value_name)
        return next_values, bootstrap_value, terminated, truncated

    def coef(self, name: str, value) -> Coef:
        """``gamma`` or ``lmbda``: a float in [0, 1], or a tensor that broadcasts to the inputs."""
        if type(value) is float and 0.0 <= value <= 1.0:
            return Coef(value, None)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            value = float(value)
            check_unit_interval(name, value)
            return Coef(value, None)
        if not isinstance(value, (torch.Tensor, np.ndarray)):
            raise TypeError(f"{name} must be a float or a tensor, got {type_name(value)}")
        x = self._tensor(name, value)
        check_float(name, x)
        try:
            x = x if x.shape == self.shape else x.expand(self.shape)
        except RuntimeError:
            raise ValueError(
                f"{name} of shape {tuple(x.shape)} does not broadcast to {self.anchor_name}'s shape {tuple(self.shape)}"
            ) from None
        if x.device.type == "cpu" and not _compiling():
            self.checked_values = True
            if x.numel() and not bool(((x >= 0) & (x <= 1)).all()):
                raise ValueError(f"{name} must lie in [0, 1] (and not be NaN) at every step")
        return Coef(0.0, x)

    # -- results -----------------------------------------------------------------------

    def given_outputs(self, out, n: int, tensors: tuple) -> tuple:
        """Check ``out=``: ``n`` floating tensors (or writeable arrays) of the anchor's shape,
        on its device, that overlap neither each other nor any input."""
        outs = passed_outputs(out, n)
        if outs is None:
            raise TypeError(f"out must be {'a tensor' if n == 1 else f'a tuple of {n} tensors'}, got {type_name(out)}")
        checked = []
        for k, o in enumerate(outs):
            name = "out" if n == 1 else f"out[{k}]"
            if isinstance(o, np.ndarray) and not o.flags.writeable:
                raise ValueError(f"{name} is a read-only numpy array: rlscan writes its outputs there")
            o = self._tensor(name, o)
            check_float(name, o)
            check_shape(name, o, self.shape, self.anchor_name)
            if self.out_dtype is not None and o.dtype != self.out_dtype:
                raise TypeError(f"{name} has dtype {o.dtype} but out_dtype is {self.out_dtype}")
            if any(s == 0 and n > 1 for n, s in zip(o.shape, o.stride())):
                raise ValueError(f"{name} overlaps itself: its elements share memory (a broadcast view); it needs one place per output")
            if o.requires_grad and torch.is_grad_enabled():
                raise ValueError(f"{name} requires grad: autograd cannot follow a write into out= (pass a tensor "
                                 "that does not require grad, or leave out= out)")
            checked.append(o)
        others = [t for t in tensors if t is not None]
        for k, o in enumerate(checked):
            for other in checked[:k] + others:
                if _overlap(o, other):
                    raise ValueError("out must not overlap the inputs or the other outputs (it is written while they are read)")
        return tuple(checked)

    # -- running -----------------------------------------------------------------------

    def run(self, op, tensors: tuple, scalars: tuple = (), *, exact: bool = False, out=None,
            whiten: bool = False) -> tuple:
        """Compute ``op`` on the checked ``tensors`` (in ``op.inputs`` order) and ``scalars``,
        into ``out`` when given (:func:`rlscan._dispatch.run` picks the path). ``op`` is an
        :class:`~rlscan._spec.OpSpec`, or a :class:`~rlscan._spec.Masked` op taken from its mask
        (:func:`rlscan._dispatch.run_masked`; ``whiten`` standardises its first output)."""
        exact = check_bool("exact", exact)
        if type(op) is Masked:
            return _dispatch.run_masked(self, op, tensors, scalars, exact, out, whiten)
        outs = None
        if out is not None:
            outs = self.given_outputs(out, op.n_out, tensors)
            self.out_dtype = outs[0].dtype
        return _dispatch.run(self.args(), op, tensors, scalars, exact, outs, out)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the memory spans of two tensors intersect (conservative for interleaved views)."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False

    def span(x):
        start = x.data_ptr()
        return start, start + (sum((n - 1) * abs(s) for n, s in zip(x.shape, x.stride())) + 1) * x.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def trusted_call(spec: OpSpec, tensors, time_dim: int, out_dtype) -> CallArgs:
    """The :class:`CallArgs` of arguments that the op's public function has already checked (a
    custom op's, run from a compiled graph; a fused backward's): nothing is checked again."""
    anchor = tensors[0]
    shape = anchor.shape
    dtypes = tuple(t.dtype for t, (_, kind) in zip(tensors, spec.inputs) if t is not None and kind in ("series", "batch"))
    return CallArgs(spec.inputs[0][0], anchor, shape, anchor.device, time_dim, shape[:time_dim] + shape[time_dim + 1 :],
                    dtypes, out_dtype)


def value_after_rule(name: str, next_values, bootstrap, truncated, *, required: bool, value_name="values") -> None:
    """The checks that make ``V'_t`` well defined (docs/semantics.md, "The value after step t")."""
    if next_values is not None and bootstrap is not None:
        raise ValueError(
            f"{name}: pass either next_{value_name} or bootstrap_value, not both "
            f"(next_{value_name}[T-1] already is the value after the window)"
        )
    if truncated is not None and next_values is None:
        raise ValueError(
            f"{name}: truncated needs next_{value_name}: a truncated step bootstraps from the value of the "
            f"final observation, which only next_{value_name}[t] can hold ({value_name}[t+1] is the next "
            "episode's first state)"
        )
    if required and next_values is None and bootstrap is None:
        raise ValueError(
            f"{name} needs the value after the last step: pass bootstrap_value (one value per environment) "
            f"or next_{value_name}"
        )
