"""One op call: its checked arguments, and the path that computes it.

An op's public function names its arguments to a :class:`Call`, which checks each one
(type, dtype, shape, device) as it arrives, then hands the tensors to :meth:`Call.run`.
``run`` picks the path:

* any input that needs a gradient: the fused kernel (or, on the CPU path, the compiled
  loop) inside an autograd function whose backward is the op's fused backward scan
  (``OpSpec.backward``: a Triton kernel, or on the CPU a compiled loop); otherwise
  (inside ``torch.compile``, ops without a fused backward) the op's differentiable form,
  written with torch operations around :func:`rlscan.linear_scan` (whose backward is one
  more scan);
* inside ``torch.compile``: the op's registered custom op, opaque to the tracer;
* otherwise: the fused Triton kernel or the compiled CPU loop, by backend. What ran is
  recorded for ``_fast``, so that repeat calls with the same signature skip the checks.

What an op is (its inputs, outputs and kernels) is its :class:`~rlscan._spec.OpSpec`; the
layers this module dispatches to (``_cpu``, ``_triton.launch``, ``_autograd``,
``_library``) read that, and none of them imports this module.
"""
from __future__ import annotations

import functools
import numbers
from typing import NamedTuple, Optional

import numpy as np
import torch

from . import _backend, _fast, _library
from ._autograd import with_fused_backward
from ._inputs import (
    check_bool,
    check_device,
    check_flag,
    check_float,
    check_shape,
    check_unit_interval,
    normalise_time_dim,
    plan_layout,
    to_tensor,
    type_name,
)
from ._spec import OpSpec, grid_view, kernel_strides, tensor_signature, triton_only
from ._triton import launch as _launch


class Coef(NamedTuple):
    """A per-step coefficient (``gamma``, ``lmbda``): a float, or a tensor broadcast to the inputs."""

    value: float  # used when tensor is None
    tensor: Optional[torch.Tensor]


def _compiling() -> bool:
    return torch.compiler.is_compiling()


