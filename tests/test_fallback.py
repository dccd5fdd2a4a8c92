"""A launch setting that does not compile never reaches the user (issue #17): the plan warns
once, naming the setting and the Triton version, runs the next setting (down to the
sequential kernel, then the CPU path), and the result is the reference's.

The interpreter compiles nothing, so each test makes Triton's compile-and-launch step
(``launch._compile_and_launch``, where a real compile fails) raise for the settings it picks."""
import warnings

import pytest
import torch
import triton

import rlscan
from rlscan import _cache
from rlscan._triton import stripe_scan, tile_scan
from rlscan._triton import launch as L
from rlscan_testing import assert_matches_reference, make_problem, path_for


@pytest.fixture
def failing(monkeypatch):
    """``failing(pred)``: from now on, compiling a kernel ``pred(fn, kwargs)`` selects raises
    as Triton 3.6 did (a PassManager failure); returns the kernels that were tried."""
    monkeypatch.setattr(L, "_WARNED", set())
    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    tried = []
    real = L._compile_and_launch

    def install(pred):
        def compile_and_launch(fn, grid, args, kwargs):
            tried.append((fn, kwargs.get("PHASE")))
            if pred(fn, kwargs):
                raise RuntimeError("PassManager::run failed")
            return real(fn, grid, args, kwargs)

        monkeypatch.setattr(L, "_compile_and_launch", compile_and_launch)
        return tried

    return install


def _fallback_warnings(record):
    return [w for w in record if issubclass(w.category, L.CompileFallbackWarning)]


def test_a_setting_that_does_not_compile_falls_back_with_one_warning(failing):
    tried = failing(lambda fn, kw: fn is tile_scan.scan_kernel and kw["PHASE"] == 2)
    p = make_problem("gae", (40, 3), seed=3, device=path_for("triton").device)
    with rlscan.use_backend("triton"), L.forced_config(kind="scan", block_t=4, block_b=2, n_chunks=3):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert_matches_reference(p)
            assert_matches_reference(p)  # the plan (and a new one) keep the setting that compiled
            _cache.clear()
            assert_matches_reference(p)
    found = _fallback_warnings(record)
    assert len(found) == 1, [str(w.message) for w in found]
    message = str(found[0].message)
    assert "kind='scan'" in message and f"Triton {triton.__version__}" in message and "kind='stripe'" in message
    assert (stripe_scan.stripe_kernel, 0) in tried


def test_when_no_kernel_compiles_the_cpu_path_answers(failing):
    failing(lambda fn, kw: True)
    p = make_problem("vtrace", (9, 2), seed=5, device=path_for("triton").device, values="next",
                     truncated="random")
    with rlscan.use_backend("triton"):
        with pytest.warns(L.CompileFallbackWarning) as record:
            assert_matches_reference(p)
    # the heuristic's setting, then the sequential kernel: one warning each
    assert len(_fallback_warnings(record)) == 2


def test_backward_when_no_kernel_compiles(failing, monkeypatch):
    """The fused backward falls back to differentiating the op's torch form on the call's
    device (not to the CPU loop on copies of the saved tensors)."""
    import rlscan._autograd as autograd

    through = []
    real = autograd._through_torch_form
    monkeypatch.setattr(autograd, "_through_torch_form", lambda *a: through.append(1) or real(*a))
    device = path_for("triton").device
    g = torch.Generator().manual_seed(1)
    r, v = (torch.randn(8, 3, generator=g, dtype=torch.float64).to(device) for _ in range(2))
    boot = torch.randn(3, generator=g, dtype=torch.float64).to(device)
    term = (torch.rand(8, 3, generator=g) < 0.3).to(device)

    def grads(on=device):
        leaves = [x.to(on).requires_grad_() for x in (r, v, boot)]
        adv, ret = rlscan.gae(leaves[0], leaves[1], bootstrap_value=leaves[2], terminated=term.to(on), gamma=0.9,
                              lmbda=0.8)
        return [x.to(device) for x in torch.autograd.grad((adv * 1.5 + ret).sum(), leaves)]

    with rlscan.use_backend("cpu"):
        expected = grads("cpu")
    failing(lambda fn, kw: True)
    with rlscan.use_backend("triton"), warnings.catch_warnings():
        warnings.simplefilter("ignore", L.CompileFallbackWarning)
        got = grads()
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert through == [1]


def test_a_triton_older_than_3_6_is_refused_naming_the_versions(monkeypatch):
    """Triton 3.5 (torch 2.9's) fails to compile rlscan's kernels: the Triton path refuses it
    before any launch, naming both versions, and the CPU path still runs."""
    from rlscan import _backend

    monkeypatch.setattr(_backend, "_triton_version", [((3, 5), "3.5.1")])
    monkeypatch.setattr(_cache, "CACHE", _cache.SignatureCache())
    x = torch.randn(3, 8, device=path_for("triton").device)
    with rlscan.use_backend("triton"), pytest.raises(RuntimeError, match=r"need Triton >= 3\.6 \(torch >= 2\.10\); "
                                                                        r"Triton 3\.5\.1 is installed"):
        rlscan.gae(x, x, bootstrap_value=x[:, 0], time_dim=1)
    x = x.cpu()
    with rlscan.use_backend("cpu"):
        assert rlscan.gae(x, x, bootstrap_value=x[:, 0], time_dim=1).advantages.shape == (3, 8)
