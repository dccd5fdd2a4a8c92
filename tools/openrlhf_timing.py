"""OpenRLHF's two token loops on the CPU, where its experience maker runs them: OpenRLHF's
own ``RemoteExperienceMaker.get_advantages_and_returns`` and ``get_cumulative_returns``
against rlscan.adapters.openrlhf, with the copy floor measured in the same run::

    python tools/openrlhf_timing.py          # 256 x 4096 and 64 x 32768
    python tools/openrlhf_timing.py --dry    # tiny shapes: checks the script

Float32 rewards (a KL-style term on every token, the score at EOS) and values, a bool
action mask with EOS padding, γ = 1 and λ = 0.95 as OpenRLHF's defaults. OpenRLHF's loop
costs the same for each step, so beyond ``LOOP_T`` steps it is timed on the first ``LOOP_T``
and scaled by ``T / LOOP_T`` (the table says so). Results are checked first, bit for bit.
Times are medians of ``CALLS`` calls after a first one, rounds interleaved; the copy floor
is the bytes each call must move over ``Tensor.copy_``'s rate (``rlscan.bench.floors``).
The machine's other work moves every figure: compare ratios from one run.

:func:`experience_maker` imports OpenRLHF's class where its CUDA-only imports (flash-attn,
DeepSpeed, vLLM) are not installed; ``integration_tests/test_openrlhf.py`` uses it too, and
``integration_tests/openrlhf_plugin.py`` uses :func:`cuda_stand_ins` to run OpenRLHF's own tests.
"""
from __future__ import annotations

import sys

import torch

from stand_ins import Empty, stand_ins
from timed_rounds import median_s

CUDA_ONLY = ("flash_attn", "deepspeed", "vllm")
DRY = "--dry" in sys.argv
SHAPES = [(4, 64), (2, 256)] if DRY else [(256, 4096), (64, 32768)]
LOOP_T = 64 if DRY else 4096
CALLS, LOOP_CALLS = (3, 1) if DRY else (15, 3)
GAMMA, LAMBD = 1.0, 0.95


class _CudaOnly(Empty):
    why = "a CUDA-only module, not installed here"


def cuda_stand_ins():
    """Within it, importing flash-attn, DeepSpeed or vLLM, where they are not installed, gives an
    empty module of that name (modules imported meanwhile keep theirs)."""
    return stand_ins(CUDA_ONLY, _CudaOnly)


def experience_maker():
    """OpenRLHF's ``RemoteExperienceMaker`` class from the installed wheel. Its module imports
    flash-attn, DeepSpeed and vLLM, which ship CUDA builds only and which neither loop calls:
    where they are missing, the import meets an empty module of that name."""
    with cuda_stand_ins():
        from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    return RemoteExperienceMaker


def batch(B: int, T: int, seed: int = 0):
    """``(rewards, values, action_mask)`` as the module docstring says."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    rewards = -0.01 * torch.rand(B, T, generator=g)
    rewards[torch.arange(B), lengths - 1] += torch.randn(B, generator=g)
    return rewards, torch.randn(B, T, generator=g), mask


def loops(maker) -> dict:
    """``{name: (rlscan's, OpenRLHF's)}``, each a function of ``(rewards, values, mask)``."""
    from rlscan.adapters import openrlhf

    return {"gae": (lambda r, v, m: openrlhf.get_advantages_and_returns(v, r, m, GAMMA, LAMBD),
                    lambda r, v, m: maker.get_advantages_and_returns(None, v, r, m, GAMMA, LAMBD)),
            "reinforce": (lambda r, v, m: openrlhf.get_cumulative_returns(r, m, GAMMA),
                          lambda r, v, m: maker.get_cumulative_returns(None, r, m, GAMMA))}


def _outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def main() -> int:
    from rlscan.bench import floors

    maker = experience_maker()
    bandwidth = floors.measure(torch.device("cpu"), quick=DRY).bandwidth
    rows, bad = [], False
    for B, T in SHAPES:
        rewards, values, mask = batch(B, T)
        T_loop = min(T, LOOP_T)
        full = (rewards, values, mask)
        prefix = tuple(x[:, :T_loop].contiguous() for x in full)
        # bytes: rewards (and values) and the mask read, the products written and read, the outputs written
        moved = {"gae": B * T * (4 + 4 + 1 + 2 * 2 * 4 + 2 * 4), "reinforce": B * T * (4 + 1 + 2 * 4 + 4)}
        for name, (ours, theirs) in loops(maker).items():
            same = all(torch.equal(w, x) for w, x in zip(_outputs(theirs(*prefix)), _outputs(ours(*prefix))))
            bad |= not same
            ours(*full)  # the first call at this shape compiles
            loop_s = median_s(lambda: theirs(*prefix), LOOP_CALLS) * T / T_loop
            rlscan_s = median_s(lambda: ours(*full), CALLS)
            floor_s = moved[name] / bandwidth
            rows.append((name, f"{B} × {T}", "ok" if same else "BAD", loop_s, T > T_loop, rlscan_s, floor_s))
            print(f"{name:10s} {B} x {T}: OpenRLHF {loop_s * 1e3:,.1f} ms, rlscan {rlscan_s * 1e3:,.2f} ms",
                  flush=True)
    print("\n| loop | B × T | same | OpenRLHF | rlscan | × OpenRLHF | copy floor | rlscan / floor |")
    print("|---|---|---|---|---|---|---|---|")
    for name, shape, same, loop_s, scaled, rlscan_s, floor_s in rows:
        print(f"| {name} | {shape} | {same} | {loop_s * 1e3:,.1f} ms{' *' if scaled else ''} | "
              f"{rlscan_s * 1e3:,.2f} ms | {loop_s / rlscan_s:,.0f} | {floor_s * 1e3:,.2f} ms | "
              f"{rlscan_s / floor_s:.2f} |")
    print(f"\n* timed on the first {LOOP_T} steps and scaled by T / {LOOP_T}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
