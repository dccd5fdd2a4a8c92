"""The dispatcher: which path computes a checked call, and the runner that computes it.

:func:`run` takes a call's frozen arguments (:class:`rlscan._call.CallArgs`), the op's
kernel inputs and its scalars, and picks the path:

* an empty call: empty outputs (part of the graph where an input needs a gradient);
* any input that needs a gradient: the fused forward inside an autograd function whose
  backward is the op's fused backward scan (``OpSpec.backward``: a Triton kernel, or on
  the CPU a compiled loop); where the op has none, or inside ``torch.compile``, the op's
  differentiable form, written with torch operations around :func:`rlscan.linear_scan`;
* inside ``torch.compile``: the op's registered custom op, opaque to the tracer;
* otherwise the runner for the call's signature, into ``out=`` or fresh outputs.

A masked op taken from its mask (:class:`rlscan._spec.Masked`, the masked GAE) goes through
:func:`run_masked`, which picks its plan variant the same way: a one-pass variant of the
call's path where the call wants fresh outputs without a graph outside ``torch.compile``
(on the Triton path, outside ``exact``), else, or where the variant does not apply, the two
scans through :func:`run`.

:func:`compute` fills outputs through a *runner*, ``runner(tensors, outs, scalars)``, kept
in the signature cache (:mod:`rlscan._cache`) under everything it depends on: on the Triton
path a launch plan (:mod:`rlscan._triton.launch`; an op whose kernel names a plan of its own,
as Retrace-from-Q's table prologue does, gets that plan), on the CPU path the compiled loop
on a fixed layout (:mod:`rlscan._cpu`). A plan that compiles nothing falls back to the CPU
path on copies of the inputs. Calls whose batch dimensions do not merge into two strided
groups run one slice at a time.

A call that a public op's replay may repeat (fresh outputs, or a recording for the fused
backward) is reported to an open :func:`recording` as a :class:`Ran`: ``_fast`` builds the
replay from it and the op's argument→input mapping.
"""
from __future__ import annotations

import threading
from typing import NamedTuple, Optional

import torch

from . import _backend, _cache, _library
from ._autograd import Fused, with_fused_backward
from ._inputs import plan_layout
from ._spec import Masked, OpSpec, grid_view, kernel_strides, tensor_signature, triton_only
from ._triton import launch as _launch


class Ran(NamedTuple):
    """What the dispatcher ran for a call that a replay may repeat: ``kind`` is ``"fresh"``
    (``runner`` into fresh ``outs``; ``None``: split into launches) or ``"grad"`` (the fused
    autograd function, whose forward runner ``fused`` notes)."""

    kind: str
    args: object  # CallArgs
    op: OpSpec
    tensors: tuple
    scalars: tuple
    exact: bool
    outs: tuple
    runner: object = None
    fused: Optional[Fused] = None


#: the open :func:`recording`'s list, per thread (``ran``; absent or None: none is open)
recording_slot = threading.local()


class recording:
    """``with recording() as ran:`` collects, in the list ``ran``, the :class:`Ran` of every
    call run inside that a replay could repeat (``_fast`` opens one around an op's first call)."""

    __slots__ = ("ran", "previous")

    def __enter__(self) -> list:
        self.previous = getattr(recording_slot, "ran", None)
        self.ran = recording_slot.ran = []
        return self.ran

    def __exit__(self, *exc) -> None:
        recording_slot.ran = self.previous


def _report(ran: Ran) -> None:
    log = getattr(recording_slot, "ran", None)
    if log is not None:
        log.append(ran)


def path_of(call) -> str:
    """``"triton"`` or ``"cpu"``: where the backend setting sends a call on ``call.device``."""
    return _backend.path_for(call.device.type, call.anchor_name)


def passed_outputs(out, n: int) -> Optional[tuple]:
    """``out=`` of an op with ``n`` outputs as a tuple of what was passed (``None`` when it is
    neither one output nor a tuple or list of ``n``)."""
    if isinstance(out, (tuple, list)):
        return tuple(out) if len(out) == n else None
    return (out,) if n == 1 else None


