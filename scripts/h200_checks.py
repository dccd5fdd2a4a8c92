"""The checks that need a GPU (CI has none): CUDA-graph capture, torch.compile on CUDA,
gradients against the CPU path (retrace_from_q's too) and, for one long sequence, float32
against float64, backward speed and the backward
kernels' launch settings, the Retrace cliff, determinism, memory growth, long horizons,
and the CPU/GPU crossover for host-resident buffers (the SB3 adapter's choice). Prints a
table last; writes JSON to $OUT (or ./bench-out). Name steps to run only those:

    python scripts/h200_checks.py [cuda_graphs compiled gradients_vs_cpu backward_speed ...]
"""
from __future__ import annotations

import json
import os
import resource
import time

import numpy as np
import torch

import rlscan

dev = torch.device("cuda")
rows = []


def record(check, ok, detail):
    rows.append({"check": check, "ok": bool(ok), "detail": detail})
    print(f"{'ok ' if ok else 'BAD'} {check:48s} {detail}", flush=True)


def data(T, N, dtype=torch.float32, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)

    def s(*shape):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=g)

    return dict(r=s(T, N), v=s(T, N), nv=s(T, N), q=s(T, N), e=s(T, N), lr=s(T, N) * 0.3, x=s(T, N),
                b=torch.rand(T, N, device=dev, dtype=dtype, generator=g), boot=s(N), init=s(N),
                term=torch.rand(T, N, device=dev, generator=g) < 0.01,
                trunc=torch.rand(T, N, device=dev, generator=g) < 0.01)


def calls(d, **kw):
    return {
        "gae": lambda: rlscan.gae(d["r"], d["v"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], **kw),
        "td_lambda": lambda: rlscan.td_lambda(d["r"], d["v"], bootstrap_value=d["boot"], terminated=d["term"], **kw),
        "discounted_returns": lambda: rlscan.discounted_returns(d["r"], bootstrap_value=d["boot"], terminated=d["term"], **kw),
        "vtrace": lambda: rlscan.vtrace(d["r"], d["v"], d["lr"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], **kw),
        "retrace": lambda: rlscan.retrace(d["r"], d["q"], d["e"], d["lr"], bootstrap_value=d["boot"], terminated=d["term"], **kw),
        "eligibility_traces": lambda: rlscan.eligibility_traces(d["x"], dones=d["term"], gamma=0.99, lmbda=0.9, initial=d["init"], **kw),
        "episodic_cumsum": lambda: rlscan.episodic_cumsum(d["x"], dones=d["term"], initial=d["init"], **kw),
        "linear_scan": lambda: rlscan.linear_scan(d["x"], d["b"], reverse=True, initial=d["init"], **kw),
    }


def flat(o):
    return tuple(o) if isinstance(o, tuple) else (o,)


def device_time(fn, n=20, reps=7):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(n):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / n)
    return sorted(times)[len(times) // 2]


def cuda_graphs():
    """Capture each op, replay with new data written into the same input buffers."""
    T, N = 256, 512
    d = data(T, N)
    for name, fn in calls(d).items():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()  # warm-up (compiles) outside the capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = flat(fn())
        fresh = data(T, N, seed=1)
        for k in d:
            d[k].copy_(fresh[k])
        g.replay()
        torch.cuda.synchronize()
        want = flat(calls(d)[name]())
        same = all(torch.equal(a, b) for a, b in zip(out, want))
        record(f"cuda graph replay with new data: {name}", same, "bitwise equal to eager" if same else "DIFFERS")


def _max_rel_diff(pairs) -> float:
    """The largest ``max|a − b| / max|b|`` over pairs of tensors ``(a, b)``."""
    return max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in pairs)


def compiled():
    d = data(128, 64)
    for name, fn in calls(d).items():
        f = torch.compile(fn, fullgraph=True)
        got, want = flat(f()), flat(fn())
        err = _max_rel_diff(zip(got, want))
        record(f"torch.compile(fullgraph) on CUDA: {name}", err < 1e-6, f"max rel diff to eager {err:.1e}")


def wall_time(fn, n=200, reps=5):
    """Per-call wall clock of back-to-back calls with one synchronize (what a training step pays)."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e6 / n)
    return sorted(times)[len(times) // 2]


def _with_grad(d):
    return {k: t.detach().clone().requires_grad_() if t.is_floating_point() else t for k, t in d.items()}


def kernel_time(fn, n=20):
    """Per-call GPU time: the durations of the kernels (and copies) ``n`` calls run, summed by
    the profiler (CUPTI), without the gaps between them."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / n


