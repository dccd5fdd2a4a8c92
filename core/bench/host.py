"""``rlscan bench --host``: what a call costs the host around the kernel, as ratios from one run.

* eager / compiled: ``f(r, v, d, last) = rlscan.gae(r, v, bootstrap_value=last,
  terminated=d)`` called back to back, eagerly and under ``torch.compile(fullgraph=True)``
  (default mode; on CUDA also ``mode="reduce-overhead"``), each next to a torch graph with
  the same inputs and outputs compiled the same way (the twin: torch's own cost per
  compiled call, which rlscan cannot remove). rlscan's share is the difference, split into
  the guards that tracing ``rlscan.gae`` adds and the op's node (the custom op compiled
  alone, against the twin). On CUDA also
  LeanRL's pattern: ``gae`` compiled and wrapped in tensordict's ``CudaGraphModule``, for
  rlscan's one line (``rlscan.adapters.cleanrl.gae``), LeanRL's own loop and the twin.
* autograd: the forward without grad, the forward that records for backward, and forward +
  ``torch.autograd.grad``, against ``torch.cumsum``'s forward + backward on the same tensors,
  against an autograd function that computes nothing (torch's own cost of one), and against
  the same call differentiating GAE's torch form instead of running its backward scan.
* cpu: the CPU path's full call at a tiny shape (its per-call overhead), Stable-Baselines3's
  ``compute_returns_and_advantage`` against rlscan's buffer (bit for bit checked), and every
  op at a large shape against the numpy loop and the copy-bandwidth floor, with fresh outputs
  and into ``out=`` buffers written before (fresh memory costs the kernel's page zeroing,
  which a copy into a used buffer does not pay), and GAE's, V-trace's and Retrace's
  forward + backward there.

Every time is the best of ``repeat`` rounds of back-to-back calls (wall clock, one
synchronize per round), the rounds of the calls compared interleaved. Every ratio divides
two times of this run.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from . import cases, floors, loops, timing

SB3_SHAPES = ((2048, 8), (128, 8))  # (n_steps, n_envs)


def _inputs(N: int, T: int, device) -> tuple:
    gen = torch.Generator(device=device).manual_seed(0)
    r = torch.randn(T, N, generator=gen, device=device)
    v = torch.randn(T, N, generator=gen, device=device)
    d = torch.rand(T, N, generator=gen, device=device) < 0.01
    last = torch.randn(N, generator=gen, device=device)
    return r, v, d, last


def _gae(r, v, d, last):
    import rlscan

    return rlscan.gae(r, v, bootstrap_value=last, terminated=d)


def _gae_op_alone(r, v, d, last):
    """``_gae``'s custom op with the arguments ``rlscan.gae`` passes it here (the tensors in
    the op's input order, then γ, λ and γλ): a compiled graph of this holds the same node
    as ``_gae``'s, without the guards that tracing ``rlscan.gae``'s Python adds."""
    return tuple(torch.ops.rlscan.gae.default([r, v, None, last, d, None, None, None], [0.99, 0.95, 0.99 * 0.95],
                                              0, False, None))


def _torch_twin(r, v, d, last):
    """A torch graph with ``_gae``'s inputs and outputs and one cheap op per output: what a
    compiled or CUDA-graphed call costs torch itself (guards, input copies, outputs)."""
    return torch.where(d, r, v), r + last


def _leanrl_loop(r, v, dones, next_value, next_done, gamma: float = 0.99, lmbda: float = 0.95):
    """LeanRL's compiled GAE loop, in its semantics: ``dones[t]`` is set when ``obs[t]``
    started an episode, ``next_done`` for the observation after the window; the steps are
    unbound, and the advantages stacked at the end."""
    nonterminal = (~dones).float().unbind(0)
    values, rewards = v.unbind(0), r.unbind(0)
    advantages, running = [], torch.zeros_like(next_value)
    next_nonterminal, next_v = (~next_done).float(), next_value
    for t in range(r.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * next_v * next_nonterminal - values[t]
        running = delta + gamma * lmbda * next_nonterminal * running
        advantages.append(running)
        next_nonterminal, next_v = nonterminal[t], values[t]
    adv = torch.stack(advantages[::-1])
    return adv, adv + v


def _leanrl_rlscan(r, v, dones, next_value, next_done, gamma: float = 0.99, lmbda: float = 0.95):
    """The same GAE in one line: ``rlscan.adapters.cleanrl.gae`` (docs/adapters/cleanrl.md)."""
    from ..adapters.cleanrl import gae

    return tuple(gae(r, v, dones, next_value, next_done, gamma, lmbda))


def _time_together(fns: dict, sync, repeat: int, target_s: float = 0.01) -> dict:
    """Seconds per call of each function: the best of ``repeat`` rounds, the functions' rounds
    interleaved, so that the host's slow spells (its speed varies up to 2× within a minute)
    fall on all of them alike."""
    once = {}
    for name, fn in fns.items():
        for _ in range(3):
            fn()
        once[name] = timing.timed_once(fn, sync)[1]
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(max(1, repeat)):
        for name, fn in fns.items():
            round_s = timing.full_call(fn, sync, one_call_s=once[name], target_s=target_s, repeat=1).seconds
            best[name] = min(best[name], round_s)
    return best


def _compiled(fn, kw: dict, args: tuple, sync):
    """``(compiled fn, its first result, compile seconds)``."""
    start = time.perf_counter()
    compiled = torch.compile(fn, **kw)
    got = tuple(x.clone() for x in compiled(*args))  # a CUDA graph's replays overwrite its outputs
    sync()
    return compiled, got, time.perf_counter() - start


def compiled_section(p, device, N: int, T: int, repeat: int) -> dict:
    """rlscan's call compiled in each mode, next to the torch twin compiled the same way: the
    op's share of a compiled call is the difference, set against the eager call."""
    sync = timing.synchronizer(device)
    args = _inputs(N, T, device)
    out = {"shape": [N, T]}
    modes = [("compiled_default", dict(fullgraph=True))]
    if device.type == "cuda":
        modes.append(("compiled_reduce_overhead", dict(fullgraph=True, mode="reduce-overhead")))
    expected = _gae(*args)
    fns = {"eager": lambda: _gae(*args)}
    for name, kw in modes:
        try:
            ours, got, compile_s = _compiled(_gae, kw, args, sync)
            twin, _, _ = _compiled(_torch_twin, kw, args, sync)
        except Exception as ex:  # noqa: BLE001 - a mode that fails to compile is reported, the run goes on
            out[name] = {"status": f"failed: {type(ex).__name__}: {str(ex)[:160]}"}
            p.line(f"host · {name}: failed ({type(ex).__name__})", style="yellow")
            continue
        if not all(torch.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(got, expected)):
            out[name] = {"status": "WRONG"}
            p.line(f"host · {name}: WRONG result", style="bold red")
            continue
        out[name] = {"status": "ok", "compile_s": compile_s}
        fns[name] = lambda f=ours: f(*args)
        fns[name + "_twin"] = lambda f=twin: f(*args)
        if name == "compiled_default":
            try:
                alone, got, _ = _compiled(_gae_op_alone, kw, args, sync)
            except Exception as ex:  # noqa: BLE001 - the split is left out, the run goes on
                p.line(f"host · the custom op alone: failed ({type(ex).__name__}), not timed", style="yellow")
                continue
            if all(torch.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(got, expected)):
                fns["op_alone"] = lambda f=alone: f(*args)
            else:  # the op's arguments are not the ones written in _gae_op_alone any more
                p.line("host · the custom op alone: WRONG result, not timed", style="bold red")
    t = _time_together(fns, sync, repeat)
    eager = t["eager"]
    out["eager_us"] = eager * 1e6
    p.line(f"host · eager gae {N}×{T}: {eager * 1e6:.1f} µs/call")
    for name, _ in modes:
        if name not in fns:
            continue
        share = t[name] - t[name + "_twin"]
        out[name].update(us=t[name] * 1e6, over_eager=t[name] / eager, torch_twin_us=t[name + "_twin"] * 1e6,
                         op_share_us=share * 1e6, op_share_over_eager=share / eager)
        p.line(f"host · {name}: {t[name] * 1e6:.1f} µs/call (compile {out[name]['compile_s']:.1f} s); the torch twin "
               f"{t[name + '_twin'] * 1e6:.1f} µs; rlscan's share {share * 1e6:.1f} µs, ×{share / eager:.2f} the eager call")
        if name == "compiled_default" and "op_alone" in t:
            alone = t["op_alone"]
            guards, node = t[name] - alone, alone - t[name + "_twin"]
            out[name].update(op_alone_us=alone * 1e6, guards_us=guards * 1e6, op_node_us=node * 1e6)
            p.line(f"host · {name}: the custom op alone compiled {alone * 1e6:.1f} µs/call, so the guards of "
                   f"rlscan's traced Python {guards * 1e6:.1f} µs and the op's node {node * 1e6:.1f} µs over the twin's")
    if device.type == "cuda":
        out["leanrl"] = leanrl_section(p, device, N, T, repeat)
    return out


