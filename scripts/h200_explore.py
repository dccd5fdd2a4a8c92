"""One device call's worth of GPU work: correctness of every op, the floors, and a sweep of
launch settings. Prints a short table last; writes details to $OUT (or ./bench-out).

    python scripts/h200_explore.py [--quick] [--sweep] [--check]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch



def timed_full(fn, n=300, warm=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def timed_device(fn, n=20, reps=10):
    """Median device time per call from CUDA-graph replays of ``n`` calls."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / n)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--tune", action="store_true", help="focused sweep of small-block configs for [T, N] inputs")
    args = ap.parse_args()
    out_dir = os.environ.get("OUT", "bench-out")
    os.makedirs(out_dir, exist_ok=True)
    import triton
    import triton.language as tl

    import rlscan
    from rlscan import reference as ref
    from rlscan._triton import launch as L

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, triton {triton.__version__}")
    results = {"device": props.name, "torch": torch.__version__, "triton": triton.__version__, "rows": []}

    # ---------------------------------------------------------------- floors
    @triton.jit
    def _empty(X):
        pass

    x = torch.empty(1, device=dev)
    launch_floor = timed_full(lambda: _empty[(1,)](x), n=2000)
    big = torch.empty(1024 * 2**20 // 4, device=dev).uniform_()
    dst = torch.empty_like(big)
    for _ in range(200):  # let the clocks rise before measuring
        dst.copy_(big)

    @triton.jit
    def _copy(X, Y, n, BLOCK: tl.constexpr):
        o = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + o, tl.load(X + o, mask=o < n), mask=o < n)

    copy_us = timed_device(lambda: dst.copy_(big), n=5, reps=5)
    tcopy_us = timed_device(lambda: _copy[(triton.cdiv(big.numel(), 4096),)](big, dst, big.numel(), BLOCK=4096), n=5, reps=5)
    print(f"torch copy {2 * big.numel() * 4 / (copy_us * 1e-6) / 1e12:.2f} TB/s, triton copy "
          f"{2 * big.numel() * 4 / (tcopy_us * 1e-6) / 1e12:.2f} TB/s")
    bw = 2 * big.numel() * 4 / (min(copy_us, tcopy_us) * 1e-6)
    print(f"launch floor {launch_floor:.2f} us (full call of an empty Triton kernel); copy bandwidth {bw/1e12:.2f} TB/s")
    results["launch_floor_us"] = launch_floor
    results["copy_bw"] = bw
    del big, dst

    torch.manual_seed(0)

    # ---------------------------------------------------------------- correctness
    if args.check:
        fails = 0

        def cmp(name, got, want, tol):
            nonlocal fails
            got = got if isinstance(got, tuple) else (got,)
            want = want if isinstance(want, tuple) else (want,)
            err = 0.0
            for g_, w_ in zip(got, want):
                w_ = w_.to(torch.float64).cpu()
                e = ((g_.double().cpu() - w_).norm() / w_.norm().clamp_min(1e-30)).item()
                err = max(err, e if e == e else float("inf"))
            ok = err <= tol
            fails += not ok
            print(f"  {'ok ' if ok else 'BAD'} {name:58s} rel err {err:.2e}")
            results["rows"].append({"check": name, "rel_err": err, "ok": ok})

        def inputs(T, N, dtype=torch.float32, layout="tn"):
            def s(*shape):
                z = torch.randn(*shape, device=dev, dtype=dtype)
                return z
            d = dict(r=s(T, N), v=s(T, N), nv=s(T, N), q=s(T, N), e=s(T, N), lr=s(T, N) * 0.3,
                     term=torch.rand(T, N, device=dev) < 0.01, trunc=torch.rand(T, N, device=dev) < 0.01,
                     boot=s(N), init=s(N), b=torch.rand(T, N, device=dev, dtype=dtype))
            if layout == "nt":
                d = {k: (x.t().contiguous().t() if x.dim() == 2 else x) for k, x in d.items()}
            return d

        def ops(m, d):
            return {
                "gae": lambda: m.gae(d["r"], d["v"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"]),
                "gae_boot": lambda: m.gae(d["r"], d["v"], bootstrap_value=d["boot"], terminated=d["term"]),
                "td_lambda": lambda: m.td_lambda(d["r"], d["v"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"]),
                "discounted": lambda: m.discounted_returns(d["r"], bootstrap_value=d["boot"], terminated=d["term"]),
                "vtrace": lambda: m.vtrace(d["r"], d["v"], d["lr"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], lmbda=0.95),
                "retrace": lambda: m.retrace(d["r"], d["q"], d["e"], d["lr"], next_expected_q=d["nv"], terminated=d["term"], truncated=d["trunc"], lmbda=0.9),
                "eligibility": lambda: m.eligibility_traces(d["r"], dones=d["term"], gamma=0.99, lmbda=0.9, initial=d["init"]),
                "episodic_cumsum": lambda: m.episodic_cumsum(d["r"], dones=d["term"], initial=d["init"]),
                "linear_scan_rev": lambda: m.linear_scan(d["r"], d["b"], reverse=True, initial=d["init"]),
                "linear_scan_fwd": lambda: m.linear_scan(d["r"], d["b"], initial=d["init"]),
            }

        print("correctness against the float64 reference:")
        shapes = [(1000, 64, "tn"), (128, 4096, "tn"), (128, 4096, "nt"), (20000, 4, "tn"), (20000, 4, "nt"), (1, 3, "tn"), (7, 5, "nt")]
        for T, N, lay in shapes:
            d = inputs(T, N, layout=lay)
            want = {k: f() for k, f in ops(ref, d).items()}
            for k, f in ops(rlscan, d).items():
                cmp(f"{k} T={T} N={N} {lay}", f(), want[k], 1e-5)
            for k, f in ops(rlscan, d).items():
                if k in ("gae", "vtrace", "retrace"):
                    got = rlscan.use_backend  # noqa
                    cmp(f"{k} exact T={T} N={N} {lay}", _exact(rlscan, k, d), want[k], 1e-5)
        for dtype, tol in ((torch.float16, 2e-3), (torch.bfloat16, 2e-2), (torch.float64, 1e-12)):
            d = inputs(512, 256, dtype)
            want = {k: f() for k, f in ops(ref, d).items()}
            for k, f in ops(rlscan, d).items():
                cmp(f"{k} {dtype} T=512 N=256", f(), want[k], tol)
        # long sequences: against the sequential float64 evaluation on the GPU
        for T, N in ((1_000_000, 1), (262144, 16)):
            d = inputs(T, N)
            d64 = {k: (x.double() if x.is_floating_point() else x) for k, x in d.items()}
            for k, f in ops(rlscan, d).items():
                seq = _exact_any(rlscan, k, d64)
                cmp(f"{k} T={T} N={N} vs sequential f64", f(), seq, 1e-4)
        print(f"correctness: {fails} failures")
        results["check_failures"] = fails

    # ---------------------------------------------------------------- sweep
    rows = []
    if args.sweep:
        shapes = [(128, 4096, "tn"), (2048, 4096, "tn"), (512, 16384, "tn"), (16, 16384, "tn"), (8, 65536, "tn"),
                  (262144, 16, "tn"), (1_000_000, 1, "tn"), (2048, 4096, "nt"), (128, 4096, "nt"), (262144, 16, "nt")]
        if args.quick:
            shapes = shapes[:3]
        if args.tune:
            shapes = [(128, 4096, "tn"), (2048, 4096, "tn"), (512, 16384, "tn"), (16, 16384, "tn"), (8, 65536, "tn"),
                      (262144, 16, "tn"), (2048, 4096, "nt")]
        stripe_variants = [
            dict(kind="stripe", block_b=32, stripes=8, steps=16, num_warps=4),
            dict(kind="stripe", block_b=32, stripes=4, steps=16, num_warps=2),
            dict(kind="stripe", block_b=64, stripes=4, steps=16, num_warps=4),
            dict(kind="stripe", block_b=128, stripes=2, steps=16, num_warps=4),
            dict(kind="stripe", block_b=32, stripes=8, steps=8, num_warps=4),
            dict(kind="stripe", block_b=16, stripes=16, steps=8, num_warps=4),
            dict(kind="stripe", block_b=32, stripes=16, steps=8, num_warps=8),
            dict(kind="stripe", block_b=128, stripes=1, steps=16, num_warps=4),
            dict(kind="stripe", block_b=64, stripes=8, steps=8, num_warps=8),
        ]
        scan_variants = [
            dict(kind="scan", block_t=128, block_b=32, num_warps=4),
            dict(kind="scan", block_t=32, block_b=128, num_warps=1),
            dict(kind="scan", block_t=64, block_b=128, num_warps=1),
            dict(kind="scan", block_t=32, block_b=256, num_warps=2),
        ]
        if args.tune:
            stripe_variants = [
                dict(kind="stripe", block_b=16, stripes=16, steps=8, num_warps=4),
                dict(kind="stripe", block_b=8, stripes=16, steps=8, num_warps=2),
                dict(kind="stripe", block_b=16, stripes=8, steps=8, num_warps=2),
                dict(kind="stripe", block_b=8, stripes=32, steps=4, num_warps=4),
                dict(kind="stripe", block_b=32, stripes=1, steps=8, num_warps=1),
                dict(kind="stripe", block_b=64, stripes=1, steps=8, num_warps=2),
            ]
            scan_variants = [
                dict(kind="scan", block_t=128, block_b=32, num_warps=4),
                dict(kind="scan", block_t=128, block_b=16, num_warps=4),
                dict(kind="scan", block_t=256, block_b=16, num_warps=4),
                dict(kind="scan", block_t=128, block_b=8, num_warps=4),
                dict(kind="scan", block_t=256, block_b=8, num_warps=4),
                dict(kind="scan", block_t=128, block_b=8, num_warps=2),
                dict(kind="scan", block_t=512, block_b=8, num_warps=8),
                dict(kind="scan", block_t=64, block_b=16, num_warps=2),
                dict(kind="scan", block_t=16, block_b=64, num_warps=2),
                dict(kind="scan", block_t=8, block_b=128, num_warps=4),
            ]
        nt_variants = [
            dict(kind="scan", block_t=256, block_b=4, num_warps=4),
            dict(kind="scan", block_t=1024, block_b=4, num_warps=4),
            dict(kind="scan", block_t=1024, block_b=2, num_warps=4),
            dict(kind="scan", block_t=2048, block_b=1, num_warps=4),
            dict(kind="scan", block_t=512, block_b=8, num_warps=8),
            dict(kind="scan", block_t=1024, block_b=4, num_warps=8),
            dict(kind="scan", block_t=512, block_b=4, num_warps=2),
        ]
        for T, N, lay in shapes:
            r = torch.randn(T, N, device=dev)
            v = torch.randn(T, N, device=dev)
            term = torch.rand(T, N, device=dev) < 0.01
            boot = torch.randn(N, device=dev)
            if lay == "nt":
                r, v, term = (x.t().contiguous().t() for x in (r, v, term))
            nbytes = T * N * 17 + N * 4
            floor_us = nbytes / bw * 1e6
            fn = lambda: rlscan.gae(r, v, bootstrap_value=boot, terminated=term)  # noqa: E731
            auto_cfg = L.choose_config(T, N, lay == "nt", False, dev)
            full = timed_full(fn, n=100 if T * N > 1e7 else 300)
            devt = timed_device(fn)
            seq = float("nan")
            if T <= 4096:
                seq = timed_device(lambda: rlscan.gae(r, v, bootstrap_value=boot, terminated=term, exact=True), n=3, reps=3)
            rows.append(dict(T=T, N=N, lay=lay, cfg="auto", full=full, dev=devt, floor=floor_us, seq=seq))
            print(f"{lay} N={N:6d} T={T:7d} auto {auto_cfg} full {full:7.1f}us dev {devt:8.1f}us floor {floor_us:7.1f}us"
                  f" ({devt/floor_us:5.2f}x) seq {seq:8.1f}us")
            variants = nt_variants if (lay == "nt" or N == 1) else stripe_variants + scan_variants
            for base in variants:
                if base.get("block_t", 1) > max(8, triton.next_power_of_2(T)) or base["block_b"] > max(1, triton.next_power_of_2(N)):
                    continue
                if base.get("steps", 1) * base.get("stripes", 1) > max(8, triton.next_power_of_2(T)):
                    continue
                chunk_set = (1, 8, 64, 512)
                if N >= 4096 and T <= 512:
                    chunk_set = (1,)
                elif args.tune:
                    chunk_set = (1,) if N >= 4096 else (64, 256)
                for chunks in chunk_set:
                    kw = dict(base, n_chunks=chunks)
                    try:
                        with L.forced_config(**kw):
                            cfg = L.choose_config(T, N, lay == "nt", False, dev)
                            if cfg.n_chunks > 1 and cfg.block_c * cfg.block_b > 8192:
                                continue
                            devt = timed_device(fn, n=10, reps=5)
                    except Exception as ex:  # noqa: BLE001
                        print("   fail", kw, repr(ex)[:300])
                        continue
                    rows.append(dict(T=T, N=N, lay=lay, cfg=str(kw), dev=devt, floor=floor_us))
                    print(f"   {str(kw):100s} dev {devt:8.1f}us ({devt/floor_us:5.2f}x floor)")
        results["sweep"] = rows

    # ---------------------------------------------------------------- host overhead
    r = torch.randn(128, 4096, device=dev)
    v = torch.randn(128, 4096, device=dev)
    term = torch.rand(128, 4096, device=dev) < 0.01
    boot = torch.randn(4096, device=dev)
    gae_call = lambda: rlscan.gae(r, v, bootstrap_value=boot, terminated=term)  # noqa: E731
    full = timed_full(gae_call, n=3000)
    direct = L.LaunchPlan.direct
    L.LaunchPlan.direct = False
    L._PLANS.clear()
    full_jit = timed_full(gae_call, n=3000)
    L.LaunchPlan.direct = direct
    L._PLANS.clear()
    print(f"host: gae 4096x128 full call {full:.2f} us = {full/launch_floor:.2f}x launch floor "
          f"(through JITFunction.run: {full_jit:.2f} us); direct launch: {L.LaunchPlan.direct} "
          f"{L.LaunchPlan.disabled_reason}")
    results["gae_4096x128_full_us"] = full
    # the cached direct launch must stay right when pointer alignment changes between calls
    want = ref.gae(r, v, bootstrap_value=boot, terminated=term)
    shifted = torch.empty(r.numel() + 1, device=dev)[1:].view_as(r).copy_(r)
    for x in (r, shifted, r, shifted):
        got = rlscan.gae(x, v, bootstrap_value=boot, terminated=term)
        err = ((got.advantages.double().cpu() - want.advantages).norm() / want.advantages.norm()).item()
        print(f"direct-launch check (aligned={x.data_ptr() % 16 == 0}): rel err {err:.1e}")
    import cProfile
    import io
    import pstats
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3000):
        gae_call()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(18)
    with open(os.path.join(out_dir, "host_profile.txt"), "w") as f:
        f.write(buf.getvalue())
    with open(os.path.join(out_dir, "explore.json"), "w") as f:
        json.dump(results, f, indent=1)


def _exact(m, k, d):
    if k == "gae":
        return m.gae(d["r"], d["v"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], exact=True)
    if k == "vtrace":
        return m.vtrace(d["r"], d["v"], d["lr"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], lmbda=0.95, exact=True)
    return m.retrace(d["r"], d["q"], d["e"], d["lr"], next_expected_q=d["nv"], terminated=d["term"], truncated=d["trunc"], lmbda=0.9, exact=True)


def _exact_any(m, k, d):
    calls = {
        "gae": lambda: m.gae(d["r"], d["v"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], exact=True),
        "gae_boot": lambda: m.gae(d["r"], d["v"], bootstrap_value=d["boot"], terminated=d["term"], exact=True),
        "td_lambda": lambda: m.td_lambda(d["r"], d["v"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], exact=True),
        "discounted": lambda: m.discounted_returns(d["r"], bootstrap_value=d["boot"], terminated=d["term"], exact=True),
        "vtrace": lambda: m.vtrace(d["r"], d["v"], d["lr"], next_values=d["nv"], terminated=d["term"], truncated=d["trunc"], lmbda=0.95, exact=True),
        "retrace": lambda: m.retrace(d["r"], d["q"], d["e"], d["lr"], next_expected_q=d["nv"], terminated=d["term"], truncated=d["trunc"], lmbda=0.9, exact=True),
        "eligibility": lambda: m.eligibility_traces(d["r"], dones=d["term"], gamma=0.99, lmbda=0.9, initial=d["init"], exact=True),
        "episodic_cumsum": lambda: m.episodic_cumsum(d["r"], dones=d["term"], initial=d["init"], exact=True),
        "linear_scan_rev": lambda: m.linear_scan(d["r"], d["b"], reverse=True, initial=d["init"], exact=True),
        "linear_scan_fwd": lambda: m.linear_scan(d["r"], d["b"], initial=d["init"], exact=True),
    }
    return calls[k]()


if __name__ == "__main__":
    main()