class Call:
    """The checked arguments of one op call."""

    def __init__(self, anchor_name: str, anchor, time_dim, out_dtype=None):
        x, self.numpy_io = to_tensor(anchor_name, anchor)
        self.origins = {id(x): anchor} if self.numpy_io else {}  # the arrays that numpy arguments came as
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

    def copy(self) -> "Call":
        """A shallow copy (the same checked arguments), to change a field or two of."""
        other = Call.__new__(Call)
        other.__dict__.update(self.__dict__)
        return other

    # -- arguments ---------------------------------------------------------------------

    def _tensor(self, name: str, x) -> torch.Tensor:
        t, was_numpy = to_tensor(name, x)
        check_device(name, t, self.device, self.anchor_name)
        if was_numpy:
            self.origins[id(t)] = x
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

    @property
    def result_dtype(self) -> torch.dtype:
        if self.out_dtype is not None:
            return self.out_dtype
        first = self.dtypes[0]
        if all(d is first for d in self.dtypes):
            return first
        return functools.reduce(torch.promote_types, self.dtypes)

    @property
    def compute_dtype(self) -> torch.dtype:
        return torch.float64 if torch.float64 in self.dtypes else torch.float32

    def new_outputs(self, n: int) -> tuple:
        dtype = self.result_dtype
        return tuple(torch.empty_like(self.anchor, dtype=dtype) for _ in range(n))

    def finish(self, outs):
        if self.numpy_io:
            return tuple(o.numpy() for o in outs)
        return tuple(outs)

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

    def run(self, op: OpSpec, tensors: tuple, scalars: tuple = (), *, exact: bool = False, out=None) -> tuple:
        """Compute ``op`` on the checked ``tensors`` (in ``op.inputs`` order) and ``scalars``,
        into ``out`` when given."""
        exact = check_bool("exact", exact)
        outs = None
        if out is not None:
            outs = self.given_outputs(out, op.n_out, tensors)
            self.out_dtype = outs[0].dtype
        needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
        if 0 in self.shape:
            outs = outs or self.new_outputs(op.n_out)
            if needs_grad and out is None:
                # empty outputs, but part of the graph, so backward() works (with empty gradients)
                link = sum(t.sum() * 0 for t in tensors if t is not None and t.requires_grad)
                outs = tuple(o + link.to(o.dtype) for o in outs)
            return self.finish(outs) if out is None else passed_outputs(out, op.n_out)
        if needs_grad:
            if outs is not None:
                raise ValueError("out= cannot be used when an input requires grad (autograd needs fresh outputs)")
            if op.backward is not None and not _compiling():
                # the forward is the no-grad kernel's (or the CPU loop's); so is its result
                outs = with_fused_backward(self, op, tensors, scalars, exact)
                _fast.record_grad(self, op, tensors, scalars, exact, outs)
                return outs
            return self.finish(op.differentiable(self, *tensors, *scalars))
        if _compiling():
            if op.compiled is not None:
                results = op.compiled(self, tensors, scalars, exact)
            else:
                results = tuple(_library.fused(op)(list(tensors), list(scalars), self.time_dim, exact, self.out_dtype))
            if outs is None:
                return results
            for o, r in zip(outs, results):
                o.copy_(r)
            return outs
        if outs is not None:
            self.compute(op, tensors, scalars, outs, exact)
            return passed_outputs(out, op.n_out)  # what was passed, as torch's out= returns it
        outs = self.new_outputs(op.n_out)
        runner = self.compute(op, tensors, scalars, outs, exact)
        _fast.record(self, tensors, scalars, outs, runner)
        return self.finish(outs)

    def path(self) -> str:
        """``"triton"`` or ``"cpu"``: where the backend setting sends this call."""
        return _backend.path_for(self.device.type, self.anchor_name)

    def compute(self, op: OpSpec, tensors: tuple, scalars: tuple, outs: tuple, exact: bool, path=None):
        """Fill the preallocated ``outs`` (on ``path``, else where the backend sends the call).

        Returns the runner it used, ``runner(tensors, outs, scalars)``, which any call with
        the same signature (shapes, strides, dtypes, alignment, options) may reuse; ``None``
        when the call was split into several."""
        path = path or self.path()
        runner = self.runner(op, tensors, outs, exact, path)
        if runner is None:
            self._split(op, tensors, scalars, outs, exact, path)
        else:
            runner(tensors, outs, scalars)
        return runner

    def runner(self, op: OpSpec, tensors: tuple, outs: tuple, exact: bool, path: str):
        """What runs ``op`` on tensors laid out as these: a Triton launch plan or the CPU loop
        on a fixed layout; ``None`` when the batch dimensions need splitting."""
        signature = (id(op), exact, self.time_dim, self.device, tuple(map(tensor_signature, tensors)),
                     tuple(map(tensor_signature, outs)))
        if path == "triton":
            plan = _launch.cached_plan(signature)
            if plan is not None:
                return plan
        else:
            runner = _CPU_RUNNERS.get(signature)
            if runner is not None:
                return runner
        kinds = op.kinds
        full = [grid_view(t, k) for t, k in zip(tensors, kinds) if t is not None and k != "batch"]
        full += [o for o in outs if o is not None]
        batch = [t for t, k in zip(tensors, kinds) if t is not None and k == "batch"]
        layout = plan_layout(self.shape, self.time_dim, full, batch)
        if layout is None:
            return None
        if path == "triton":
            return self._plan(op, layout, tensors, outs, exact, signature)
        from ._cpu import cpu_runner  # here, not at the top: numba loads with the first CPU call

        if len(_CPU_RUNNERS) >= _MAX_CPU_RUNNERS:
            _CPU_RUNNERS.clear()
        runner = _CPU_RUNNERS[signature] = cpu_runner(op, layout, self.compute_dtype)
        return runner

    def _plan(self, op: OpSpec, layout, tensors, outs, exact, signature):
        strides = tuple((0, 0, 0) if t is None else kernel_strides(layout, t, k) for t, k in zip(tensors, op.kinds))
        lead = tensors[op.time_contiguous_of]
        time_contiguous = lead.stride(self.time_dim) == 1 and self.shape[self.time_dim] > 1
        init = None if op.init_of is None else tensors[op.init_of]
        return _launch.new_plan(
            op.kernel(), layout, tuple(tensors), strides, tuple(outs),
            tuple(layout.strides(next(o for o in outs if o is not None))),
            compute_dtype=self.compute_dtype, time_contiguous=time_contiguous, exact=exact, init_of=op.init_of,
            init_strides=tuple(layout.batch_strides(init)), signature=signature,
            cpu_fallback=None if _no_cpu_fallback(op) else _on_cpu(self, op, exact),
        )

    def _split(self, op, tensors, scalars, outs, exact, path) -> None:
        """More than two strided batch groups: run each slice of the first batch dimension."""
        d = next(d for d in range(len(self.shape)) if d != self.time_dim and self.shape[d] != 1)
        db = d if d < self.time_dim else d - 1
        for i in range(self.shape[d]):
            sub = self.copy()
            sub.shape = self.shape[:d] + self.shape[d + 1 :]
            sub.time_dim = self.time_dim - (d < self.time_dim)
            sub.batch_shape = self.batch_shape[:db] + self.batch_shape[db + 1 :]
            picked = tuple(
                None if t is None else t.select(db if b else d, i) for t, b in zip(tensors, op.batch_mask)
            )
            sub.anchor = self.anchor.select(d, i)
            sub.compute(op, picked, scalars, tuple(None if o is None else o.select(d, i) for o in outs), exact, path)