def leanrl_section(p, device, N: int, T: int, repeat: int) -> dict:
    """LeanRL's pattern: ``gae`` compiled with ``fullgraph=True`` and wrapped in tensordict's
    ``CudaGraphModule``, for rlscan's one line, LeanRL's loop and the torch twin; each result
    checked against the loop in float64, compile time included."""
    try:
        from tensordict.nn import CudaGraphModule
    except ImportError:
        return {"status": "skipped: tensordict is not installed"}
    sync = timing.synchronizer(device)
    r, v, dones, next_value = _inputs(N, T, device)
    next_done = torch.rand(N, device=device) < 0.01
    args = (r, v, dones, next_value, next_done)
    truth = _leanrl_loop(*(x.double() if x.is_floating_point() else x for x in args))
    out, fns = {}, {}
    for name, fn, fn_args in (("rlscan", _leanrl_rlscan, args), ("loop", _leanrl_loop, args),
                              ("torch_twin", _torch_twin, (r, v, dones, next_value))):
        start = time.perf_counter()
        try:
            graphed = CudaGraphModule(torch.compile(fn, fullgraph=True), warmup=3)
            for _ in range(5):
                got = tuple(x.clone() for x in graphed(*fn_args))
            sync()
        except Exception as ex:  # noqa: BLE001
            out[name] = {"status": f"failed: {type(ex).__name__}: {str(ex)[:160]}"}
            p.line(f"host · LeanRL {name}: failed ({type(ex).__name__})", style="yellow")
            continue
        out[name] = {"status": "ok", "compile_s": time.perf_counter() - start}
        fns[name] = lambda g=graphed, a=fn_args: g(*a)
        if name != "torch_twin":
            err = max(float((a.double() - b).norm() / b.norm().clamp_min(1e-30)) for a, b in zip(got, truth))
            out[name].update(status="ok" if err < 1e-4 else "WRONG", rel_err=err)
    for name, t in _time_together(fns, sync, repeat).items():
        out[name]["us"] = t * 1e6
        p.line(f"host · LeanRL {name} (compiled + CudaGraphModule): {t * 1e6:.1f} µs/call, compile "
               f"{out[name]['compile_s']:.1f} s" + (f", rel err {out[name]['rel_err']:.1e}" if "rel_err" in out[name] else ""))
    if all(out.get(k, {}).get("status") == "ok" for k in ("rlscan", "loop")):
        out["loop_over_rlscan"] = out["loop"]["us"] / out["rlscan"]["us"]
    return out


