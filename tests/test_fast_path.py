"""Repeat calls with the same signature skip the checks (``rlscan._fast``): they must give
the results of the checked path on new data, and every check that reads values, and every
error, must still happen on every call."""
import numpy as np
import pytest
import torch

import rlscan
from rlscan import _cache, _fast
from rlscan_testing import OP_NAMES, assert_matches_reference, make_problem


def _replayed_entries() -> int:
    return sum(1 for e in _cache.CACHE.values() if isinstance(e, (_fast._Entry, _fast._GradEntry)))


@pytest.mark.parametrize("op", OP_NAMES)
def test_repeat_call_on_new_data_matches_reference(path, op):
    """The second call with the same signature is replayed, on the second call's tensors."""
    _cache.clear()
    first = make_problem(op, (9, 3), device=path.device, seed=1)
    assert_matches_reference(first)
    assert _replayed_entries() == 1
    second = make_problem(op, (9, 3), device=path.device, seed=2)
    outs = second.run()
    assert _replayed_entries() == 1  # no new entry: the recorded one ran
    assert_matches_reference(second)
    assert type(outs) is type(first.run())


def test_layout_change_is_a_new_signature(path):
    _cache.clear()
    assert_matches_reference(make_problem("gae", (6, 4), device=path.device, seed=3))
    assert_matches_reference(make_problem("gae", (6, 4), device=path.device, seed=4, layout="transposed"))
    assert_matches_reference(make_problem("gae", (6, 4), device=path.device, seed=5, dtype=torch.float64))
    assert _replayed_entries() == 3


def test_named_outputs_survive_the_replay(path):
    p = make_problem("gae", (5, 2), device=path.device)
    for _ in range(2):
        out = p.run()
    adv, ret = rlscan.gae(*p.args, **p.kwargs)
    assert torch.equal(adv, out[0]) and torch.equal(ret, out[1])
    assert rlscan.gae(*p.args, **p.kwargs).advantages is not None


def test_errors_are_raised_on_every_call(path):
    r = torch.randn(5, 3, device=path.device)
    v = torch.randn(5, 3, device=path.device)
    rlscan.gae(r, v, bootstrap_value=torch.zeros(3, device=path.device))
    for _ in range(2):
        with pytest.raises(ValueError, match="bootstrap_value"):
            rlscan.gae(r, v, bootstrap_value=torch.zeros(4, device=path.device))
        with pytest.raises(ValueError, match="gamma"):
            rlscan.gae(r, v, bootstrap_value=torch.zeros(3, device=path.device), gamma=1.5)


def test_a_tensor_on_another_device_is_not_replayed(path):
    """A meta tensor has no storage: its call is not a CPU call of the same shape (get_device() is
    -1 for both), and gets the device error, not the CPU loop's."""
    r = torch.randn(5, 3, device=path.device)
    boot = torch.zeros(3, device=path.device)
    rlscan.gae(r, r.clone(), bootstrap_value=boot)
    with pytest.raises(ValueError, match="values is on meta"):
        rlscan.gae(r, torch.zeros(5, 3, device="meta"), bootstrap_value=boot)


def test_value_checks_run_on_every_call():
    """On the CPU, tensor γ and action indices are checked by value: never replayed."""
    r, v, boot = torch.randn(5, 3), torch.randn(5, 3), torch.randn(3)
    gamma = torch.full((5, 3), 0.9)
    rlscan.gae(r, v, bootstrap_value=boot, gamma=gamma)
    gamma[2, 1] = 1.5
    with pytest.raises(ValueError, match="gamma"):
        rlscan.gae(r, v, bootstrap_value=boot, gamma=gamma)
    q = torch.randn(5, 3, 4)
    probs = torch.softmax(torch.randn(5, 3, 4), -1)
    actions = torch.randint(0, 4, (5, 3))
    log_mu = torch.full((5, 3), -1.0)
    rlscan.retrace_from_q(r, q, actions, probs, log_mu, bootstrap_value=boot)
    actions[1, 1] = 4
    with pytest.raises(ValueError, match="actions"):
        rlscan.retrace_from_q(r, q, actions, probs, log_mu, bootstrap_value=boot)