def passed_outputs(out, n: int) -> Optional[tuple]:
    """``out=`` of an op with ``n`` outputs as a tuple of what was passed (``None`` when it is
    neither one output nor a tuple or list of ``n``)."""
    if isinstance(out, (tuple, list)):
        return tuple(out) if len(out) == n else None
    return (out,) if n == 1 else None


def _cpu_copy(x: torch.Tensor) -> torch.Tensor:
    """``x`` on the CPU with the same shape and strides (broadcast axes stay broadcast)."""
    span = sum((n - 1) * s for n, s in zip(x.shape, x.stride()) if n > 1) + 1
    flat = x.as_strided((span,), (1,)).cpu()
    return flat.as_strided(x.shape, x.stride())


def _no_cpu_fallback(op: OpSpec) -> bool:
    """Whether a launch plan of ``op`` that compiles nothing raises :class:`NoKernel` instead of
    running the CPU path on copies: for a fused backward (no torch form of its own), whose
    caller then differentiates the forward op's torch form on the call's device, cheaper than
    copying every saved tensor to the host and back."""
    return op.differentiable is triton_only


def _on_cpu(call: Call, op: OpSpec, exact: bool):
    """What runs ``op`` where no Triton kernel compiles: the CPU path on copies of the inputs,
    the results copied back (a launch plan's last resort)."""
    template = dict(call.__dict__, anchor=None, device=torch.device("cpu"))

    def run(ins, outs, scalars):
        sub = Call.__new__(Call)
        sub.__dict__.update(template)
        cpu_outs = tuple(None if o is None else torch.empty(o.shape, dtype=o.dtype) for o in outs)
        sub.anchor = next(o for o in cpu_outs if o is not None)
        sub.compute(op, tuple(None if t is None else _cpu_copy(t) for t in ins), scalars, cpu_outs, exact, path="cpu")
        for o, c in zip(outs, cpu_outs):
            if o is not None:
                o.copy_(c)

    return run


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


# CPU runners by call signature (the Triton path keeps its launch plans in ``_triton.launch``)
_CPU_RUNNERS: dict = {}
_MAX_CPU_RUNNERS = 1024


def trusted_call(spec: OpSpec, tensors, time_dim: int, out_dtype) -> Call:
    """A :class:`Call` for arguments that the op's public function has already checked (a
    custom op's, run from a compiled graph): nothing is checked again."""
    call = Call.__new__(Call)
    anchor = tensors[0]
    call.anchor_name, call.anchor, call.numpy_io = spec.inputs[0][0], anchor, False
    call.shape, call.device, call.time_dim = anchor.shape, anchor.device, time_dim
    call.batch_shape = call.shape[:time_dim] + call.shape[time_dim + 1 :]
    call.dtypes = [t.dtype for t, (_, kind) in zip(tensors, spec.inputs) if t is not None and kind in ("series", "batch")]
    call.out_dtype = out_dtype
    return call


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
