"""Issue 18, ``retrace_from_q``'s table prologue: the vector path for contiguous tables
(``FLAT_A``, core/ops/retrace/table.py) beside the prologue it replaced (kept below, only
here), on ``[N, T]`` float32 inputs with 4 and 18 actions. Each variant is checked against a
float64 truth first, then timed by device time (CUDA-graph replay of 20 calls): the whole
call, the prologue alone, and plain ``retrace`` on the same steps plus one read of the two
tables at copy bandwidth (the issue's target).

    python scripts/h200_retrace_table.py          # on the H200, about a minute; table last
    python scripts/h200_retrace_table.py ptx      # no GPU needed: the prologue's loads in sm_90 PTX
    TRITON_INTERPRET=1 python scripts/h200_retrace_table.py --dry   # the same steps on tiny CPU inputs, no timing
"""
from __future__ import annotations

import math
import os
import re
import sys

import triton
import triton.language as tl

SHAPES = ((4096, 128), (512, 2048), (4096, 2048), (16, 262144))


@triton.jit
def old_prologue_kernel(Q, sq, P, sp, ACT, s_act, MU, s_mu, QT, E, LR, s_out, T, B, B_lo,
                        ACC: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_A: tl.constexpr, TIME_FAST: tl.constexpr,
                        TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, FLAT_A: tl.constexpr):
    """The prologue before the vector path (``FLAT_A`` is ignored): every position's indices
    divided out of its flat number, the actions at runtime strides."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    if WIDE:
        p = tl.program_id(0).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    if WIDE:
        m = p < T.to(tl.int64) * B
    else:
        m = p < T * B
    if TIME_FAST:
        t = p % T
        b = p // T
    else:
        t = p // B
        b = p % B
    if TWO_LEVEL:
        b_hi = b // B_lo
        b_lo = b % B_lo
    else:
        b_hi = b * 0
        b_lo = b
    n_actions = sq[4]
    a = tl.load(ACT + t * s_act[0] + b_hi * s_act[1] + b_lo * s_act[2], mask=m, other=0)
    mu = tl.load(MU + t * s_mu[0] + b_hi * s_mu[1] + b_lo * s_mu[2], mask=m, other=0).to(ACC)
    valid = (a >= 0) & (a < n_actions)
    q_row = (t * sq[0] + b_hi * sq[1] + b_lo * sq[2])[:, None]
    p_row = (t * sp[0] + b_hi * sp[1] + b_lo * sp[2])[:, None]
    e = tl.zeros([BLOCK_P], ACC)
    q = tl.zeros([BLOCK_P], ACC)
    p_taken = tl.zeros([BLOCK_P], ACC)
    for a0 in range(0, n_actions, BLOCK_A):
        k = a0 + tl.arange(0, BLOCK_A)[None, :]
        mk = m[:, None] & (k < n_actions)
        qk = tl.load(Q + q_row + k * sq[3], mask=mk, other=0).to(ACC)
        pk = tl.load(P + p_row + k * sp[3], mask=mk, other=0).to(ACC)
        hit = k == a[:, None]
        e += tl.sum(qk * pk, axis=1)
        q += tl.sum(tl.where(hit, qk, 0), axis=1)
        p_taken += tl.sum(tl.where(hit, pk, 0), axis=1)
    zero = q * 0
    q = tl.where(valid, q, zero / zero)
    p_taken = tl.where(valid, p_taken, 1)
    off = t * s_out[0] + b_hi * s_out[1] + b_lo * s_out[2]
    tl.store(QT + off, q, mask=m)
    tl.store(E + off, e, mask=m)
    tl.store(LR + off, tl.log(p_taken) - mu, mask=m)


def load_counts(ptx: str) -> str:
    """Global loads by width, and integer divisions, in one kernel's PTX."""
    loads = re.findall(r"ld\.global(?:\.\w+)*", ptx)
    v4 = sum(".v4" in x for x in loads)
    v2 = sum(".v2" in x for x in loads)
    divs = len(re.findall(r"\b(?:div|rem)\.(?:s|u)(?:32|64)\b", ptx))
    scalar = len(loads) - v4 - v2
    return f"ld.global {len(loads):3d} (v4 {v4:3d}, v2 {v2:3d}, scalar {scalar:3d}), int div/rem {divs:3d}"


def ptx_report() -> int:
    """Compile both prologues for sm_90 (no GPU) at the four shapes' layouts and count loads."""
    os.environ.pop("TRITON_INTERPRET", None)
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile, make_backend
    from triton.runtime.jit import create_function_from_signature

    import rlscan
    import rlscan._backend as backend
    from rlscan._triton import launch as L
    from rlscan.ops.retrace import table

    target = GPUTarget("cuda", 90, 32)
    be = make_backend(target)

    def build(fn, args, kwargs):
        binder = create_function_from_signature(fn.signature, fn.params, be)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(be, kwargs, bound, specialization, options)
        return compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)

    seen = []
    table.TablePlan._launch = lambda self, args: seen.append((args, dict(self.constexprs, num_warps=4)))
    L.LaunchPlan._first_launch = lambda self, phase, args: None  # plain Retrace's scan: not inspected here
    backend.path_for = lambda device_type, what="": "triton"
    for layout in ("[N, T]", "[T, N]"):
        for A in (4, 18):
            N, T = 64, 128  # sizes divisible by 16, as the shapes are
            shape = (N, T) if layout == "[N, T]" else (T, N)
            r, mu = torch.randn(shape), torch.randn(shape)
            q_values, probs = torch.randn(shape + (A,)), torch.softmax(torch.randn(shape + (A,)), -1)
            actions = torch.randint(0, A, shape)
            L._PLANS.clear()
            seen.clear()
            rlscan.retrace_from_q(r, q_values, actions, probs, mu, bootstrap_value=torch.randn(N),
                                  time_dim=1 if layout == "[N, T]" else 0)
            args, kwargs = seen[0]
            for label, fn in (("old", old_prologue_kernel), ("new", table.table_prologue_kernel)):
                kernel = build(fn, args, kwargs)
                print(f"{layout} A={A:2d} {label}: {load_counts(kernel.asm['ptx'])}  (FLAT_A={kwargs['FLAT_A']})")
    return 0


