"""Launch settings for few environments and very long T (16 x 262144, 1 x 1,000,000, and
64 x 65536), side by side in one run: the heuristic's choice against more and fewer time
chunks and other tile shapes, by device time (CUDA-graph replay). Prints a table last.

    python scripts/h200_long.py
"""
from __future__ import annotations

import time

import torch

import rlscan
from rlscan._triton import launch as L

from h200_explore import timed_device as device_us  # noqa: E402 - this folder is on sys.path


def settings_for(N: int, T: int) -> dict:
    """Variants around the heuristic's choice: chunk counts, environment blocks, tile lengths."""
    out = {"heuristic": {}}
    for n_chunks in (256, 512, 1024, 2048, 4096):
        if N == 1:
            for block_t, warps in ((256, 4), (512, 4), (1024, 8)):
                out[f"scan 1x{block_t} w{warps} c{n_chunks}"] = dict(
                    kind="scan", block_b=1, block_t=block_t, num_warps=warps, n_chunks=n_chunks)
        else:
            for block_b in (4, 8, 16):
                if block_b > N:
                    continue
                out[f"scan {block_b}x256 c{n_chunks}"] = dict(kind="scan", block_b=block_b, block_t=256, num_warps=4,
                                                               n_chunks=n_chunks)
                out[f"stripe {block_b}x16x8 c{n_chunks}"] = dict(kind="stripe", block_b=block_b, stripes=16, steps=8,
                                                                  num_warps=4, n_chunks=n_chunks)
    return out


def main():
    dev = torch.device("cuda")
    rows = []
    for N, T in ((16, 262144), (1, 1_000_000), (64, 65536)):
        g = torch.Generator(device=dev).manual_seed(0)
        r, v = torch.randn(T, N, device=dev, generator=g), torch.randn(T, N, device=dev, generator=g)
        boot, term = torch.randn(N, device=dev, generator=g), torch.rand(T, N, device=dev, generator=g) < 0.01
        want = rlscan.gae(r.double(), v.double(), bootstrap_value=boot.double(), terminated=term, exact=True)
        floor_us = T * N * (4 + 4 + 1 + 4 + 4) / 4.06e12 * 1e6  # bytes moved over the copy bandwidth of run 5
        cfg = L.choose_config(T, N, False, False, dev)
        print(f"# {N}x{T}: heuristic {cfg}", flush=True)
        for label, forced in settings_for(N, T).items():
            with L.forced_config(**forced):
                fn = lambda: rlscan.gae(r, v, bootstrap_value=boot, terminated=term)  # noqa: E731
                got = fn()
                err = max(((a.double() - b).norm() / b.norm()).item() for a, b in zip(got, want))
                us = device_us(fn) if err < 1e-4 else float("nan")
            rows.append((f"{N}x{T}", label, us, us / floor_us, err))
            print(f"  {label:28s} {us:9.1f} us  {us / floor_us:5.2f}x floor  err {err:.1e}", flush=True)
    print(f"\n{torch.cuda.get_device_name()}, {time.strftime('%Y-%m-%d')}: gae, best five per shape")
    for shape in dict.fromkeys(r[0] for r in rows):
        best = sorted((r for r in rows if r[0] == shape), key=lambda r: r[2])[:5]
        heur = next(r for r in rows if r[0] == shape and r[1] == "heuristic")
        print(f"  {shape}: heuristic {heur[2]:.1f} us ({heur[3]:.2f}x floor)")
        for r in best:
            print(f"      {r[1]:28s} {r[2]:8.1f} us {r[3]:5.2f}x")


if __name__ == "__main__":
    main()
