"""Gradients: ``torch.autograd.gradcheck`` in float64 for every op with respect to every
differentiable input (rewards, values, next values, bootstrap values, tensor γ and λ,
log-ratios, x, initial, α, β), on both paths, with tiny shapes."""
import pytest
import torch
from torch.autograd import gradcheck

import rlscan
from rlscan_testing import OP_NAMES, OPS, VALUE_OPS, assert_close, make_problem

FLAG_NAMES = ("terminated", "truncated", "dones")


def _problem(op, values, device, shape=(5, 2)):
    """A float64 problem whose tensor γ and λ stay inside (0, 1) under gradcheck's nudges,
    and whose log-ratios keep clear of the clips' kinks."""
    info = OPS[op]
    kw = dict(values=values, truncated="random" if values == "next" else None) if op in VALUE_OPS else {}
    p = make_problem(op, shape, dtype=torch.float64, gamma="tensor", lmbda="tensor", clips=1.2,
                     terminated="alternate", seed=41, **kw)
    for name in info.coefs:
        p.kwargs[name] = 0.2 + 0.7 * torch.rand(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    if "log_rhos" in info.series:
        log_rhos = p.arguments()["log_rhos"]
        assert (log_rhos - torch.log(torch.tensor(1.2, dtype=torch.float64))).abs().min() > 1e-3
    moved = {k: v.to(device) for k, v in p.arguments().items() if isinstance(v, torch.Tensor)}
    return p.replace(**moved)


def _differentiable(problem) -> dict:
    return {k: v for k, v in problem.arguments().items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and k not in FLAG_NAMES}


def _check(problem, fast: bool):
    """gradcheck with respect to every differentiable input, each kept in its memory layout:
    a strided view is rebuilt inside the function from a leaf buffer, so the op sees it."""
    tensors = _differentiable(problem)
    names = list(tensors)
    buffers = tuple(_buffer(tensors[n]).detach().clone().requires_grad_() for n in names)

    def fn(*leaves):
        views = {n: _view_like(leaf, tensors[n]) for n, leaf in zip(names, leaves)}
        return problem.replace(**views).run()

    assert gradcheck(fn, buffers, fast_mode=fast), names


def _buffer(x):
    return x if x._base is None else x._base


def _view_like(leaf, x):
    if x._base is None:
        return leaf
    return leaf.as_strided(x.shape, x.stride(), x.storage_offset() - x._base.storage_offset())


@pytest.mark.parametrize("op, values", [(op, "bootstrap") for op in OP_NAMES] + [(op, "next") for op in VALUE_OPS])
def test_gradcheck(path, op, values):
    # The interpreter is slow: on the Triton path check a random projection of the Jacobian.
    _check(_problem(op, values, path.device), fast=path.backend == "triton")


def test_gradcheck_discounted_returns_without_bootstrap(path):
    p = make_problem("discounted_returns", (5, 2), dtype=torch.float64, values="none", gamma="tensor", seed=3)
    p.kwargs["gamma"] = p.kwargs["gamma"].clamp(0.2, 0.9)
    p = p.replace(**{k: v.to(path.device) for k, v in p.arguments().items() if isinstance(v, torch.Tensor)})
    _check(p, fast=path.backend == "triton")


@pytest.mark.parametrize("reverse", [False, True])
def test_gradcheck_linear_scan_scalar_beta(path, reverse):
    alpha = torch.randn(6, 2, dtype=torch.float64, device=path.device, requires_grad=True)
    initial = torch.randn(2, dtype=torch.float64, device=path.device, requires_grad=True)
    assert gradcheck(lambda a, i: rlscan.linear_scan(a, 0.7, reverse=reverse, initial=i), (alpha, initial),
                     fast_mode=path.backend == "triton")


@pytest.mark.parametrize("op", ["gae", "vtrace", "retrace", "eligibility_traces"])
def test_one_input_needs_grad(path, op):
    """When only one input needs a gradient, it is the same as when all do, and the
    outputs' values are those of the no-grad path."""
    p = _problem(op, "bootstrap", path.device)
    names = list(_differentiable(p))
    every = {n: t.detach().clone().requires_grad_() for n, t in _differentiable(p).items()}
    outs = p.replace(**every).run()
    grads_all = torch.autograd.grad(sum(o.sum() for o in outs), list(every.values()))
    plain = p.run()
    for a, b in zip(outs, plain):
        assert_close(a, b, torch.float64)
    for name, expected in zip(names, grads_all):
        alone = _differentiable(p)[name].detach().clone().requires_grad_()
        outs = p.replace(**{name: alone}).run()
        (grad,) = torch.autograd.grad(sum(o.sum() for o in outs), [alone])
        assert_close(grad, expected, torch.float64, name)


def test_float32_gradients_keep_dtype(path):
    p = make_problem("gae", (6, 2), dtype=torch.float32, device=path.device)
    r = p.args[0].clone().requires_grad_()
    adv, ret = p.replace(rewards=r).run()
    adv.sum().backward()
    assert r.grad.dtype == torch.float32 and adv.dtype == torch.float32
    assert torch.isfinite(r.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_with_grad_computes_in_float32(path, dtype):
    """Needing a gradient must not change the numbers: with and without it, half-precision
    inputs compute in float32 and round once, so the outputs agree to one unit in the last place."""
    p = make_problem("gae", (64, 4), dtype=dtype, device=path.device, seed=8)
    plain = p.run()
    rewards = p.args[0].clone().requires_grad_()
    with_grad = p.replace(rewards=rewards).run()
    for a, b in zip(with_grad, plain):
        a, b = a.detach().float(), b.float()
        assert ((a - b).abs() <= torch.finfo(dtype).eps * b.abs()).all()


@pytest.mark.parametrize("op", ["gae", "vtrace", "eligibility_traces", "linear_scan_reverse"])
@pytest.mark.parametrize("layout", [dict(shape=(2, 4, 2), time_dim=1),
                                    dict(shape=(2, 4), time_dim=-1, layout="transposed"),
                                    dict(shape=(2, 3, 2, 2), time_dim=1, layout="sliced")],
                         ids=["two-groups", "time-last-transposed", "split-call"])
def test_gradcheck_layouts(path, op, layout):
    """The backward scan reads and writes the user's layout too, including calls split
    into several launches."""
    p = make_problem(op, dtype=torch.float64, gamma="tensor", lmbda="tensor", seed=9, device=path.device, **layout)
    for name in OPS[op].coefs:
        p.kwargs[name] = 0.2 + 0.7 * p.kwargs[name]
    if layout.get("layout") == "sliced":
        assert p.args[0]._base is not None and not p.args[0].is_contiguous()
    _check(p, fast=path.backend == "triton" or layout.get("layout") == "sliced")