class _EmptyFunction(torch.autograd.Function):
    """An autograd function with GAE's call shape (four options, eight tensor slots, two
    outputs saved with the inputs) that computes nothing: forward allocates the outputs,
    backward the inputs' gradients. What any Python autograd function costs torch."""

    @staticmethod
    def forward(ctx, call, op, scalars, exact, *tensors):
        outs = (torch.empty_like(tensors[0]), torch.empty_like(tensors[0]))
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*tensors, *outs)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensors[:-2]
        return (None,) * 4 + tuple(torch.empty_like(x) if need else None
                                   for x, need in zip(saved, ctx.needs_input_grad[4:]))


def autograd_section(p, device, N: int, T: int, repeat: int) -> dict:
    """rlscan's GAE recording for backward, and forward + backward, next to ``torch.cumsum``'s,
    to :class:`_EmptyFunction`'s (torch's own cost of a Python autograd function) and to the
    same forward + backward differentiating the op's torch form (what a backward costs where
    the backward scan cannot run)."""
    from .._autograd import differentiating_torch_forms

    sync = timing.synchronizer(device)
    r, v, d, last = _inputs(N, T, device)
    rg, vg = r.clone().requires_grad_(), v.clone().requires_grad_()
    g = torch.ones_like(r)

    def no_grad():
        with torch.no_grad():
            return _gae(rg, vg, d, last)

    def recording():
        return _gae(rg, vg, d, last)

    def fwd_bwd():
        adv, ret = _gae(rg, vg, d, last)
        return torch.autograd.grad((adv, ret), (rg, vg), grad_outputs=(g, g))

    def fwd_bwd_torch_form():
        with differentiating_torch_forms():
            return fwd_bwd()

    def cumsum_fwd_bwd():
        return torch.autograd.grad(torch.cumsum(rg, 0), rg, grad_outputs=g)

    def empty_recording():
        return _EmptyFunction.apply(None, None, (), False, rg, vg, None, last, d, None, None, None)

    def empty_fwd_bwd():
        return torch.autograd.grad(empty_recording(), (rg, vg), grad_outputs=(g, g))

    t = _time_together({"no_grad_fwd": no_grad, "recording_fwd": recording, "fwd_bwd": fwd_bwd,
                        "fwd_bwd_torch_form": fwd_bwd_torch_form, "cumsum_fwd_bwd": cumsum_fwd_bwd, "empty_function_recording": empty_recording,
                        "empty_function_fwd_bwd": empty_fwd_bwd}, sync, repeat)
    out = {"shape": [N, T], **{f"{k}_us": s * 1e6 for k, s in t.items()},
           "recording_over_no_grad": t["recording_fwd"] / t["no_grad_fwd"],
           "fwd_bwd_over_cumsum": t["fwd_bwd"] / t["cumsum_fwd_bwd"],
           "torch_form_over_fwd_bwd": t["fwd_bwd_torch_form"] / t["fwd_bwd"],
           "empty_function_fwd_bwd_over_cumsum": t["empty_function_fwd_bwd"] / t["cumsum_fwd_bwd"],
           "path": "triton fused backward" if device.type == "cuda" else "cpu: the loop forward, the backward loop"}
    p.line(f"host · autograd {N}×{T}: no-grad fwd {t['no_grad_fwd'] * 1e6:.1f} µs, recording fwd "
           f"{t['recording_fwd'] * 1e6:.1f} µs (×{out['recording_over_no_grad']:.2f}), fwd+bwd {t['fwd_bwd'] * 1e6:.1f} µs "
           f"vs cumsum fwd+bwd {t['cumsum_fwd_bwd'] * 1e6:.1f} µs (×{out['fwd_bwd_over_cumsum']:.2f}), through the torch form "
           f"{t['fwd_bwd_torch_form'] * 1e6:.1f} µs (×{out['torch_form_over_fwd_bwd']:.2f} the backward scan's); an empty autograd "
           f"function: recording {t['empty_function_recording'] * 1e6:.1f} µs, fwd+bwd "
           f"{t['empty_function_fwd_bwd'] * 1e6:.1f} µs (×{out['empty_function_fwd_bwd_over_cumsum']:.2f})")
    return out