def test_out_calls_take_the_checked_path(path):
    _cache.clear()
    p = make_problem("td_lambda", (6, 2), device=path.device, seed=6)
    out = torch.empty_like(p.args[0])
    for _ in range(2):
        assert p.run(out=out)[0] is out
    assert _replayed_entries() == 0


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_numpy_calls_replay_on_the_cpu_loop(layout):
    """numpy in, numpy out: the replay allocates numpy outputs laid out as the checked call's,
    on new arrays, and matches the float64 reference."""
    _cache.clear()
    rng = np.random.default_rng(0)

    def arrays():
        def draw(*shape):
            a = rng.standard_normal(shape).astype(np.float32)
            return {"contiguous": a, "transposed": a.T.copy().T, "sliced": np.repeat(a, 2, axis=1)[:, ::2]}[layout]
        return draw(7, 3), draw(7, 3), rng.standard_normal(3).astype(np.float32), rng.random((7, 3)) < 0.3

    results = []
    for _ in range(3):
        r, v, boot, done = arrays()
        adv, ret = rlscan.gae(r, v, bootstrap_value=boot, terminated=done, gamma=0.9, lmbda=0.8)
        assert isinstance(adv, np.ndarray) and isinstance(ret, np.ndarray) and adv.dtype == np.float32
        ref = rlscan.reference.gae(*(torch.from_numpy(np.ascontiguousarray(x)).double() for x in (r, v)),
                                   bootstrap_value=torch.from_numpy(boot).double(),
                                   terminated=torch.from_numpy(np.ascontiguousarray(done)), gamma=0.9, lmbda=0.8)
        np.testing.assert_allclose(adv, ref.advantages.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret, ref.returns.numpy(), rtol=1e-5, atol=1e-5)
        results.append(adv)
    assert _replayed_entries() == 1
    assert not np.shares_memory(results[1], results[2])  # each replay has fresh outputs


def test_forced_settings_are_part_of_the_signature():
    from rlscan._triton.launch import forced_config
    from rlscan_testing import path_for

    chosen = path_for("triton")
    _cache.clear()
    with rlscan.use_backend("triton"):
        p = make_problem("gae", (7, 3), device=chosen.device, seed=7)
        assert_matches_reference(p)
        with forced_config(kind="stripe", stripes=2, steps=2, block_b=2):
            assert_matches_reference(p)
    assert _replayed_entries() == 2


def test_one_tensor_passed_as_two_arguments(path):
    """``next_values=values``: the replay takes each kernel input from the argument of its name
    (``OpSpec.inputs``), so a later call of the signature with distinct tensors reads its own
    ``next_values``."""
    _cache.clear()
    p = make_problem("gae", (6, 3), device=path.device, values="next", seed=10)
    v = p.args[1]
    assert_matches_reference(p.replace(next_values=v))
    other = make_problem("gae", (6, 3), device=path.device, values="next", seed=11)
    assert_matches_reference(other)  # same signature, distinct tensors: must read next_values
    assert _replayed_entries() == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_replay_keeps_dtype_and_layout(path, dtype, layout):
    """Half-precision outputs (computed in a float32 buffer on the CPU path) and transposed
    inputs, replayed on new data."""
    _cache.clear()
    for seed in (12, 13, 14):
        assert_matches_reference(make_problem("td_lambda", (7, 3), device=path.device, dtype=dtype, layout=layout,
                                              seed=seed))
    assert _replayed_entries() == 1