def run(args, op: OpSpec, tensors: tuple, scalars: tuple, exact: bool, outs: Optional[tuple], out) -> tuple:
    """``op``'s outputs for the checked call ``args``: into ``outs`` (the checked ``out=``, whose
    passed form ``out`` is returned) when given, else fresh."""
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    if 0 in args.shape:
        outs = outs or args.new_outputs(op.n_out)
        if needs_grad and out is None:
            # empty outputs, but part of the graph, so backward() works (with empty gradients)
            link = sum(t.sum() * 0 for t in tensors if t is not None and t.requires_grad)
            outs = tuple(o + link.to(o.dtype) for o in outs)
        return args.finish(outs) if out is None else passed_outputs(out, op.n_out)
    compiling = torch.compiler.is_compiling()
    if needs_grad:
        if outs is not None:
            raise ValueError("out= cannot be used when an input requires grad (autograd needs fresh outputs)")
        if op.backward is not None and not compiling:
            # the forward is the no-grad runner's; so is its result
            fused = Fused(exact)
            results = with_fused_backward(args, op, tensors, scalars, fused)
            _report(Ran("grad", args, op, tensors, scalars, exact, results, fused=fused))
            return results
        return args.finish(op.differentiable(args, *tensors, *scalars))
    if compiling:
        if op.compiled is not None:
            results = op.compiled(args, tensors, scalars, exact)
        else:
            results = tuple(_library.fused(op)(list(tensors), list(scalars), args.time_dim, exact, args.out_dtype))
        if outs is None:
            return results
        for o, r in zip(outs, results):
            o.copy_(r)
        return outs
    if outs is not None:
        compute(args, op, tensors, scalars, outs, exact)
        return passed_outputs(out, op.n_out)  # what was passed, as torch's out= returns it
    outs = args.new_outputs(op.n_out)
    runner = compute(args, op, tensors, scalars, outs, exact)
    _report(Ran("fresh", args, op, tensors, scalars, exact, outs, runner))
    return args.finish(outs)


def run_masked(call, masked: Masked, tensors: tuple, scalars: tuple, exact: bool, out, whiten: bool) -> tuple:
    """``masked.op``'s outputs for the :class:`rlscan._call.Call` ``call``, from the mask: a plan
    variant where one applies, else the two scans (into ``out`` when given); with ``whiten``,
    the first output standardised over the kept steps. The tensors are in ``masked.op.inputs``
    order, ``None`` at ``masked.feeds``. The mask's 0/1 values are checked here, or by the CPU
    variant as it reads them.

    Nothing is reported to a :func:`recording`: the variants and the two scans are not one
    runner on the call's arguments, so these calls are not replayed."""
    mask = tensors[masked.mask_of]
    # the mask is never differentiated (a 0/1 selection), whatever its requires_grad says
    needs_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for k, t in enumerate(tensors) if k != masked.mask_of)
    one_pass = out is None and not needs_grad and not torch.compiler.is_compiling() and 0 not in call.shape
    path = path_of(call) if one_pass else None
    if path == "cpu" and masked.cpu is not None:
        result = masked.cpu(call, tensors, scalars, whiten)
        if result is not None:
            return call.finish(result)
    masked.check(call, mask)
    if path == "triton" and not exact and masked.triton is not None:
        result = masked.triton(call, tensors, scalars, whiten)
        if result is not None:
            return call.finish(result)
    return _two_scans(call, masked, tensors, scalars, exact, out, whiten)


def _two_scans(call, masked: Masked, tensors, scalars, exact, out, whiten) -> tuple:
    """``masked.first`` (the next kept values ``W``), then ``masked.op`` on ``W``, each a call of
    :func:`run`; ``W`` in the promoted dtype of its own inputs (a selection: no rounding)."""
    first = masked.first
    first_in = tuple(tensors[k] for k in masked.first_of)
    dtypes = tuple(t.dtype for t, kind in zip(first_in, first.kinds) if t is not None and kind in ("series", "batch"))
    sub = call.args()._replace(anchor_name=first.inputs[0][0], anchor=first_in[0], dtypes=dtypes, out_dtype=None,
                               numpy_io=False, checked_values=False)
    with torch.no_grad():
        w = run(sub, first, first_in, (), exact, None, None)[0]
    k = masked.feeds_of
    result = call.run(masked.op, tensors[:k] + (w,) + tensors[k + 1 :], scalars, exact=exact, out=out)
    if not whiten:
        return result
    x = masked.whiten(result[0], tensors[masked.mask_of])
    if out is not None:
        result[0][...] = x  # the given output, a tensor or an array (numpy in, numpy out)
        x = result[0]
    return (x,) + tuple(result[1:])


def compute(args, op: OpSpec, tensors: tuple, scalars: tuple, outs: tuple, exact: bool, path=None):
    """Fill the preallocated ``outs`` (on ``path``, else where the backend sends the call).

    Returns the runner it used, ``runner(tensors, outs, scalars)``, which any call with the
    same signature (shapes, strides, dtypes, alignment, options) may reuse; ``None`` when the
    call was split into several."""
    path = path or path_of(args)
    found = runner(args, op, tensors, outs, exact, path)
    if found is None:
        _split(args, op, tensors, scalars, outs, exact, path)
    else:
        found(tensors, outs, scalars)
    return found


def signature(args, op: OpSpec, tensors: tuple, outs: tuple, exact: bool, path: str) -> tuple:
    """The cache key of the runner of ``op`` on tensors laid out as these."""
    key = ("runner", path, id(op), exact, args.time_dim, args.device, tuple(map(tensor_signature, tensors)),
           tuple(map(tensor_signature, outs)))
    return key + _launch.settings_key() if path == "triton" else key