# Backward launch settings tried at 4096 x 2048 (forced_config), against the heuristic's: the
# chained and two-pass layouts of runs 27 and 30 (the 2026-11-29 run compared stripe and scan
# tiles, at 4096 x 128 too: docs/data/h200-2026-11-29-backward-settings.txt).
BACKWARD_SETTINGS = {
    "heuristic": {},
    "chained 128x1x8 look-back 4": dict(kind="chained", block_b=128, stripes=1, steps=8, num_warps=1, lookback=4),
    "chained 128x1x8 look-back 1": dict(kind="chained", block_b=128, stripes=1, steps=8, num_warps=1, lookback=1),
    "chained 64x1x16 look-back 4": dict(kind="chained", block_b=64, stripes=1, steps=16, num_warps=1, lookback=4),
    "chained 64x1x8 look-back 4": dict(kind="chained", block_b=64, stripes=1, steps=8, num_warps=1, lookback=4),
    "chained 64x1x32 look-back 1 words": dict(kind="chained", block_b=64, stripes=1, steps=32, num_warps=1, lookback=1,
                                              link="words"),
    "chained 128x1x16 look-back 4": dict(kind="chained", block_b=128, stripes=1, steps=16, num_warps=1, lookback=4),
    "block 128x1x4, 32 chunks": dict(kind="block", block_b=128, stripes=1, steps=4, num_warps=1, n_chunks=32),
    "chained_stripe 128x1x8 look-back 4": dict(kind="chained_stripe", block_b=128, stripes=1, steps=8, num_warps=1,
                                               lookback=4),
    "chained_stripe 128x1x16 look-back 4": dict(kind="chained_stripe", block_b=128, stripes=1, steps=16,
                                                num_warps=1, lookback=4),
    "chained_stripe 64x1x16 look-back 4": dict(kind="chained_stripe", block_b=64, stripes=1, steps=16, num_warps=1,
                                               lookback=4),
}


def backward_speed():
    """Backward time against forward time, every op, all floating inputs requiring grad.

    ``backward`` is ``torch.autograd.grad`` on a kept graph (``retain_graph``). Device
    times are the summed durations of the GPU kernels a call runs (torch.profiler, CUPTI);
    wall times are back-to-back calls with one synchronize."""
    for T, N in ((128, 4096), (2048, 4096)):
        d = data(T, N)
        leaves = _with_grad(d)
        plain, graded = calls(d), calls(leaves)
        for name in plain:
            outs = flat(graded[name]())
            used = [t for t in leaves.values() if t.requires_grad]
            grads = [torch.randn_like(o) for o in outs]

            def bwd():
                torch.autograd.grad(outs, used, grads, retain_graph=True, allow_unused=True)

            fwd_wall, bwd_wall = wall_time(plain[name]), wall_time(bwd)
            fwd_dev, fwd_grad_dev, bwd_dev = kernel_time(plain[name]), kernel_time(graded[name]), kernel_time(bwd)
            fused = outs[0].grad_fn.name() == "_FusedFunctionBackward"
            record(f"backward/forward {name} {N}x{T}", bwd_dev <= 1.5 * fwd_dev,
                   f"device {bwd_dev:.1f}/{fwd_dev:.1f} us = {bwd_dev / fwd_dev:.2f}x "
                   f"(forward with grad {fwd_grad_dev:.1f} us); wall {bwd_wall:.1f}/{fwd_wall:.1f} us = "
                   f"{bwd_wall / fwd_wall:.2f}x; "
                   f"{'fused backward kernel' if fused else 'torch form around the adjoint scan'}")


def backward_settings():
    """Launch settings of the fused backward kernels against the heuristic's, by kernel time,
    for the ops named in the environment variable ``BACKWARD_OPS`` (default: GAE, TD(λ)), and
    only the settings whose labels contain one of ``BACKWARD_LABELS`` (comma-separated) if set."""
    from rlscan._triton import launch

    ops = os.environ.get("BACKWARD_OPS", "gae,td_lambda").split(",")
    only = tuple(filter(None, os.environ.get("BACKWARD_LABELS", "").split(",")))
    for T, N in ((2048, 4096),):
        leaves = _with_grad(data(T, N))
        for name, fn in calls(leaves).items():
            if name not in ops:
                continue
            outs = flat(fn())
            used = [t for t in leaves.values() if t.requires_grad]
            grads = [torch.randn_like(o) for o in outs]

            def bwd():
                torch.autograd.grad(outs, used, grads, retain_graph=True, allow_unused=True)

            for label, settings in BACKWARD_SETTINGS.items():
                if only and label != "heuristic" and not any(o in label for o in only):
                    continue
                launch._PLANS.clear()
                with launch.forced_config(**settings):
                    t = kernel_time(bwd)
                ran = "; ".join(f"{c.kind} {c.block_b}x{c.stripes}x{c.steps} look-back {c.lookback} {c.link}"
                                for c in (p.cfg for p in launch._PLANS.values()))
                record(f"backward settings {name} {N}x{T} {label}", True, f"{t:.1f} us (ran {ran})")


