"""Compile every op's Triton kernels for an H100/H200 (sm_90) on a machine with no GPU.

Triton's front end, its MLIR passes and the bundled ptxas need no device, so this catches
what the interpreter cannot: code the interpreter runs as Python but the compiler refuses
(non-constexpr globals, Python calls inside jit code, unsupported layouts). It launches
nothing; run it whenever a kernel changes:

    python scripts/compile_for_gpu.py          # the kernels as launched
    python scripts/compile_for_gpu.py --wide   # the same with 64-bit offsets
    COMPILE_ONLY=masked python scripts/compile_for_gpu.py   # the cases whose name holds "masked"
"""
from __future__ import annotations

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

import rlscan  # noqa: E402
from rlscan._triton import launch as L  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)
failures = []
compiled = 0


def compile_only(fn, grid, args, kwargs):
    """What JITFunction.run does up to the compile, for a fixed target."""
    global compiled
    binder = create_function_from_signature(fn.signature, fn.params, BACKEND)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(BACKEND, kwargs, bound, specialization, options)
    compile(ASTSource(fn, signature, constexprs, attrs), target=TARGET, options=options.__dict__)
    compiled += 1


def cases():
    T, N, A = 64, 8, 5
    r, v, nv, q, e, lr, x = (torch.randn(T, N) for _ in range(7))
    b = torch.rand(T, N)
    term, trunc = torch.rand(T, N) < 0.1, torch.rand(T, N) < 0.1
    boot, init = torch.randn(N), torch.randn(N)
    q_values, probs = torch.randn(T, N, A), torch.softmax(torch.randn(T, N, A), -1)
    actions = torch.randint(0, A, (T, N))
    q_values18, probs18 = torch.randn(T, N, 18), torch.softmax(torch.randn(T, N, 18), -1)
    g_t = torch.rand(T, 1)
    mask = torch.rand(N, T) < 0.8
    rb, vb = torch.randn(N, T), torch.randn(N, T).to(torch.bfloat16)
    return {
        "gae": lambda **k: rlscan.gae(r, v, next_values=nv, terminated=term, truncated=trunc, **k),
        "gae tensor gamma": lambda **k: rlscan.gae(r, v, bootstrap_value=boot, terminated=term, gamma=g_t, **k),
        "td_lambda": lambda **k: rlscan.td_lambda(r, v, bootstrap_value=boot, terminated=term, **k),
        "discounted_returns": lambda **k: rlscan.discounted_returns(r, bootstrap_value=boot, terminated=term, **k),
        "vtrace": lambda **k: rlscan.vtrace(r, v, lr, next_values=nv, terminated=term, truncated=trunc, **k),
        "retrace": lambda **k: rlscan.retrace(r, q, e, lr, bootstrap_value=boot, terminated=term, **k),
        "retrace_from_q": lambda **k: rlscan.retrace_from_q(r, q_values, actions, probs, lr, bootstrap_value=boot,
                                                           terminated=term, **k),
        "retrace_from_q 4 actions [N, T]": lambda **k: rlscan.retrace_from_q(  # the tables' vector path
            r.t().contiguous(), q_values.transpose(0, 1)[..., :4].contiguous(), actions.t().clamp(max=3).contiguous(),
            probs.transpose(0, 1)[..., :4].contiguous(), lr.t().contiguous(), bootstrap_value=boot,
            terminated=term.t().contiguous(), time_dim=1, **k),
        "retrace_from_q 18 actions": lambda **k: rlscan.retrace_from_q(
            r, q_values18, actions, probs18, lr, bootstrap_value=boot, terminated=term, **k),
        "retrace_from_q strided table": lambda **k: rlscan.retrace_from_q(
            r, q_values.movedim(-1, 0).contiguous().movedim(0, -1), actions, probs, lr, bootstrap_value=boot,
            terminated=term, **k),
        "eligibility_traces": lambda **k: rlscan.eligibility_traces(x, dones=term, gamma=0.9, lmbda=0.8, initial=init, **k),
        "episodic_cumsum": lambda **k: rlscan.episodic_cumsum(x, dones=term, initial=init, **k),
        "linear_scan": lambda **k: rlscan.linear_scan(x, b, reverse=True, initial=init, **k),
        "linear_scan float64": lambda **k: rlscan.linear_scan(x.double(), b.double(), initial=init.double(), **k),
        # the step-skip mask: GAE's one pass (two lanes, the whitening's sums), its two scans (λ < 0.5)
        "gae masked one pass": lambda **k: rlscan.gae(rb, vb, mask=mask, time_dim=1, whiten=True, lmbda=0.95, **k),
        "gae masked bootstrap": lambda **k: rlscan.gae(rb, vb, mask=mask.long(), time_dim=1, bootstrap_value=boot,
                                                       terminated=term.t(), gamma=torch.rand(N, T), lmbda=0.9, **k),
        "gae masked two scans": lambda **k: rlscan.gae(r, v, mask=mask.t(), bootstrap_value=boot, lmbda=0.3, **k),
        "td_lambda masked": lambda **k: rlscan.td_lambda(r, v, mask=mask.t(), bootstrap_value=boot, terminated=term,
                                                         **k),
        "discounted_returns masked": lambda **k: rlscan.discounted_returns(r, mask=mask.t(), terminated=term, **k),
        # the fused backward kernels: every gradient output, both sources of the value after a step
        "gae backward": lambda **k: _backward(rlscan.gae, (r, v), dict(next_values=nv, truncated=trunc),
                                              terminated=term, gamma=g_t, lmbda=torch.rand(T, N), **k),
        "gae backward bootstrap": lambda **k: _backward(rlscan.gae, (r, v), dict(bootstrap_value=boot),
                                                        terminated=term, **k),
        "td_lambda backward": lambda **k: _backward(rlscan.td_lambda, (r, v), dict(bootstrap_value=boot),
                                                    terminated=term, lmbda=torch.rand(T, N), **k),
        "gae backward float64": lambda **k: _backward(
            rlscan.gae, (r.double(), v.double()), dict(next_values=nv.double(), truncated=trunc), terminated=term,
            gamma=torch.rand(T, N, dtype=torch.float64), lmbda=torch.rand(T, N, dtype=torch.float64), **k),
        "vtrace backward": lambda **k: _backward(rlscan.vtrace, (r, v, lr), dict(bootstrap_value=boot),
                                                 terminated=term, gamma=g_t, lmbda=torch.rand(T, N), **k),
        "vtrace backward next values": lambda **k: _backward(rlscan.vtrace, (r, v, lr), dict(next_values=nv, truncated=trunc),
                                                             terminated=term, **k),
        "retrace backward": lambda **k: _backward(rlscan.retrace, (r, q, e, lr), dict(bootstrap_value=boot),
                                                  terminated=term, gamma=g_t, lmbda=torch.rand(T, N), **k),
        "retrace backward next values": lambda **k: _backward(rlscan.retrace, (r, q, e, lr),
                                                              dict(next_expected_q=nv, truncated=trunc), terminated=term, **k),
        "eligibility_traces backward": lambda **k: _backward(rlscan.eligibility_traces, (x,), dict(initial=init),
                                                             dones=term, gamma=g_t, lmbda=torch.rand(T, N), **k),
        "episodic_cumsum backward": lambda **k: _backward(rlscan.episodic_cumsum, (x,), dict(initial=init), dones=term,
                                                          **k),
        "discounted_returns backward": lambda **k: _backward(rlscan.discounted_returns, (r,),
                                                             dict(next_values=nv), gamma=g_t, **k),
    }


