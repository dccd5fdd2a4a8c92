"""The fused backward scans (every op; the linear scan's is its adjoint scan): the Triton
kernels on every kernel path and layout, every source of the value after a step, per-step
and scalar γ/λ, the clips, gradients of some outputs only, and ``retrace_from_q``'s table;
and the CPU path's backward loops. The expected gradients differentiate the ops' torch
forms on the CPU (``differentiating_torch_forms``; gradchecked in float64 in
test_gradients.py, as the CPU loops are)."""
import contextlib

import pytest
import torch

import rlscan
from rlscan._autograd import differentiating_torch_forms
from rlscan._triton.launch import forced_config
from rlscan_testing import KERNEL_CONFIGS, assert_close, dealt, dealt_over_kinds, make_problem, path_for

FUSED_BACKWARD_OPS = ("gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "eligibility_traces",
                      "episodic_cumsum")
FLAG_NAMES = ("terminated", "truncated")


def _leaves(problem) -> dict:
    return {k: v.detach().clone().requires_grad_() for k, v in problem.arguments().items()
            if isinstance(v, torch.Tensor) and v.is_floating_point() and k not in FLAG_NAMES}


def _gradients(problem, backend, output_grads=None):
    """The outputs and every floating input's gradient for ``Σ_k <output_k, output_grads_k>``."""
    with rlscan.use_backend(backend):
        leaves = _leaves(problem)
        outs = problem.replace(**leaves).run()
        if output_grads is None:
            gen = torch.Generator().manual_seed(5)
            output_grads = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
        # on the outputs' device, as autograd takes them (the draws are the CPU generator's)
        output_grads = [None if g is None else g.to(o.device) for o, g in zip(outs, output_grads)]
        pairs = [(o, g) for o, g in zip(outs, output_grads) if g is not None]
        grads = torch.autograd.grad([o for o, _ in pairs], list(leaves.values()), [g for _, g in pairs],
                                    allow_unused=True, materialize_grads=True)
    return outs, dict(zip(leaves, grads)), output_grads


def _assert_same_gradients(problem, output_grads=None):
    device = path_for("triton").device
    problem = problem.replace(**{k: v.to(device) for k, v in problem.arguments().items() if isinstance(v, torch.Tensor)})
    outs, fused, output_grads = _gradients(problem, "triton", output_grads)
    assert outs[0].grad_fn.name() == "_FusedFunctionBackward"
    cpu_problem = problem.replace(**{k: v.cpu() for k, v in problem.arguments().items() if isinstance(v, torch.Tensor)})
    cpu_grads = [None if g is None else g.cpu() for g in output_grads]
    with differentiating_torch_forms():
        _, expected, _ = _gradients(cpu_problem, "cpu", cpu_grads)
    for name, grad in fused.items():
        assert grad.dtype == problem.arguments()[name].dtype, name
        assert_close(grad.cpu(), expected[name], grad.dtype, name)


def _problem(op, values="bootstrap", shape=(11, 3), dtype=torch.float64, coefs="tensor", seed=0, **kw):
    truncated = "random" if values == "next" else None
    return make_problem(op, shape, dtype=dtype, values=values, truncated=truncated, gamma=coefs, lmbda=coefs,
                        seed=seed, **kw)


def test_each_op_meets_each_kernel_kind():
    pairs = dealt_over_kinds(FUSED_BACKWARD_OPS)
    for kind in {c["kind"] for c in KERNEL_CONFIGS.values()}:
        assert {op for name, op in pairs if KERNEL_CONFIGS[name]["kind"] == kind} == set(FUSED_BACKWARD_OPS), kind
    assert {name for name, _ in pairs} == set(KERNEL_CONFIGS)


@pytest.mark.parametrize("config, op", dealt_over_kinds(FUSED_BACKWARD_OPS))
def test_kernel_paths(config, op):
    """Every kernel path: tiles, single rows, stripes, and chunks (the adjoint's carry
    crosses chunk edges going forward in time)."""
    for values in ("bootstrap", "next"):
        with forced_config(**KERNEL_CONFIGS[config]):
            _assert_same_gradients(_problem(op, values, seed=len(config)))


_LAYOUTS = {"time-last": dict(shape=(3, 11), time_dim=1), "two-groups": dict(shape=(2, 11, 3), time_dim=1),
            "transposed": dict(shape=(11, 4), time_dim=0, layout="transposed"),
            "split-call": dict(shape=(2, 3, 5, 2), time_dim=2, layout="sliced")}