def _ramp_grads(outs, inputs):
    """The gradients of the outputs' sum weighted by a ramp from -1 to 1 along time (their
    first axis), so that every step's gradient differs; ``None`` for inputs not used."""
    w = [torch.ones_like(o) * torch.linspace(-1, 1, o.shape[0], device=o.device, dtype=o.dtype)[:, None] for o in outs]
    return torch.autograd.grad(outs, inputs, w, allow_unused=True)


def gradients_vs_cpu():
    """Every op's gradients on the GPU (float64) against the CPU path's (float64 loops and
    autograd through the ops' torch forms, gradchecked in CI), tensor γ/λ, both value sources;
    at 64 x 300 and at 4096 x 512 (where the heuristic picks the block and chained kernels)."""
    for T, N in ((300, 64), (512, 4096)):
        _gradients_vs_cpu(T, N)


def _gradients_vs_cpu(T, N):
    d = {k: t.double() if t.is_floating_point() else t for k, t in data(T, N).items()}
    g = torch.Generator(device=dev).manual_seed(3)
    coef = lambda: 0.2 + 0.7 * torch.rand(T, N, device=dev, dtype=torch.float64, generator=g)  # noqa: E731
    for name in calls(d):
        kw = {} if name in ("episodic_cumsum", "linear_scan") else dict(gamma=coef())
        if name not in ("episodic_cumsum", "linear_scan", "discounted_returns"):
            kw["lmbda"] = coef()
        if name == "eligibility_traces":
            kw = {}
        grads = {}
        for where, backend in ((dev.type, "triton"), ("cpu", "cpu")):
            with rlscan.use_backend(backend):
                moved = {k: t.to(where) for k, t in d.items()}
                leaves = _with_grad(moved)
                kws = {k: v.to(where).requires_grad_() for k, v in kw.items()}
                fn = calls(leaves, **kws)[name]
                inputs = [t for t in list(leaves.values()) + list(kws.values()) if t.requires_grad]
                grads[backend] = [None if x is None else x.cpu() for x in _ramp_grads(flat(fn()), inputs)]
        zero = lambda a, b: torch.zeros_like(b if a is None else a) if a is None else a  # noqa: E731
        pairs = [(zero(a, b), zero(b, a)) for a, b in zip(grads["triton"], grads["cpu"]) if a is not None or b is not None]
        err = _max_rel_diff(pairs)
        record(f"gradients on GPU vs CPU path (float64): {name} {N}x{T}", err < 1e-9, f"max rel diff {err:.1e}")


def gradients_one_sequence():
    """Every op's gradients for one sequence of 1,000,000 steps: float32, whose forward and
    backward scans run the one-pass chained tiles there, against float64, which runs the
    two launches of tiles (its pairs do not fit one word); both on the GPU."""
    T, N = 1_000_000, 1
    from rlscan._triton import launch

    d64 = {k: t.double() if t.is_floating_point() else t for k, t in data(T, N).items()}
    for name in calls(d64):
        grads, kinds = {}, {}
        for dtype in (torch.float32, torch.float64):
            leaves = _with_grad({k: t.to(dtype) if t.is_floating_point() else t for k, t in d64.items()})
            launch._PLANS.clear()
            inputs = [t for t in leaves.values() if t.requires_grad]
            grads[dtype] = [None if x is None else x.double() for x in _ramp_grads(flat(calls(leaves)[name]()), inputs)]
            kinds[dtype] = sorted({p.cfg.kind for p in launch._PLANS.values()})
        pairs = [(a, b) for a, b in zip(grads[torch.float32], grads[torch.float64]) if b is not None]
        err = _max_rel_diff(pairs)
        record(f"gradients float32 vs float64: {name} {N}x{T}", err < 1e-4,
               f"max rel diff {err:.1e} (float32 ran {', '.join(kinds[torch.float32])}; "
               f"float64 {', '.join(kinds[torch.float64])})")