def main() -> int:
    if sys.argv[1:] == ["ptx"]:
        return ptx_report()
    import torch

    import rlscan
    from rlscan._triton import launch as L
    from rlscan.bench import floors
    from rlscan.ops.retrace import table

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import h200_seed as seed
    from h200_explore import timed_device

    shapes, backend = SHAPES, rlscan.use_backend("triton")
    if "--dry" in sys.argv:  # through Triton's interpreter: every check, no meaningful time
        seed.DEV, shapes = torch.device("cpu"), ((3, 16), (2, 40))
        timed_device = lambda fn: (fn(), math.nan)[1]  # noqa: E731
        bw = 1e12
    else:
        bw = floors.measure(seed.DEV, quick=True).bandwidth
    with backend:
        return _ab(torch, rlscan, L, table, seed, timed_device, shapes, bw)


def _ab(torch, rlscan, L, table, seed, timed_device, shapes, bw) -> int:
    """The checks and timings of ``main``, then the table."""
    new_kernel = table.table_prologue_kernel
    seed.BW[0] = bw
    device = torch.cuda.get_device_name() if seed.DEV.type == "cuda" else "CPU (Triton's interpreter)"
    print(f"# {device}, torch {torch.__version__}, triton {triton.__version__}, "
          f"copy {bw / 1e12:.2f} TB/s", flush=True)
    rows = []
    for A in (4, 18):
        for N, T in shapes:
            name, args, kwargs = seed.problem("retrace_from_q", N, T, "nt", A)
            want = seed.truth(name, args, kwargs)
            call = lambda: rlscan.retrace_from_q(*args, **kwargs)  # noqa: E731
            row = dict(shape=f"A={A:2d} {N}x{T}")
            elements = table.ELEMENTS
            for label, kernel, block in (("old", old_prologue_kernel, elements), ("new", new_kernel, elements),
                                         ("new x2", new_kernel, 2 * elements)):  # x2: twice the actions per program
                table.table_prologue_kernel, table.ELEMENTS = kernel, block
                seed.fresh()
                err = seed.rel_err(seed.outputs(call()), want)
                if not err < 1e-4:
                    raise SystemExit(f"{row['shape']} {label}: relative error {err:.1e} against float64")
                row[label] = timed_device(call)
                plan = next(p for p in L._PLANS.values() if isinstance(p, table.TablePlan))
                row["flat"] = plan.constexprs["FLAT_A"]
                inner, plan.inner = plan.inner, lambda *a: None  # the prologue alone
                row[f"{label} prologue"] = timed_device(call)
                plan.inner = inner
            table.table_prologue_kernel, table.ELEMENTS = new_kernel, elements
            q_values, actions, probs, log_mu = args[1], args[2], args[3], args[4]
            q_t = q_values.gather(-1, actions[..., None])[..., 0]
            log_rho = probs.gather(-1, actions[..., None])[..., 0].log() - log_mu
            plain = (args[0], q_t, (q_values * probs).sum(-1), log_rho)
            seed.fresh()
            p_want = seed.truth("retrace", plain, kwargs)
            p_call = lambda: rlscan.retrace(*plain, **kwargs)  # noqa: E731
            err = seed.rel_err(seed.outputs(p_call()), p_want)
            if not err < 1e-4:
                raise SystemExit(f"{row['shape']} plain retrace: relative error {err:.1e} against float64")
            row["plain"] = timed_device(p_call)
            row["tables"] = 2 * q_values.numel() * 4 / bw * 1e6
            rows.append(row)
            print(f"  {row}", flush=True)
    print("\nretrace_from_q [N, T] float32, device us: old / new prologue (alone), whole call, "
          "target = plain retrace + tables at copy bandwidth")
    print(f"  {'shape':16s} {'old pro':>8s} {'new pro':>8s} {'x2 pro':>8s} {'old call':>9s} {'new call':>9s} "
          f"{'x2 call':>8s} {'plain':>7s} {'tables':>7s} {'new/target':>10s} {'new/old':>8s}")
    for r in rows:
        target = r["plain"] + r["tables"]
        print(f"  {r['shape']:16s} {r['old prologue']:8.1f} {r['new prologue']:8.1f} {r['new x2 prologue']:8.1f} "
              f"{r['old']:9.1f} {r['new']:9.1f} {r['new x2']:8.1f} {r['plain']:7.1f} {r['tables']:7.1f} "
              f"{r['new'] / target:10.2f} {r['new'] / r['old']:8.2f}   (FLAT_A {r['flat']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