def _sb3_buffers(T: int, N: int):
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer

    from ..adapters.sb3 import RLScanRolloutBuffer

    made = []
    for cls in (RolloutBuffer, RLScanRolloutBuffer):
        rng = np.random.default_rng(0)
        b = cls(T, spaces.Box(-1, 1, (3,)), spaces.Discrete(2), device="cpu", gamma=0.99, gae_lambda=0.95, n_envs=N)
        b.rewards[:] = rng.normal(size=(T, N))
        b.values[:] = rng.normal(size=(T, N))
        b.episode_starts[:] = rng.random((T, N)) < 0.01
        made.append(b)
    last = torch.from_numpy(np.random.default_rng(1).normal(size=(N, 1)).astype(np.float32))
    return made[0], made[1], last, np.zeros(N, dtype=bool)


def cpu_section(p, large: tuple, repeat: int, quick: bool) -> dict:
    import rlscan

    cpu = torch.device("cpu")
    sync = timing.synchronizer(cpu)
    out = {}
    with rlscan.use_backend("cpu"):
        r, v, d, last = _inputs(8, 16, cpu)
        rn, vn, dn, ln = (x.numpy() for x in (r, v, d, last))
        t = _time_together({"torch": lambda: _gae(r, v, d, last), "numpy": lambda: _gae(rn, vn, dn, ln)}, sync, repeat)
        call, call_np = t["torch"], t["numpy"]
        fl = floors.measure(cpu, quick)
        out["per_call_us"] = {"torch_8x16": call * 1e6, "numpy_8x16": call_np * 1e6,
                              "numba_empty_call": fl.detail.get("numba_call_us")}
        p.line(f"host · cpu per call at 8×16 (the overhead): torch {call * 1e6:.1f} µs, numpy {call_np * 1e6:.1f} µs")
        out["sb3"] = _sb3_ratios(p, repeat, sync)
        out["large"] = _large(p, large, repeat, sync, fl)
        out["large_backward"] = _large_backward(p, large, repeat, sync)
    return out