@pytest.mark.parametrize("layout, op", dealt(FUSED_BACKWARD_OPS, list(_LAYOUTS)))
def test_layouts(op, layout):
    layout = _LAYOUTS[layout]
    _assert_same_gradients(_problem(op, seed=2, **layout))


@pytest.mark.parametrize("coefs, op", dealt(FUSED_BACKWARD_OPS, [0.9, "per_step", "scalar_tensor"]))
def test_coefficients(op, coefs):
    """Scalar γ/λ (no coefficient gradients), one γ/λ per step broadcast over environments
    (their gradients summed over environments), and a 0-d tensor."""
    _assert_same_gradients(_problem(op, coefs=coefs, seed=4))


@pytest.mark.parametrize("op", ["gae", "td_lambda"])
def test_without_episode_flags_and_with_every_flag(op):
    _assert_same_gradients(_problem(op, terminated=None, seed=6))
    _assert_same_gradients(_problem(op, values="next", terminated="all", seed=7))


def test_discounted_returns_without_bootstrap():
    _assert_same_gradients(_problem("discounted_returns", values="none", seed=8))


@pytest.mark.parametrize("which", [0, 1])
def test_gae_gradient_of_one_output(which):
    """Only the advantages, or only the returns, carry a gradient (on the Triton path's device:
    the backward reads the missing output's gradient as zeros, and builds nothing for it)."""
    problem = _problem("gae", seed=9)
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(problem.args[0].shape, generator=gen, dtype=torch.float64) for _ in range(2)]
    grads[1 - which] = None
    _assert_same_gradients(problem, grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_inputs(dtype):
    """Gradients come back in each input's dtype; they are computed in float32."""
    _assert_same_gradients(_problem("gae", dtype=dtype, seed=10))


def test_sum_backward_reads_a_broadcast_gradient():
    """``loss = adv.sum()`` hands the backward a gradient with stride 0 everywhere."""
    device = path_for("triton").device
    problem = _problem("td_lambda", seed=11)
    problem = problem.replace(**{k: v.to(device) for k, v in problem.arguments().items() if isinstance(v, torch.Tensor)})
    with rlscan.use_backend("triton"):
        r = problem.args[0].clone().requires_grad_()
        problem.replace(rewards=r).run()[0].sum().backward()
    with rlscan.use_backend("cpu"):
        r_cpu = problem.args[0].cpu().clone().requires_grad_()
        cpu = problem.replace(**{k: v.cpu() for k, v in problem.arguments().items() if isinstance(v, torch.Tensor)})
        cpu.replace(rewards=r_cpu).run()[0].sum().backward()
    assert_close(r.grad.cpu(), r_cpu.grad, torch.float64)


@pytest.mark.parametrize("op", FUSED_BACKWARD_OPS)
def test_cpu_path_records_the_loop(op, monkeypatch):
    """On the CPU path a call that records for backward runs the CPU loop, so its outputs are
    the no-grad call's bit for bit, and its backward runs the op's backward loop, never the
    torch form."""
    import rlscan._autograd as autograd

    problem = _problem(op, "next", seed=12)
    monkeypatch.setattr(autograd, "_through_torch_form", _no_torch_form)
    with rlscan.use_backend("cpu"):
        outs, grads, output_grads = _gradients(problem, "cpu")
        with torch.no_grad():
            plain = problem.run()
    assert outs[0].grad_fn.name() == "_FusedFunctionBackward"
    assert all(torch.equal(a.detach(), b) for a, b in zip(outs, plain))
    monkeypatch.undo()
    with rlscan.use_backend("cpu"), differentiating_torch_forms():
        _, expected, _ = _gradients(problem, "cpu", output_grads)
    for name, grad in grads.items():
        assert_close(grad, expected[name], grad.dtype, name)


def _no_torch_form(*args):
    raise AssertionError("the backward differentiated the torch form")


def _assert_cpu_loop_gradients(problem, output_grads=None):
    """The CPU path's backward loop gives the torch form's gradients, in each input's dtype."""
    with rlscan.use_backend("cpu"):
        outs, got, output_grads = _gradients(problem, "cpu", output_grads)
        with differentiating_torch_forms():
            _, expected, _ = _gradients(problem, "cpu", output_grads)
    assert outs[0].grad_fn.name() == "_FusedFunctionBackward"
    for name, grad in got.items():
        assert grad.dtype == problem.arguments()[name].dtype, name
        assert_close(grad, expected[name], grad.dtype, name)


@pytest.mark.parametrize("op, values", [(op, values) for op in FUSED_BACKWARD_OPS for values in ("bootstrap", "next")]
                         + [("discounted_returns", "none")])
@pytest.mark.parametrize("coefs", ["tensor", "per_step", 0.9])
def test_cpu_loops(op, values, coefs):
    """Every source of the value after a step (none: discounted returns alone), per-step and
    scalar γ/λ."""
    _assert_cpu_loop_gradients(_problem(op, values, shape=(13, 5), coefs=coefs, seed=21))


@pytest.mark.parametrize("op", FUSED_BACKWARD_OPS)
@pytest.mark.parametrize("layout", [dict(shape=(4, 9), time_dim=-1, layout="transposed"),
                                    dict(shape=(2, 7, 3), time_dim=1), dict(shape=(2, 7, 3, 2), time_dim=1,
                                                                            layout="sliced")],
                         ids=["time-last", "two-groups", "split-call"])
def test_cpu_loop_layouts(op, layout):
    _assert_cpu_loop_gradients(make_problem(op, dtype=torch.float64, gamma="tensor", lmbda="tensor", seed=22,
                                            **layout))


@pytest.mark.parametrize("which", [0, 1])
def test_cpu_loop_gae_gradient_of_one_output(which):
    problem = _problem("gae", shape=(9, 4), seed=23)
    gen = torch.Generator().manual_seed(2)
    grads = [torch.randn(problem.args[0].shape, generator=gen, dtype=torch.float64) for _ in range(2)]
    grads[1 - which] = None
    _assert_cpu_loop_gradients(problem, grads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_loop_low_precision(dtype):
    _assert_cpu_loop_gradients(_problem("td_lambda", shape=(9, 4), dtype=dtype, seed=24))


def test_cpu_loop_parallel_version(monkeypatch):
    """Large calls run the loops' parallel version (``prange`` over blocks of environments)."""
    import rlscan._cpu as cpu

    monkeypatch.setattr(cpu, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(cpu, "_MIN_BLOCK", 1)
    monkeypatch.setattr(cpu._Versions, "parallel", lambda self: True)
    _assert_cpu_loop_gradients(_problem("gae", shape=(6, 8), seed=25))


@pytest.mark.parametrize("op, clips", [("vtrace", (1.3, 0.7, 2.0)), ("vtrace", (float("inf"),) * 3),
                                       ("retrace", (0.6,)), ("retrace", (float("inf"),))])
def test_clips(op, clips):
    """Each clip's subgradient (``torch.clamp``'s: it passes where ``ρ ≤ clip``), and no clip."""
    _assert_same_gradients(_problem(op, seed=13, clips=clips))
    _assert_same_gradients(_problem(op, "next", seed=14, clips=clips))


@pytest.mark.parametrize("op, clips", [("vtrace", (1.3, 0.7, 2.0)), ("vtrace", (float("inf"),) * 3),
                                       ("retrace", (0.6,)), ("retrace", (float("inf"),))])
def test_cpu_loop_clips(op, clips):
    _assert_cpu_loop_gradients(_problem(op, seed=15, clips=clips))
    _assert_cpu_loop_gradients(_problem(op, "next", seed=16, clips=clips))


def _table_problem(shape, time_dim, seed, values):
    """A float64 ``retrace_from_q`` problem: ``(leaves, run)`` where ``run(**leaves)`` calls the op."""
    gen = torch.Generator().manual_seed(seed)
    A = 5
    full = tuple(shape)
    leaves = dict(
        rewards=torch.randn(full, generator=gen, dtype=torch.float64),
        q_values=torch.randn(full + (A,), generator=gen, dtype=torch.float64),
        target_probs=torch.softmax(torch.randn(full + (A,), generator=gen, dtype=torch.float64), -1),
        behaviour_log_probs=torch.log(torch.rand(full, generator=gen, dtype=torch.float64) * 0.8 + 0.1),
        gamma=0.2 + 0.7 * torch.rand(full, generator=gen, dtype=torch.float64),
        lmbda=0.2 + 0.7 * torch.rand(full, generator=gen, dtype=torch.float64),
    )
    batch = full[:time_dim] + full[time_dim + 1:]
    if values == "next":
        leaves["next_expected_q"] = torch.randn(full, generator=gen, dtype=torch.float64)
    else:
        leaves["bootstrap_value"] = torch.randn(batch, generator=gen, dtype=torch.float64)
    fixed = dict(actions=torch.randint(0, A, full, generator=gen), terminated=torch.rand(full, generator=gen) < 0.2,
                 time_dim=time_dim, c_clip=1.1)
    if values == "next":
        fixed["truncated"] = torch.rand(full, generator=gen) < 0.2

    def run(**given):
        where = given["rewards"].device  # the integer actions and the flags go where the leaves are
        args = {**{k: v.to(where) if isinstance(v, torch.Tensor) else v for k, v in fixed.items()}, **given}
        return rlscan.retrace_from_q(args.pop("rewards"), args.pop("q_values"), args.pop("actions"),
                                     args.pop("target_probs"), args.pop("behaviour_log_probs"), **args)

    return leaves, run


# each config with both sources of the value after a step, the two layouts taken in turn
@pytest.mark.parametrize("config, values, layout", [
    (config, values, layout) for i, config in enumerate(["scan-tiles", "stripe", "scan-chunks", "block-chunks",
                                                         "chained-look-back"])
    for j, values in enumerate(["bootstrap", "next"])
    for layout in [[dict(shape=(11, 3), time_dim=0), dict(shape=(3, 11), time_dim=1)][(i + j) % 2]]])
def test_retrace_from_q(config, values, layout):
    """Retrace's fused backward, then the table's gradients by the chain rule, on the Triton
    path and by the CPU loop, against the CPU path's torch form (gradients of Q, π, log μ, r,
    the value after the window, γ, λ)."""
    leaves, run = _table_problem(layout["shape"], layout["time_dim"], seed=len(config) + len(values), values=values)
    device = path_for("triton").device
    results = {}
    for backend, where, form in (("triton", device, False), ("cpu", torch.device("cpu"), False),
                                 ("torch form", torch.device("cpu"), True)):
        with rlscan.use_backend("cpu" if form else backend), _torch_forms_if(form):
            mine = {k: v.to(where).clone().requires_grad_() for k, v in leaves.items()}
            with forced_config(**KERNEL_CONFIGS[config]):
                outs = run(**mine)
            weights = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=o.device).reshape(o.shape) for o in outs]
            results[backend] = dict(zip(mine, torch.autograd.grad(outs, list(mine.values()), weights)))
            if backend == "triton":
                assert outs[0].grad_fn.name() == "_FusedFunctionBackward"
    for name, grad in results["triton"].items():
        assert_close(grad.cpu(), results["torch form"][name], torch.float64, name)
        assert_close(results["cpu"][name], results["torch form"][name], torch.float64, name)


def _torch_forms_if(on: bool):
    return differentiating_torch_forms() if on else contextlib.nullcontext()


_STATE_IN_OPS = ("gae", "td_lambda", "vtrace", "retrace", "eligibility_traces")
_STATE_IN_CONFIGS = [(c, w) for w in ("exclusive", "reload")
                     for c in ("scan-tiles", "scan-one-tile", "scan-chunks", "chained-scan-words")
                     if not (w == "reload" and c == "chained-scan-words")]


# two ops a configuration, dealt in turn: every op meets both ways of carrying the state in
@pytest.mark.parametrize("config, way, op", [(c, w, _STATE_IN_OPS[(2 * i + k) % len(_STATE_IN_OPS)])
                                             for i, (c, w) in enumerate(_STATE_IN_CONFIGS) for k in range(2)])
def test_state_carried_in_without_a_gather(op, config, way, monkeypatch):
    """Tiles that take the state carried into each step from an exclusive scan or read it
    back from the first output (on a GPU, tiles of many steps per warp; here every tile):
    V-trace's forward reads it, and so do the backward kernels of GAE, TD(λ), V-trace,
    Retrace and the eligibility traces, whose first output is written at every step."""
    from rlscan import _cache
    from rlscan._triton import launch, policy

    monkeypatch.setitem(policy.FORCED, "state_in_steps_per_warp", 0)
    monkeypatch.setattr(launch, "FORCE_STATE_IN", way)
    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    problem = _problem(op, dtype=torch.float32, seed=9)
    with forced_config(**dict(KERNEL_CONFIGS[config], num_warps=2)):
        _assert_same_gradients(problem)
    assert any(plan.constexprs.get("STATE_IN") == way for plan in launch.plans())
