"""``rlscan.linear_scan``: the first-order linear recurrence every op is built on."""
from __future__ import annotations

import functools
import numbers

from ..._fast import fast_path
from ..._call import Call, OpSpec


def _kernel(reverse: bool):
    from . import kernel

    return kernel.coeffs, kernel.emit, reverse


def _adjoint_kernel(reverse: bool):
    from . import kernel

    coeffs = kernel.adjoint_of_reverse_coeffs if reverse else kernel.adjoint_of_forward_coeffs
    return coeffs, kernel.adjoint_emit, not reverse


def _cpu(reverse: bool, adjoint: bool):
    def run(*args):
        from . import cpu

        (cpu.run_adjoint if adjoint else cpu.run_scan)(*args, reverse=reverse)

    return run


def _differentiable(call, alpha, beta, initial, beta_value, *, reverse):
    """Through ``rlscan::linear_scan``, whose registered backward is the adjoint scan."""
    from ..._library import linear_scan_op

    return (linear_scan_op(alpha, beta, initial, beta_value, reverse, call.time_dim, call.out_dtype),)


def _compiled(call, tensors, scalars, exact, *, reverse):
    return _differentiable(call, *tensors, *scalars, reverse=reverse)


def _spec(name, reverse, adjoint=False):
    inputs = (("g", "series"), ("beta", "series"), ("A", "series"), ("initial", "batch")) if adjoint else (
        ("alpha", "series"), ("beta", "series"), ("initial", "batch"))
    return OpSpec(
        name=name,
        inputs=inputs,
        n_out=2 if adjoint else 1,
        kernel=functools.partial(_adjoint_kernel if adjoint else _kernel, reverse),
        cpu=_cpu(reverse, adjoint),
        differentiable=functools.partial(_differentiable, reverse=reverse),
        init_of=None if adjoint else 2,
        compiled=functools.partial(_compiled, reverse=reverse),
    )


FORWARD = _spec("linear_scan", reverse=False)
REVERSE = _spec("linear_scan_reverse", reverse=True)
ADJOINT_FORWARD = _spec("linear_scan_adjoint", reverse=False, adjoint=True)
ADJOINT_REVERSE = _spec("linear_scan_reverse_adjoint", reverse=True, adjoint=True)


@fast_path
def linear_scan(alpha, beta, *, reverse=False, initial=None, time_dim=0, exact=False, out_dtype=None, out=None):
    """Solve a first-order linear recurrence along ``time_dim``::

        forward:  A_t = α_t + β_t · A_{t-1},   A_{-1} = initial
        reverse:  A_t = α_t + β_t · A_{t+1},   A_T    = initial

    Args:
        alpha: the additive term ``α``, a floating tensor or array.
        beta: the multiplier ``β``: a tensor of ``alpha``'s shape, or one float.
        reverse: scan from the last step to the first.
        initial: the state before the first step in scan order, one value per
            environment (``alpha``'s shape without ``time_dim``); 0 when ``None``.
        time_dim: the time axis of ``alpha``.
        exact: evaluate one step at a time in loop order (bit-reproducible).
        out_dtype: the result dtype (default: the inputs' promoted dtype).

    Returns:
        ``A``, of ``alpha``'s shape.
    """
    call = Call("alpha", alpha, time_dim, out_dtype)
    if isinstance(beta, numbers.Real) and not isinstance(beta, bool):
        beta_value, beta = float(beta), None
    else:
        beta_value, beta = 0.0, call.series("beta", beta)
    initial = call.batch("initial", initial)
    if not isinstance(reverse, bool):
        raise TypeError(f"reverse must be a bool, got {type(reverse).__name__}")
    spec = REVERSE if reverse else FORWARD
    return call.run(spec, (call.anchor, beta, initial), (beta_value,), exact=exact, out=out)[0]