def test_fused_backward_calls_are_replayed(path):
    """A call that records for backward replays its signature (on the CPU path too, where
    the backward is the CPU loop): the replay's gradients are those of a checked call on the
    same data."""
    _cache.clear()
    grads = []
    for seed in (1, 2, 2):
        p = make_problem("gae", (6, 3), device=path.device, seed=seed)
        r = p.args[0].clone().requires_grad_()
        v = p.args[1].clone().requires_grad_()
        adv, ret = rlscan.gae(r, v, **p.kwargs)
        grads.append(torch.autograd.grad((adv * 2 + ret).sum(), (r, v)))
    assert any(isinstance(e, _fast._GradEntry) for e in _cache.CACHE.values())
    _cache.clear()  # the same data through the checked path

    def checked(device=path.device):
        p = make_problem("gae", (6, 3), device=device, seed=2)
        r = p.args[0].clone().requires_grad_()
        v = p.args[1].clone().requires_grad_()
        adv, ret = rlscan.gae(r, v, **p.kwargs)
        return torch.autograd.grad((adv * 2 + ret).sum(), (r, v))

    for a, b in zip(grads[2], checked()):
        assert torch.equal(a, b)
    with rlscan.use_backend("cpu"):
        for a, b in zip(grads[2], checked("cpu")):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-4)
    for a, b in zip(grads[1], grads[2]):
        assert torch.equal(a, b)


def test_replayed_backward_of_a_call_split_into_launches(path):
    """A call whose batch dimensions make more than two strided groups runs one launch per
    slice, planned on every call (no runner is noted). Replayed, its forward and backward
    put the template's anchor back from the inputs: results and gradients equal the checked
    path's, and the cached template holds no tensor."""
    _cache.clear()
    gen = torch.Generator().manual_seed(3)
    big = torch.randn(7, 5, 9, 6, 11, generator=gen).to(path.device)
    rewards = big.permute(3, 0, 2, 1, 4)[:, ::2, ::3, :, ::2]  # [T=6, 4, 3, 5, 6], three strided groups
    values = torch.randn(rewards.shape, generator=gen).to(path.device)
    last = torch.randn(rewards.shape[1:], generator=gen).to(path.device)
    got = []
    for _ in range(3):
        r = rewards.detach().requires_grad_()
        adv, ret = rlscan.gae(r, values, bootstrap_value=last)
        got.append((adv, ret) + torch.autograd.grad((adv * adv + ret).sum(), r))
    entries = [e for e in _cache.CACHE.values() if isinstance(e, _fast._GradEntry)]
    assert len(entries) == 1 and entries[0].args.anchor is None
    assert entries[0].fused.runner is None  # split: planned every call
    _cache.clear()
    r = rewards.detach().requires_grad_()
    adv, ret = rlscan.gae(r, values, bootstrap_value=last)
    want = (adv, ret) + torch.autograd.grad((adv * adv + ret).sum(), r)
    for replayed in got[1:]:
        for a, b in zip(replayed, want):
            assert torch.equal(a, b)


@pytest.mark.parametrize("op", ["gae", "vtrace", "retrace"])
def test_replayed_backward_follows_the_gradients_layout(path, op):
    """A replayed call's backward scan is looked up by its output gradients' signatures:
    gradients laid out differently (dense, broadcast as from ``sum()``, transposed, one of
    them absent) on replays of one forward signature each give the checked path's gradients."""
    problem = make_problem(op, (7, 5), device=path.device, seed=6)

    def gradients(grads_of, checked: bool):
        if checked:
            _cache.clear()
        leaf = problem.args[0].clone().requires_grad_()
        outs = problem.replace(**{problem.info.series[0]: leaf}).run()
        wanted = [(o, g) for o, g in zip(outs, grads_of(outs)) if g is not None]
        return torch.autograd.grad([o for o, _ in wanted], leaf, [g for _, g in wanted])[0]

    layouts = [
        lambda outs: [torch.ones_like(o) * (k + 1) for k, o in enumerate(outs)],
        lambda outs: [torch.ones((), device=o.device).expand(o.shape) for o in outs],
        lambda outs: [torch.arange(o.numel(), device=o.device, dtype=o.dtype).reshape(o.shape[::-1]).t() for o in outs],
        lambda outs: [torch.ones_like(outs[0])] + [None] * (len(outs) - 1),
    ]
    _cache.clear()
    gradients(layouts[0], checked=False)  # the first call records the signature
    replayed = [gradients(g, checked=False) for g in layouts]
    (entry,) = [e for e in _cache.CACHE.values() if isinstance(e, _fast._GradEntry)]
    backward = [k for k in _cache.CACHE if k[0] == "backward" and k[1] == entry.args.backward_key]
    assert len(backward) == len(layouts)  # one backward runner per gradients' layout
    checked = [gradients(g, checked=True) for g in layouts]
    for a, b in zip(replayed, checked):
        assert torch.equal(a, b)


