"""``rlscan.gae(..., value_lmbda=)`` against the two single-λ calls it replaces (the advantages
of ``gae(lmbda=λ)``, the returns of ``gae(lmbda=λ_value)``, as NeMo-RL runs GAE twice for VAPO's
decoupled λ), side by side in one run, as a markdown table::

    python tools/dual_lambda_timing.py                 # CPU: 256 x 4096 and 64 x 32768
    python tools/dual_lambda_timing.py --device cuda   # the same on the GPU
    python tools/dual_lambda_timing.py --threads 1     # CPU: the serial loops only (less noise)
    python tools/dual_lambda_timing.py --dry           # tiny shapes: checks the script

Float32 rewards (a small term on every token, a score at EOS) and values, a bool response
mask with EOS padding, ``γ = 1``, ``λ = 0.95``, ``λ_value = 1``, with and without
``whiten``. The results are checked first: on the CPU bit for bit against the two calls, on
the GPU against them within float32 tolerance. Times are medians of ``CALLS`` calls after
a warm-up long enough for each CPU runner to have picked its loop's serial or parallel
version (``rlscan._cpu._Versions``), the three ways interleaved call by call; "one call" is a single-λ call, the floor
of any two-output form that reads the inputs once. The machine's other work moves every
figure: compare ratios from one run.
"""
from __future__ import annotations

import argparse
import statistics

import torch

import rlscan
from rlscan._cpu import RECENT
from timed_rounds import rounds

GAMMA, LMBDA, VALUE_LMBDA = 1.0, 0.95, 1.0


def batch(B: int, T: int, device: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    rewards = -0.01 * torch.rand(B, T, generator=g)
    rewards[torch.arange(B), lengths - 1] += torch.randn(B, generator=g)
    values = torch.randn(B, T, generator=g)
    return rewards.to(device), values.to(device), mask.to(device)


def ways(rewards, values, mask, whiten: bool) -> dict:
    kwargs = dict(mask=mask, gamma=GAMMA, time_dim=1)

    def one_call():
        return rlscan.gae(rewards, values, **kwargs, lmbda=LMBDA, whiten=whiten)

    def two_calls():
        advantages = rlscan.gae(rewards, values, **kwargs, lmbda=LMBDA, whiten=whiten).advantages
        return advantages, rlscan.gae(rewards, values, **kwargs, lmbda=VALUE_LMBDA).returns

    def dual():
        return tuple(rlscan.gae(rewards, values, **kwargs, lmbda=LMBDA, value_lmbda=VALUE_LMBDA, whiten=whiten))

    return {"one call": one_call, "two calls": two_calls, "value_lmbda": dual}


def check(fns: dict, device: str) -> None:
    got, want = fns["value_lmbda"](), fns["two calls"]()
    for a, b in zip(got, want):
        if device == "cpu":
            assert torch.equal(a, b), "value_lmbda is not the two calls' bits"
        else:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(b.abs().max())))


def timed(fns: dict, calls: int, device: str) -> dict:
    """``{name: median ms}``: untimed first calls (they compile, and time each loop's serial and
    parallel versions), then ``calls`` rounds that take turns."""
    sync = torch.cuda.synchronize if device == "cuda" else None
    times = rounds(fns, calls, warm=2 * RECENT + 4, sync=sync)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=None, help="numba's threads (1: the serial loops only)")
    parser.add_argument("--dry", action="store_true", help="tiny shapes, few calls: checks the script")
    args = parser.parse_args()
    if args.threads is not None:
        import numba

        numba.set_num_threads(args.threads)
    shapes = [(4, 64), (2, 256)] if args.dry else [(256, 4096), (64, 32768)]
    calls = 3 if args.dry else 15
    if args.device == "cuda":
        rlscan.set_backend("triton")
    print(f"device: {torch.cuda.get_device_name() if args.device == 'cuda' else 'CPU'}, "
          f"{rlscan._cpu.cpu_threads()} loop threads; γ = {GAMMA}, λ = {LMBDA}, λ_value = {VALUE_LMBDA}; "
          f"median of {calls} calls, ms\n")
    print("| B x T | whiten | one call (λ) | two calls (λ, λ_value) | value_lmbda | value_lmbda / two calls "
          "| value_lmbda / one call |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for B, T in shapes:
        rewards, values, mask = batch(B, T, args.device)
        for whiten in (False, True):
            fns = ways(rewards, values, mask, whiten)
            check(fns, args.device)
            ms = timed(fns, calls, args.device)
            one, two, dual = ms["one call"], ms["two calls"], ms["value_lmbda"]
            print(f"| {B} x {T} | {whiten} | {one:.2f} | {two:.2f} | {dual:.2f} | {dual / two:.2f} | "
                  f"{dual / one:.2f} |")


if __name__ == "__main__":
    main()
