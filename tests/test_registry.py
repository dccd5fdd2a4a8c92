"""Adding an op is its folder and one registry line (``rlscan.ops.REGISTRY``).

``tests/toy_scan`` is such a folder: a test-only op, ``S_t = x_t + γ (1 − dones_{t−1}) S_{t−1}``,
with its OpSpec, Triton coefficients, CPU loop and reference. Registered for the length of a
test, it runs every path through what the registry declares: the Triton kernel (under the
interpreter without a GPU), the CPU loop, ``exact=True``, the fused backward, ``torch.compile``
and the benchmark's case."""
import pytest
import torch

import rlscan
from rlscan.bench import alternatives, cases
from rlscan.ops import REGISTRY
from rlscan_testing import (
    assert_close, assert_matches_reference, call_inputs, call_of, make_problem, op_info, path_for,
)


@pytest.fixture
def toy():
    from toy_scan.op import PUBLIC

    with REGISTRY.adding(PUBLIC):
        yield PUBLIC
    assert "moving_sum" not in REGISTRY


def test_the_registry_is_the_package():
    """The package exports every registered op (and its output type), and so does the reference."""
    assert rlscan.__all__[:len(REGISTRY)] == list(REGISTRY.names())
    for op in REGISTRY:
        assert getattr(rlscan, op.name) is op.fn
        assert getattr(rlscan.reference, op.name).__wrapped__ is op.ref
        assert all(getattr(rlscan, x.__name__) is x for x in op.exports)
    assert set(cases.CASES) == {op.name for op in REGISTRY if op.bench is not None}


@pytest.mark.parametrize("backend", ["triton", "cpu"])
def test_a_registered_op_runs_every_path(toy, backend):
    """Forward, exact and backward on one path; the spec's kernel and loop resolve only where they run."""
    spec = toy.specs[0]
    path = path_for(backend)
    with rlscan.use_backend(backend):
        problem = make_problem("moving_sum", (9, 3), time_dim=1, device=path.device, seed=3)
        assert_matches_reference(problem)
        assert_matches_reference(problem, exact=True)
        assert_matches_reference(make_problem("moving_sum", (4, 5), layout="transposed", device=path.device))
        ran = {"triton": "_resolved" in spec.kernel.__dict__, "cpu": spec.cpu._value is not None}
        assert ran[backend]

        # the fused backward (eligibility traces' kernel with λ = 1) against numerical differences ...
        d = make_problem("moving_sum", (6, 2), dtype=torch.float64, device=path.device, seed=4).arguments()
        x, init = d["x"].requires_grad_(), d["initial"].requires_grad_()
        assert torch.autograd.gradcheck(lambda x, init: toy.fn(x, dones=d["dones"], gamma=0.9, initial=init),
                                        (x, init))
        # ... and against the torch form (the op's differentiable form, torch operations around the scan)
        w = torch.randn_like(x)
        fused = torch.autograd.grad((toy.fn(x, dones=d["dones"], gamma=0.9, initial=init) * w).sum(), (x, init))
        with torch.no_grad():
            call = rlscan._call.trusted_call(spec, (x, d["dones"], init), 0, None)
        form = spec.differentiable(call, x, d["dones"], init, 0.9)[0]
        for got, want in zip(fused, torch.autograd.grad((form * w).sum(), (x, init))):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_a_registered_op_compiles(toy, path):
    """Its custom op (``rlscan::toy_moving_sum``) inside ``torch.compile(fullgraph=True)``, forward and
    backward, built from its registered arguments as tests/test_compile.py builds every op's."""
    torch._dynamo.reset()
    d = call_inputs(7, 3, path.device)
    op = call_of(op_info("moving_sum"))
    weights = torch.randn(7, 3, dtype=torch.float64, device=path.device)

    def loss(r):
        return (op(d, r) * weights).sum()

    r1, r2 = (d["series"][0].clone().requires_grad_() for _ in range(2))
    got = torch.compile(loss, fullgraph=True, backend="aot_eager")(r1)
    want = loss(r2)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(r1.grad, r2.grad, rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()


def test_a_registered_op_is_benchmarked(toy):
    """The benchmark's case of the registered op: its inputs, and rlscan's runner against the reference."""
    case = cases.case_of(toy)
    d = cases.make_inputs(case, 16, 4, torch.float32, "nt", torch.device("cpu"))
    assert set(d) == {"x", "dones", "initial"} and d["x"].stride(0) == 1
    got = alternatives.RLSCAN.build(case, torch.float32).run(d)
    want = cases.outputs_of(case.call(rlscan.reference, d))
    assert len(got) == len(want) == 1
    assert_close(got[0], want[0], torch.float32, "moving_sum")