def _frames_to_kernel(call) -> int:
    """How many rlscan frames are on the stack when ``call()`` enters its kernel: a CPU loop,
    entered where Python calls a numba dispatcher (caught by wrapping the dispatchers'
    ``__call__``: numba reports its compiled functions to ``sys.setprofile`` only up to Python
    3.11), or Triton's launcher, Python code that a profiler sees. A loop that runs as Python
    (no numba) is seen by the profiler too."""
    import os
    import sys

    package = os.path.dirname(rlscan.__file__)
    found = []

    def rlscan_frames(frame) -> int:
        n = 0
        while frame is not None:
            n += frame.f_code.co_filename.startswith(package)
            frame = frame.f_back
        return n

    def profile(frame, event, arg):
        if event == "call" and not found:
            code = frame.f_code
            if (code.co_filename.startswith(package) and code.co_name.endswith("_loop")) or \
                    f"{os.sep}triton{os.sep}" in code.co_filename:
                found.append(rlscan_frames(frame.f_back))

    with pytest.MonkeyPatch.context() as patch:
        try:
            from numba.core.registry import CPUDispatcher
        except ImportError:  # the loops run as Python functions, which the profiler sees
            pass
        else:
            native = CPUDispatcher.__call__

            def entering(self, *args, **kwargs):
                if not found:
                    found.append(rlscan_frames(sys._getframe(1)))
                return native(self, *args, **kwargs)

            patch.setattr(CPUDispatcher, "__call__", entering)
        sys.setprofile(profile)
        try:
            call()
        finally:
            sys.setprofile(None)
    assert found, "the call entered no kernel"
    return found[0]


def test_a_warm_cpu_call_passes_at_most_four_frames():
    """op → replay → runner → the loop's noted call: a repeat call at 8 × 16 reaches the loop
    through at most four frames of rlscan's."""
    r, v = torch.randn(16, 8), torch.randn(16, 8)
    d, last = torch.rand(16, 8) < 0.1, torch.randn(8)
    with rlscan.use_backend("cpu"):
        for _ in range(3):
            rlscan.gae(r, v, bootstrap_value=last, terminated=d)
        assert _frames_to_kernel(lambda: rlscan.gae(r, v, bootstrap_value=last, terminated=d)) <= 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the direct launch needs a GPU (the interpreter launches "
                                                             "every call through Triton's JITFunction)")
def test_a_warm_gpu_call_passes_at_most_four_frames():
    """op → replay → launch plan → direct launch: a repeat call at 4096 × 128 reaches Triton's
    launcher through at most four frames of rlscan's."""
    r, v = torch.randn(128, 4096, device="cuda"), torch.randn(128, 4096, device="cuda")
    d, last = torch.rand(128, 4096, device="cuda") < 0.1, torch.randn(4096, device="cuda")
    for _ in range(3):
        rlscan.gae(r, v, bootstrap_value=last, terminated=d)
    assert _frames_to_kernel(lambda: rlscan.gae(r, v, bootstrap_value=last, terminated=d)) <= 4