def retrace_from_q_gradients():
    """retrace_from_q's gradients on the GPU (Retrace's fused backward, then the action
    table's chain rule) against the CPU path's, float64, at 64 x 300 and 4096 x 512, 6 actions."""
    for T, N in ((300, 64), (512, 4096)):
        d = {k: t.double() if t.is_floating_point() else t for k, t in data(T, N).items()}
        g = torch.Generator(device=dev).manual_seed(4)
        q = torch.randn(T, N, 6, device=dev, dtype=torch.float64, generator=g)
        pi = torch.softmax(torch.randn(T, N, 6, device=dev, dtype=torch.float64, generator=g), -1)
        actions = torch.randint(0, 6, (T, N), device=dev, generator=g)
        grads = {}
        for where, backend in ((dev.type, "triton"), ("cpu", "cpu")):
            with rlscan.use_backend(backend):
                leaves = [t.to(where).requires_grad_() for t in (d["r"], q, pi, d["lr"], d["nv"])]
                out = rlscan.retrace_from_q(leaves[0], leaves[1], actions.to(where), leaves[2], leaves[3],
                                            next_expected_q=leaves[4], terminated=d["term"].to(where),
                                            truncated=d["trunc"].to(where), gamma=0.97, lmbda=0.9)
                outs = flat(out)
                w = [torch.linspace(-1, 1, o.numel(), device=o.device, dtype=o.dtype).view_as(o) for o in outs]
                grads[backend] = [x.cpu() for x in torch.autograd.grad(outs, leaves, w)]
        err = _max_rel_diff(zip(grads["triton"], grads["cpu"]))
        record(f"retrace_from_q gradients on GPU vs CPU path (float64) {N}x{T}", err < 1e-9, f"max rel diff {err:.1e}")


def retrace_cliff():
    """Time per element of Retrace at N = 512 as T grows: no cliff allowed (target ≤ 1.2x)."""
    per = {}
    for T in (2048, 4096, 16384):
        d = data(T, 512)
        A = 18
        g = torch.Generator(device=dev).manual_seed(5)
        q_values = torch.randn(T, 512, A, device=dev, generator=g)
        probs = torch.softmax(torch.randn(T, 512, A, device=dev, generator=g), -1)
        actions = torch.randint(0, A, (T, 512), device=dev, generator=g)
        t1 = device_time(lambda: rlscan.retrace(d["r"], d["q"], d["e"], d["lr"], bootstrap_value=d["boot"], terminated=d["term"]))
        t2 = device_time(lambda: rlscan.retrace_from_q(d["r"], q_values, actions, probs, d["lr"], bootstrap_value=d["boot"],
                                                       terminated=d["term"]))
        per[T] = (t1 / (T * 512) * 1e3, t2 / (T * 512) * 1e3)
    for T in (4096, 16384):
        for i, name in enumerate(("retrace", "retrace_from_q (A=18)")):
            ratio = per[T][i] / per[2048][i]
            record(f"{name} time per element, 512x{T} vs 512x2048", ratio <= 1.2,
                   f"{per[T][i]:.3f} vs {per[2048][i]:.3f} ns per element ({ratio:.2f}x)")


def determinism():
    """Same inputs, five calls. The exact mode, and the fast mode under
    ``torch.use_deterministic_algorithms(True)``, must give identical bits every time; the
    fast mode's one-pass chained layout (backward-in-time scans, ``[T, N]``, N >= 4096,
    T >= 512) may differ in the last bits: its largest relative difference is reported. The
    environment variable ``DETERMINISM_SHAPES`` ("NxT,...") picks the shapes."""
    shapes = os.environ.get("DETERMINISM_SHAPES", "4096x2048,16x262144,1x1000000").split(",")
    for N, T in (map(int, shape.split("x")) for shape in shapes):
        d = data(T, N)
        modes = [("fast", False, False), ("fast, deterministic algorithms", False, True)]
        if T <= 2048:
            modes.append(("exact", True, False))
        for mode, exact, deterministic in modes:
            torch.use_deterministic_algorithms(deterministic)
            try:
                for name, fn in calls(d, exact=exact).items():
                    first = flat(fn())
                    worst = 0.0
                    for _ in range(4):
                        again = flat(fn())
                        worst = max([worst] + [((x.double() - y.double()).norm() / y.double().norm()).item()
                                               for x, y in zip(again, first) if not torch.equal(x, y)])
                    bitwise = worst == 0.0
                    ok = bitwise if (exact or deterministic) else worst <= 1e-5
                    record(f"determinism {name} {N}x{T} {mode}", ok,
                           "bitwise identical in 5 calls" if bitwise else f"largest relative difference {worst:.1e}")
            finally:
                torch.use_deterministic_algorithms(False)