def _backward(op, series, values, **kwargs):
    """Forward and backward with every floating input requiring grad (``exact`` applies to
    the forward only)."""
    kwargs.pop("exact", None)
    leaves = [x.clone().requires_grad_() for x in series]
    values = {k: x.clone().requires_grad_() if x.is_floating_point() else x for k, x in values.items()}
    coefs = {k: x.clone().requires_grad_() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
             for k, x in kwargs.items() if k in ("gamma", "lmbda")}
    rest = {k: x for k, x in kwargs.items() if k not in coefs}
    outs = op(*leaves, **values, **coefs, **rest)
    outs = outs if isinstance(outs, tuple) else (outs,)
    inputs = [x for x in leaves + list(values.values()) + list(coefs.values()) if isinstance(x, torch.Tensor) and x.requires_grad]
    torch.autograd.grad(outs, inputs, [torch.ones_like(o) for o in outs], allow_unused=True)


SETTINGS = [
    ("scan", dict(kind="scan", block_t=32, block_b=8, num_warps=4)),
    ("scan chunked", dict(kind="scan", block_t=16, block_b=8, num_warps=4, n_chunks=3)),
    ("stripe", dict(kind="stripe", stripes=4, steps=4, block_b=8, num_warps=1)),
    ("stripe chunked", dict(kind="stripe", stripes=2, steps=4, block_b=8, num_warps=1, n_chunks=3)),
    ("scan pipelined", dict(kind="scan", block_t=16, block_b=8, num_warps=4, stages=3, unroll=2)),
    ("block", dict(kind="block", stripes=4, steps=4, block_b=8, num_warps=1)),
    ("block chunked", dict(kind="block", stripes=2, steps=8, block_b=16, num_warps=1, n_chunks=3)),
    ("chained", dict(kind="chained", stripes=2, steps=4, block_b=8, num_warps=1)),
    ("chained look-back", dict(kind="chained", stripes=1, steps=2, block_b=16, num_warps=1, test_lookback=True)),
    ("chained window", dict(kind="chained", stripes=1, steps=8, block_b=16, num_warps=1, lookback=4)),
    ("chained 16 steps", dict(kind="chained", stripes=1, steps=16, block_b=8, num_warps=1, lookback=4)),
    ("chained two per thread", dict(kind="chained", stripes=1, steps=2, block_b=64, num_warps=1, lookback=4)),
    ("chained stripes", dict(kind="chained", stripes=64, steps=8, block_b=16, num_warps=8, step_scan="shuffles")),
    ("chained stripe passes", dict(kind="chained_stripe", stripes=2, steps=4, block_b=16, num_warps=1, lookback=4)),
    ("chained words", dict(kind="chained", stripes=1, steps=8, block_b=128, num_warps=1, lookback=4, link="words")),
    ("chained stripe words", dict(kind="chained_stripe", stripes=4, steps=4, block_b=16, num_warps=4, lookback=4,
                                  link="words")),
    ("chained scan words", dict(kind="chained_scan", block_t=256, block_b=1, num_warps=1, lookback=64, link="words")),
    ("chained scan", dict(kind="chained_scan", block_t=64, block_b=4, num_warps=2, lookback=4)),
    ("block by shuffles", dict(kind="block", stripes=2, steps=4, block_b=8, num_warps=1, step_scan="shuffles")),
    ("stripe pipelined", dict(kind="stripe", stripes=1, steps=1, block_b=32, num_warps=1, stages=4, n_chunks=3)),
    ("scan row tiles", dict(kind="scan", block_t=1024, block_b=1, num_warps=8)),
]