def _sb3_ratios(p, repeat: int, sync) -> dict:
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return {"status": "skipped: stable-baselines3 is not installed"}
    out = {}
    for T, N in SB3_SHAPES:
        sb3, ours, last, dones = _sb3_buffers(T, N)
        sb3.compute_returns_and_advantage(last, dones)
        ours.compute_returns_and_advantage(last, dones)
        bitwise = bool(np.array_equal(sb3.advantages, ours.advantages) and np.array_equal(sb3.returns, ours.returns))
        t = _time_together({"sb3": lambda: sb3.compute_returns_and_advantage(last, dones),
                            "ours": lambda: ours.compute_returns_and_advantage(last, dones)}, sync, repeat, target_s=0.02)
        t_sb3, t_ours = t["sb3"], t["ours"]
        out[f"{T}x{N}"] = {"sb3_us": t_sb3 * 1e6, "rlscan_us": t_ours * 1e6, "speedup": t_sb3 / t_ours,
                           "bitwise": bitwise}
        p.line(f"host · sb3 buffer {T}×{N} (n_steps × n_envs): SB3 {t_sb3 * 1e6:.0f} µs, rlscan {t_ours * 1e6:.1f} µs, "
               f"×{t_sb3 / t_ours:.0f}, bit for bit {bitwise}")
    return out


def _large(p, shape: tuple, repeat: int, sync, fl) -> dict:
    import rlscan

    N, T = shape
    out = {"shape": [N, T], "copy_bandwidth_GBps": fl.bandwidth / 1e9}
    for name, case in cases.CASES.items():
        d = cases.make_inputs(case, T, N, torch.float32, "tn", torch.device("cpu"))
        got = cases.outputs_of(case.call(rlscan, d))
        dn = {k: x.numpy() for k, x in d.items()}
        loop = loops.LOOPS[name]
        want = loop(dn, case.params, loops.NumpyOps)
        given = tuple(torch.empty_like(x) for x in got)
        given = given if len(given) > 1 else given[0]
        into = cases.outputs_of(case.call(rlscan, d, out=given))  # this check touches every page of out=
        err = max(float(np.linalg.norm(a.numpy() - b) / max(np.linalg.norm(b), 1e-30))
                  for outs in (got, into) for a, b in zip(outs, want))
        t = _time_together({"rlscan": lambda: case.call(rlscan, d), "rlscan_out": lambda: case.call(rlscan, d, out=given),
                            "loop": lambda: loop(dn, case.params, loops.NumpyOps)}, sync, repeat, target_s=0.02)
        t_rl, t_out, t_np = t["rlscan"], t["rlscan_out"], t["loop"]
        floor = cases.moved_bytes(d, len(got), T, N, torch.float32) / fl.bandwidth
        serial, parallel = _loop_versions_run(name)
        out[name] = {"rlscan_us": t_rl * 1e6, "rlscan_out_us": t_out * 1e6, "numpy_loop_us": t_np * 1e6,
                     "floor_us": floor * 1e6, "over_numpy_loop": t_np / t_rl, "over_floor": t_rl / floor,
                     "out_over_floor": t_out / floor, "rel_err_vs_numpy_loop": err,
                     "serial_loop_calls": serial, "parallel_loop_calls": parallel}
        p.line(f"host · cpu {name} {N}×{T}: {t_rl * 1e3:.2f} ms, ×{t_np / t_rl:.2f} the numpy loop, "
               f"{t_rl / floor:.2f}× the copy floor; into out= buffers {t_out * 1e3:.2f} ms, "
               f"{t_out / floor:.2f}× (rel diff {err:.0e}); the parallel loop ran {parallel} of "
               f"{serial + parallel} calls")
        del d, dn, got, want, given, into
    return out