def runner(args, op: OpSpec, tensors: tuple, outs: tuple, exact: bool, path: str):
    """What runs ``op`` on tensors laid out as these: a Triton launch plan or the CPU loop
    on a fixed layout, from the signature cache or made now; ``None`` when the batch
    dimensions need splitting."""
    key = signature(args, op, tensors, outs, exact, path)
    found = _cache.CACHE.get(key)
    if found is not None:
        return found
    kinds = op.kinds
    full = [grid_view(t, k) for t, k in zip(tensors, kinds) if t is not None and k != "batch"]
    full += [o for o in outs if o is not None]
    batch = [t for t, k in zip(tensors, kinds) if t is not None and k == "batch"]
    layout = plan_layout(args.shape, args.time_dim, full, batch)
    if layout is None:
        return None
    if path == "triton":
        made = _plan(args, op, layout, tensors, outs, exact)
    else:
        from ._cpu import cpu_runner  # here, not at the top: numba loads with the first CPU call

        made = cpu_runner(op, layout, args.compute_dtype)
    return _cache.CACHE.keep(key, made)


def _plan(args, op: OpSpec, layout, tensors, outs, exact):
    """The launch plan of ``op``'s kernel, or its variant: an op whose kernel names a plan of
    its own (a fourth entry, Retrace-from-Q's table prologue) gets that plan outside
    ``exact``, with the engine's plan as its fallback where it fails to compile."""
    kernel = op.kernel()
    strides = tuple((0, 0, 0) if t is None else kernel_strides(layout, t, k) for t, k in zip(tensors, op.kinds))
    lead = tensors[op.time_contiguous_of]
    time_contiguous = lead.stride(args.time_dim) == 1 and args.shape[args.time_dim] > 1
    init = None if op.init_of is None else tensors[op.init_of]
    out_strides = tuple(layout.strides(next(o for o in outs if o is not None)))
    init_strides = tuple(layout.batch_strides(init))

    def engine_plan():
        return _launch.new_plan(
            kernel[:3], layout, tuple(tensors), strides, tuple(outs), out_strides,
            compute_dtype=args.compute_dtype, time_contiguous=time_contiguous, exact=exact, init_of=op.init_of,
            init_strides=init_strides,
            cpu_fallback=None if op.differentiable is triton_only else _on_cpu(args, op, exact))

    if len(kernel) == 4 and not exact:
        return kernel[3](layout, tuple(tensors), strides, tuple(outs), out_strides, compute_dtype=args.compute_dtype,
                         time_contiguous=time_contiguous, device=args.device,
                         wide=_launch.reaches_far(tuple(tensors) + tuple(outs)), init_strides=init_strides,
                         fallback=engine_plan)
    return engine_plan()


def _split(args, op, tensors, scalars, outs, exact, path) -> None:
    """More than two strided batch groups: run each slice of the first batch dimension."""
    shape, time_dim = args.shape, args.time_dim
    d = next(d for d in range(len(shape)) if d != time_dim and shape[d] != 1)
    db = d if d < time_dim else d - 1
    for i in range(shape[d]):
        sub = args._replace(shape=shape[:d] + shape[d + 1 :], time_dim=time_dim - (d < time_dim),
                            batch_shape=args.batch_shape[:db] + args.batch_shape[db + 1 :],
                            anchor=args.anchor.select(d, i))
        picked = tuple(None if t is None else t.select(db if b else d, i) for t, b in zip(tensors, op.batch_mask))
        compute(sub, op, picked, scalars, tuple(None if o is None else o.select(d, i) for o in outs), exact, path)


def _cpu_copy(x: torch.Tensor) -> torch.Tensor:
    """``x`` on the CPU with the same shape and strides (broadcast axes stay broadcast)."""
    span = sum((n - 1) * s for n, s in zip(x.shape, x.stride()) if n > 1) + 1
    flat = x.as_strided((span,), (1,)).cpu()
    return flat.as_strided(x.shape, x.stride())


def _on_cpu(args, op: OpSpec, exact: bool):
    """What runs ``op`` where no Triton kernel compiles: the CPU path on copies of the inputs,
    the results copied back (a launch plan's last resort). A fused backward has none (no torch
    form of its own): its caller differentiates the forward op's torch form on the call's
    device instead, cheaper than copying every saved tensor to the host and back."""
    template = args._replace(anchor=None, device=torch.device("cpu"))

    def run_on_cpu(ins, outs, scalars):
        cpu_outs = tuple(None if o is None else torch.empty(o.shape, dtype=o.dtype) for o in outs)
        sub = template._replace(anchor=next(o for o in cpu_outs if o is not None))
        compute(sub, op, tuple(None if t is None else _cpu_copy(t) for t in ins), scalars, cpu_outs, exact, path="cpu")
        for o, c in zip(outs, cpu_outs):
            if o is not None:
                o.copy_(c)

    return run_on_cpu