def _compile_whitening():
    """rlscan.masked_whiten's two kernels (launched directly, not through a launch plan)."""
    from rlscan._triton import whiten as W

    import triton.language as tl

    x, m, parts, stats = torch.randn(5000), torch.ones(5000, dtype=torch.uint8), torch.empty(9), torch.zeros(2)
    for dtype, acc in ((torch.float32, tl.float32), (torch.bfloat16, tl.float32), (torch.float64, tl.float64)):
        xs = x.to(dtype)
        for fn, args, kw in ((W.block_stats, (xs, m, parts.to(xs.dtype if dtype == torch.float64 else torch.float32),
                                              5000, 3), {}),
                             (W.apply, (xs, xs, stats, 5000), dict(SHIFT=True))):
            try:
                compile_only(fn, (2,), args, dict(kw, BLOCK=W.BLOCK, ACC=acc, num_warps=8))
            except Exception as exc:  # noqa: BLE001
                failures.append(f"masked_whiten {fn.__name__} {dtype}: {type(exc).__name__}: {exc}"[:400])


def main():
    if "--wide" in sys.argv:  # every launch takes its 64-bit offset path (inputs past 2**31 elements)
        L._reach = lambda x: 2**31
    L.LaunchPlan._first_launch = lambda self, phase, args: compile_only(
        self.fn, self.grid[:2], args, dict(self.constexprs, PHASE=phase, **self.options))
    from rlscan.ops.retrace import table

    table.TablePlan._launch = lambda self, args: compile_only(  # retrace_from_q's prologue
        table.table_prologue_kernel, self.grid[:1], args, dict(self.constexprs, num_warps=4))
    import rlscan._backend as backend

    backend.path_for = lambda device_type, what="": "triton"
    import rlscan.whiten
    from rlscan.ops.gae import one_pass

    rlscan.whiten.apply_whitening = lambda x, sums: x  # it launches directly (compiled below)
    _compile_whitening()
    only = os.environ.get("COMPILE_ONLY", "")
    for name, call in cases().items():
        if only not in name:
            continue
        for setting, forced in SETTINGS + [("exact", None)]:
            L._PLANS.clear()
            try:
                if forced is None:
                    call(exact=True)
                else:
                    with L.forced_config(**forced):
                        call()
            except Exception as exc:  # noqa: BLE001
                msg = str(exc).strip().splitlines()
                failures.append(f"{name} [{setting}]: {type(exc).__name__}: {msg[-1] if msg else ''}"[:400])
            if one_pass._failed:  # the one pass falls back to two scans on failure: a failure here
                failures.append(f"{name} [{setting}]: one pass: {one_pass._failed[-1]}"[:400])
                one_pass._failed.clear()
    print(f"compiled {compiled} kernels for sm_90; {len(failures)} failures")
    for f in failures:
        print("  FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