def memory():
    d = data(128, 1024)
    fns = calls(d)
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    gpu0 = torch.cuda.memory_allocated()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(10_000 // len(fns)):
        for fn in fns.values():
            fn()
    torch.cuda.synchronize()
    gpu1 = torch.cuda.memory_allocated()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    record("10,000 calls: GPU memory", gpu1 == gpu0, f"allocated {gpu0} -> {gpu1} bytes")
    record("10,000 calls: process memory", rss1 - rss0 < 20_000, f"max RSS {rss0} -> {rss1} KiB")


def long_horizon():
    T = 1_000_000
    g = torch.Generator(device=dev).manual_seed(3)
    r = torch.rand(T, 1, device=dev, generator=g)
    for name, f in (("discounted_returns", lambda x: rlscan.discounted_returns(x, gamma=1.0)),
                    ("td_lambda", lambda x: rlscan.td_lambda(x, x, bootstrap_value=x[0], gamma=1.0, lmbda=1.0)),
                    ("episodic_cumsum", lambda x: rlscan.episodic_cumsum(x, dones=None)),
                    ("linear_scan fwd", lambda x: rlscan.linear_scan(x, 1.0)),
                    ("linear_scan rev", lambda x: rlscan.linear_scan(x, 1.0, reverse=True))):
        got = f(r).double()
        want = f(r.double())
        err = ((got - want).abs() / want.abs().clamp_min(1)).max().item()
        bound = 1e-4  # float32 sums of 1e6 terms in [0, 1]: relative error of order sqrt(T)*eps or better
        record(f"T=1e6, gamma=lambda=1, float32 vs float64: {name}", err < bound, f"max rel err {err:.1e} (bound {bound:.0e})")


def crossover():
    """For host-resident float32 buffers (SB3), when does copying to the GPU pay?"""
    print("CPU path vs GPU (host->device, kernel, device->host) for numpy [T, N] buffers:")
    out = []
    for T, N in ((128, 1), (128, 8), (512, 8), (2048, 8), (2048, 64), (2048, 256), (2048, 1024), (2048, 4096), (8192, 4096)):
        rng = np.random.default_rng(0)
        r = rng.standard_normal((T, N), dtype=np.float32)
        v = rng.standard_normal((T, N), dtype=np.float32)
        term = rng.random((T, N)) < 0.01
        boot = rng.standard_normal(N, dtype=np.float32)

        def cpu():
            return rlscan.gae(r, v, bootstrap_value=boot, terminated=term)

        def gpu():
            t = [torch.from_numpy(x).to(dev, non_blocking=False) for x in (r, v, term, boot)]
            o = rlscan.gae(t[0], t[1], bootstrap_value=t[3], terminated=t[2])
            return o.advantages.cpu().numpy(), o.returns.cpu().numpy()

        def wall(fn, n):
            fn()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n * 1e6

        n = max(3, int(2e6 / (T * N)))
        c, g_ = wall(cpu, n), wall(gpu, n)
        out.append(dict(T=T, N=N, cpu_us=c, gpu_us=g_))
        print(f"   T={T:5d} N={N:5d}  cpu {c:9.1f} us   gpu incl. copies {g_:9.1f} us", flush=True)
    return out


def main():
    out_dir = os.environ.get("OUT", "bench-out")
    os.makedirs(out_dir, exist_ok=True)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    result = {}
    import sys

    steps = (cuda_graphs, compiled, gradients_vs_cpu, gradients_one_sequence, retrace_from_q_gradients, backward_speed,
             backward_settings, retrace_cliff, determinism, memory, long_horizon)
    only = sys.argv[1:]
    if only:
        steps = tuple(s for s in steps if s.__name__ in only)
    for step in steps:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - report and carry on with the other checks
            import traceback

            traceback.print_exc(limit=4)
            record(step.__name__, False, f"raised {type(exc).__name__}: {str(exc)[:600]}")
    if not only or "crossover" in only:
        try:
            result["crossover"] = crossover()
        except Exception as exc:  # noqa: BLE001
            record("crossover", False, f"raised {exc!r}"[:300])
    result["checks"] = rows
    with open(os.path.join(out_dir, "checks-" + "-".join(only) + ".json" if only else "checks.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\nsummary:")
    for r in rows:
        print(f"  {'ok ' if r['ok'] else 'BAD'} {r['check']}: {r['detail']}")


if __name__ == "__main__":
    main()