def _loop_versions_run(name: str) -> tuple:
    """``(serial, parallel)``: how many calls of op ``name``'s CPU runners ran each version of
    the loop (each runner times both and runs the faster, ``_cpu._Versions``)."""
    from .. import _cpu

    runs = [r.versions.runs for r in _cpu.cached_runners()
            if r.op.name in (name, name + "_reverse") and r.versions is not None]
    return sum(r[0] for r in runs), sum(r[1] for r in runs)


BACKWARD_OPS = ("gae", "vtrace", "retrace")


def _large_backward(p, shape: tuple, repeat: int, sync) -> dict:
    """Forward + backward of :data:`BACKWARD_OPS` at ``shape``, against the no-grad forward:
    the gradient of ``sum()`` of the outputs (broadcast, as a loss's mean or sum hands it
    down), and a dense gradient."""
    import rlscan

    N, T = shape
    out = {"shape": [N, T]}
    for name in BACKWARD_OPS:
        case = cases.CASES[name]
        d = cases.make_inputs(case, T, N, torch.float32, "tn", torch.device("cpu"))
        leaves = [d[k].requires_grad_() for k in case.series if d[k].is_floating_point()]
        dense = [torch.randn_like(x) for x in cases.outputs_of(case.call(rlscan, d))]

        def forward():
            with torch.no_grad():
                return case.call(rlscan, d)

        def of_sum():
            return torch.autograd.grad(sum(x.sum() for x in cases.outputs_of(case.call(rlscan, d))), leaves)

        def of_dense():
            return torch.autograd.grad(cases.outputs_of(case.call(rlscan, d)), leaves, dense)

        t = _time_together({"fwd": forward, "sum": of_sum, "dense": of_dense}, sync, repeat, target_s=0.02)
        out[name] = {"fwd_us": t["fwd"] * 1e6, "fwd_bwd_of_sum_us": t["sum"] * 1e6,
                     "fwd_bwd_dense_us": t["dense"] * 1e6}
        p.line(f"host · cpu {name} {N}×{T} forward + backward: of sum() {t['sum'] * 1e3:.2f} ms, "
               f"of a dense gradient {t['dense'] * 1e3:.2f} ms (the forward alone {t['fwd'] * 1e3:.2f} ms)")
        del d, leaves, dense
    return out


def run(p, device, shape: tuple, large: tuple, repeat: int, quick: bool, deadline: float = float("inf")) -> dict:
    """The host section: ``shape`` (N, T) for eager/compiled/autograd, ``large`` for the CPU grid;
    a part does not start past ``deadline`` (``time.perf_counter()``), and is listed in ``not_run``."""
    N, T = shape
    started = time.perf_counter()
    doc = {"method": __doc__.split("\n\n", 1)[1].strip(), "repeat": repeat}
    parts = (("compiled", lambda: compiled_section(p, device, N, T, repeat)),
             ("autograd", lambda: autograd_section(p, device, N, T, repeat)),
             ("cpu", lambda: cpu_section(p, large, repeat, quick)))
    for name, part in parts:
        if time.perf_counter() > deadline:
            doc.setdefault("not_run", []).append(name)
            p.line(f"host · {name}: not run, past the budget", style="yellow")
            continue
        doc[name] = part()
    doc["elapsed_s"] = time.perf_counter() - started
    return doc

