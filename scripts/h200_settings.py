"""Launch settings side by side on a GPU, by device time (CUDA-graph replay), one group of
shapes at a time; every variant's result is checked against its float64 truth first.
Prints a table last: per shape, the heuristic's time and the five fastest variants.

    python scripts/h200_settings.py long        # few environments, very long T (run 7)
    python scripts/h200_settings.py pipeline    # software-pipelined loads (tl.range num_stages)
    python scripts/h200_settings.py many_envs   # N = 65536: the sequential layout's rule
    python scripts/h200_settings.py wide        # [T, N]: wide environment blocks, with time chunks
    python scripts/h200_settings.py block       # [T, N]: block_kernel (steps in registers)
    python scripts/h200_settings.py block_refined  # around the block kernel's best setting
    python scripts/h200_settings.py chained     # one pass with a decoupled look-back
    python scripts/h200_settings.py chained_long  # the chained kernel with time across threads, few envs
    python scripts/h200_settings.py short       # many environments, short T: against the sequential layout
    python scripts/h200_settings.py registers   # steps scanned in registers or by shuffles; look-back windows
    python scripts/h200_settings.py before_after  # the heuristic against run 15's settings for the same shapes
    python scripts/h200_settings.py small       # short T, up to 16384 environments: narrower tiles
    python scripts/h200_settings.py heavy       # V-trace and Retrace: the heuristic against run 20's settings
    python scripts/h200_settings.py narrow      # [T, N]: chained blocks of 32-64 environments
    python scripts/h200_settings.py few_long    # few environments: look-back windows, longer blocks
    python scripts/h200_settings.py few_one_warp  # few environments: one- and two-warp chained blocks
    python scripts/h200_settings.py chained_stripe  # chained windows in two passes (fold, look back, emit)
    python scripts/h200_settings.py few_refine  # few environments: around the shipped two-pass windows
    python scripts/h200_settings.py words       # the chained kernels' look-back over one word per pair
    python scripts/h200_settings.py words_few   # the same for few environments, very long T
    python scripts/h200_settings.py words_one   # the same for one sequence of 1,000,000 steps
    python scripts/h200_settings.py words_light  # the lighter ops: narrower, longer chained blocks with words
    python scripts/h200_settings.py one_long    # one sequence, very long T: tiles chained in one pass
    python scripts/h200_settings.py mid_envs    # 512 environments, long T: the one-pass layouts of N >= 4096

Each variant is a set of ``forced_config`` settings (core/_triton/launch.py); "heuristic"
is what rlscan chooses by itself.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import rlscan
from rlscan._triton import launch as L
from rlscan.bench import cases, check, floors

from h200_explore import timed_device as device_us  # noqa: E402 - this folder is on sys.path


def _long(N: int, T: int, layout: str, op: str = "") -> dict:
    """Run 7: chunk counts, environment blocks and tile lengths around the heuristic."""
    out = {}
    for n_chunks in (256, 512, 1024, 2048, 4096):
        if N == 1:
            for block_t, warps in ((256, 4), (512, 4), (1024, 8)):
                out[f"scan 1x{block_t} w{warps} c{n_chunks}"] = dict(
                    kind="scan", block_b=1, block_t=block_t, num_warps=warps, n_chunks=n_chunks)
        else:
            for block_b in (4, 8, 16):
                if block_b <= N:
                    out[f"scan {block_b}x256 c{n_chunks}"] = dict(kind="scan", block_b=block_b, block_t=256,
                                                                   num_warps=4, n_chunks=n_chunks)
                    out[f"stripe {block_b}x16x8 c{n_chunks}"] = dict(kind="stripe", block_b=block_b, stripes=16,
                                                                      steps=8, num_warps=4, n_chunks=n_chunks)
    return out


# What run 10's heuristic ran for the pipeline group's shapes (its log's headers), so that a
# rerun pipelines the settings run 10 pipelined, whatever the heuristic has become since
_RUN10 = {
    ("tn", 4096, 2048): dict(kind="scan", block_b=16, num_warps=4, block_t=256, n_chunks=1),
    ("tn", 16384, 512): dict(kind="scan", block_b=16, num_warps=4, block_t=128, n_chunks=1),
    ("tn", 4096, 128): dict(kind="stripe", block_b=8, num_warps=4, stripes=32, steps=4, n_chunks=1),
    ("tn", 16, 262144): dict(kind="scan", block_b=16, num_warps=4, block_t=256, n_chunks=256),
    ("tn", 1, 1_000_000): dict(kind="scan", block_b=1, num_warps=4, block_t=512, n_chunks=489),
    ("nt", 4096, 2048): dict(kind="scan", block_b=4, num_warps=4, block_t=256, n_chunks=1),
    ("tn", 16384, 16): dict(kind="scan", block_b=64, num_warps=2, block_t=16, n_chunks=1),
}


def _pipelined(N: int, T: int, layout: str, op: str = "") -> dict:
    """Run 10's heuristic settings and a few tile shapes, with 2-4 tiles' loads in flight."""
    keep = _RUN10[(layout, N, T)]
    out = {"run 10": keep}
    for stages in (2, 3, 4):
        out[f"run 10 s{stages}"] = dict(keep, stages=stages)
    out["run 10 u2"] = dict(keep, unroll=2)
    if T >= 512 and N >= 1024 and layout == "tn":
        for bb, bt, w in ((16, 128, 4), (32, 64, 4), (32, 128, 8), (64, 64, 8), (16, 256, 8)):
            for stages in (0, 3):
                out[f"scan {bb}x{bt} w{w} s{stages}"] = dict(kind="scan", block_b=bb, block_t=bt, num_warps=w,
                                                               stages=stages, n_chunks=keep.get("n_chunks", 1))
        for bb, chunks in ((32, 16), (64, 32), (128, 64)):
            for stages in (3, 6):
                out[f"seq {bb} c{chunks} s{stages}"] = dict(kind="stripe", block_b=bb, num_warps=max(1, bb // 32),
                                                            stages=stages, n_chunks=chunks)
    return out


def _many_envs(N: int, T: int, layout: str, op: str = "") -> dict:
    """The sequential layout (now chosen at N >= 50561) against the tiles it replaced."""
    seq = dict(kind="stripe", block_b=128, num_warps=4)
    out = {"sequential": seq, "sequential s3": dict(seq, stages=3), "sequential s6": dict(seq, stages=6)}
    if T <= 16:
        out["scan 64x16 w2"] = dict(kind="scan", block_b=64, block_t=16, num_warps=2)
    elif T <= 128:
        out["stripe 8x32x4"] = dict(kind="stripe", block_b=8, stripes=32, steps=4, num_warps=4)
    else:
        out["scan 16x256"] = dict(kind="scan", block_b=16, block_t=256, num_warps=4)
        out["scan 16x256 s3"] = dict(kind="scan", block_b=16, block_t=256, num_warps=4, stages=3)
    return out


def _wide(N: int, T: int, layout: str, op: str = "") -> dict:
    """Wide environment blocks (rows of 256 B to 1 KB), with time chunks for programs enough."""
    out = {}
    for bb, bt, w in ((64, 32, 4), (128, 16, 4), (128, 32, 4), (128, 32, 8), (256, 16, 8), (256, 8, 4)):
        for chunks in (c for c in (1, 8, 32, 128) if c * bb <= 8192):  # the chunk pairs fit in registers
            out[f"scan {bb}x{bt} w{w} c{chunks}"] = dict(kind="scan", block_b=bb, block_t=bt, num_warps=w,
                                                          n_chunks=chunks)
    for bb, steps, w in ((128, 4, 4), (128, 8, 4), (128, 16, 4), (256, 8, 8), (64, 8, 2)):
        for chunks in (c for c in (1, 16, 64) if c * bb <= 8192):
            out[f"stripe {bb}x1x{steps} w{w} c{chunks}"] = dict(kind="stripe", block_b=bb, stripes=1, steps=steps,
                                                                 num_warps=w, n_chunks=chunks)
    return out


def _blocks(N: int, T: int, layout: str, op: str = "") -> dict:
    """block_kernel: [steps, stripes, environments] blocks, steps in registers."""
    out = {}
    for bb, stripes, steps, w in ((16, 32, 8, 4), (16, 32, 4, 4), (32, 16, 8, 4), (64, 8, 8, 4), (128, 4, 8, 4),
                                  (128, 4, 4, 4), (32, 4, 8, 1), (128, 1, 8, 1), (64, 2, 8, 1)):
        for chunks in (c for c in (1, 8, 32) if c * bb <= 4096 and c * stripes * steps <= T):
            out[f"block {bb}x{stripes}x{steps} w{w} c{chunks}"] = dict(
                kind="block", block_b=bb, stripes=stripes, steps=steps, num_warps=w, n_chunks=chunks)
    return out


def _block_refined(N: int, T: int, layout: str, op: str = "") -> dict:
    """Around run 11's winner (block 128x1x8, one warp, ~1024 programs): steps, width, chunks."""
    out = {}
    for bb, stripes, steps, w in ((128, 1, 8, 1), (128, 1, 16, 1), (128, 1, 4, 1), (256, 1, 8, 2), (128, 2, 8, 2),
                                  (64, 1, 8, 1)):
        for chunks in (c for c in (8, 16, 32, 64) if c * bb <= 8192 and c * stripes * steps <= T):
            out[f"block {bb}x{stripes}x{steps} w{w} c{chunks}"] = dict(
                kind="block", block_b=bb, stripes=stripes, steps=steps, num_warps=w, n_chunks=chunks)
    return out


def _chained(N: int, T: int, layout: str, op: str = "") -> dict:
    """chained_kernel (one pass, decoupled look-back) against the heuristic (run 12's
    two-launch block kernel wherever N >= 4096 and T >= 512)."""
    out = {}
    for bb, stripes, steps, w in ((128, 4, 8, 4), (128, 2, 8, 2), (128, 1, 8, 1), (64, 8, 4, 4), (256, 2, 8, 4)):
        out[f"chained {bb}x{stripes}x{steps} w{w}"] = dict(kind="chained", block_b=bb, stripes=stripes, steps=steps,
                                                           num_warps=w)
    return out


def _chained_long(N: int, T: int, layout: str, op: str = "") -> dict:
    """Few environments, very long T: chained blocks whose steps spread over stripes (threads)
    as well as registers, so one program covers hundreds of steps of a narrow row."""
    out = {}
    for stripes, steps, w in ((8, 8, 1), (32, 8, 4), (32, 4, 4), (16, 16, 4), (64, 8, 8), (128, 8, 4), (256, 8, 8)):
        bb = min(16, N)
        if stripes * steps * 4 <= T:
            out[f"chained {bb}x{stripes}x{steps} w{w}"] = dict(kind="chained", block_b=bb, stripes=stripes,
                                                               steps=steps, num_warps=w)
    return out


def _short(N: int, T: int, layout: str, op: str = "") -> dict:
    """Many environments, short T: the sequential layout and in-register blocks against the
    heuristic's tiles."""
    out = {"sequential": dict(kind="stripe", block_b=128, num_warps=4),
           "scan 128x16 w4": dict(kind="scan", block_b=128, block_t=min(16, T), num_warps=4)}
    for bb, steps, w, chunks in ((128, T, 1, 1), (128, T, 4, 1), (64, T, 1, 1), (128, max(1, T // 2), 1, 2)):
        out[f"block {bb}x1x{steps} w{w} c{chunks}"] = dict(kind="block", block_b=bb, stripes=1, steps=steps,
                                                           num_warps=w, n_chunks=chunks)
    if T >= 16:
        out["chained 128x1x8 w1"] = dict(kind="chained", block_b=128, stripes=1, steps=8, num_warps=1)
    return out


def _registers(N: int, T: int, layout: str, op: str = "") -> dict:
    """Run 15's settings, steps scanned by warp shuffles (run 18 ran them as the heuristic
    of the day, its log calls them "heuristic by shuffles"), against the chained kernel with
    look-back windows of 2-8 blocks; at the long shapes, the chained kernel with time across
    threads (run 17's best)."""
    out = {"heuristic by shuffles": _before_after(N, T, layout, op)["run 15"]}
    if N >= 4096:
        chained = dict(kind="chained", block_b=128, stripes=1, num_warps=1)
        for steps, window in ((8, 1), (8, 2), (8, 4), (8, 8), (4, 4), (16, 4)):
            out[f"chained 128x1x{steps} w1 look-back {window}"] = dict(chained, steps=steps, lookback=window)
    else:
        chained = dict(kind="chained", block_b=16, stripes=64, steps=8, num_warps=8)
        for window in (1, 4, 8):
            out[f"chained 16x64x8 w8 look-back {window}"] = dict(chained, lookback=window)
        out["chained 16x64x8 w8 by shuffles"] = dict(chained, step_scan="shuffles")
    return out


def _narrow(N: int, T: int, layout: str, op: str = "") -> dict:
    """Chained blocks narrower than 128 environments (64: 2 per thread, 32: 1 per thread), so
    that fewer registers hold each block and more, shorter chains run at once. (Run 21 also
    read the look-back's flags by plain acquire loads: wrong results with windows, since the
    lanes that read the flags are not those that read the pairs; 1-3% with one at a time.)"""
    out = {}
    for bb, steps, window in ((64, 16, 4), (64, 8, 4), (64, 32, 4), (64, 16, 8), (32, 16, 4), (32, 32, 4)):
        out[f"chained {bb}x1x{steps} look-back {window}"] = dict(
            kind="chained", block_b=bb, stripes=1, steps=steps, num_warps=1, lookback=window)
    return out


def _chained_rows(kind: str, block_b: int, rows) -> dict:
    """Forced settings for ``kind`` ("chained" or "chained_stripe") with ``block_b`` environments
    per program, one per row ``(stripes, steps, warps, look-back[, step scan])``, labelled by it."""
    out = {}
    for stripes, steps, warps, window, *scan in rows:
        label = f"{kind} {block_b}x{stripes}x{steps} w{warps} look-back {window}"
        settings = dict(kind=kind, block_b=block_b, stripes=stripes, steps=steps, num_warps=warps, lookback=window)
        if scan:
            label += f" {scan[0]}"
            settings["step_scan"] = scan[0]
        out[label] = settings
    return out


def _few_long(N: int, T: int, layout: str, op: str = "") -> dict:
    """Few environments, very long T: the chained blocks of 16 environments across stripes,
    with look-back windows and longer blocks (fewer links per chain)."""
    return _chained_rows("chained", 16, (
        (64, 8, 8, 4, "shuffles"), (64, 8, 8, 8, "shuffles"), (64, 8, 8, 16, "shuffles"), (64, 8, 8, 4, "registers"),
        (128, 8, 16, 4, "shuffles"), (64, 16, 8, 4, "shuffles"), (32, 8, 4, 4, "shuffles")))


def _few_one_warp(N: int, T: int, layout: str, op: str = "") -> dict:
    """Few environments, very long T: chained blocks of one or two warps (no scan across warps;
    more, shorter links per chain) against the shipped 8-warp blocks of 512 steps."""
    return _chained_rows("chained", 16, (
        (8, 16, 1, 1, "registers"), (8, 16, 1, 4, "registers"), (8, 16, 1, 4, "shuffles"),
        (8, 8, 1, 4, "registers"), (16, 16, 2, 4, "registers"), (32, 8, 4, 4, "registers")))


def _chained_stripe(N: int, T: int, layout: str, op: str = "") -> dict:
    """The chained kernel with the stripe kernel's two passes (fold, look back, read the window
    again and emit): few values live per thread, so many programs share an SM."""
    if N == 1:
        rows = ((1024, 4, 8, 4), (512, 8, 8, 4))
    elif N <= 64:
        rows = ((64, 8, 4, 1), (64, 8, 4, 4), (64, 8, 8, 4), (32, 8, 4, 4), (128, 8, 8, 4), (64, 4, 4, 4),
                (32, 16, 4, 4))
    else:
        rows = ((1, 16, 1, 4), (4, 8, 4, 4), (1, 8, 1, 4), (2, 16, 2, 4))
    return _chained_rows("chained_stripe", N if N <= 64 else 128, rows)


def _few_refine(N: int, T: int, layout: str, op: str = "") -> dict:
    """Around the shipped two-pass windows for few environments (16 x 32 x 16, 4 warps, look-back
    of 4): longer windows (fewer links per chain) and wider look-back windows."""
    return _chained_rows("chained_stripe", 16, (
        (32, 16, 4, 8), (32, 32, 4, 4), (32, 32, 4, 8), (16, 32, 2, 4), (64, 16, 8, 4), (32, 64, 4, 4)))


def _words(N: int, T: int, layout: str, op: str = "") -> dict:
    """The chained kernels' pairs published as one 64-bit word per environment (one round trip
    per look-back step instead of two: flags, then pairs), at the heuristic's settings and
    around them, against the heuristic (flags)."""
    if N == 1:
        rows = _chained_rows("chained_stripe", 1, ((128, 16, 4, 2), (256, 16, 4, 2), (512, 8, 4, 2), (512, 8, 8, 2)))
    elif N <= 64:
        rows = _chained_rows("chained_stripe", 16, ((32, 16, 4, 1), (32, 16, 4, 2), (32, 16, 4, 4), (16, 16, 4, 2)))
    else:
        rows = _chained_rows("chained", 64 if op in ("vtrace", "retrace") else 128,
                             ((1, 16, 1, 1), (1, 16, 1, 2), (1, 16, 1, 4), (1, 8, 1, 2)))
    return {f"{label} words": dict(settings, link="words") for label, settings in rows.items()}


def _words_light(N: int, T: int, layout: str, op: str = "") -> dict:
    """The lighter ops (at most 5 series) at ``N >= 4096, T >= 512``: chained blocks of 64
    environments and 32 steps, pairs published as words (run 37's "full 64 wide" row of
    h200_anatomy.py ran them by mistake, at 1.00-1.08x the 128-wide blocks with flags), against
    the same blocks with flags and the heuristic. (Run 39 also ran a look-back of 2, and 64 x 1
    x 16 with 2: slower than one at a time, and blocks of 32 environments: 150-340x slower.)"""
    words = _chained_rows("chained", 64, ((1, 32, 1, 1),))
    out = {f"{label} words": dict(settings, link="words") for label, settings in words.items()}
    out.update(_chained_rows("chained", 64, ((1, 32, 1, 4),)))
    return out


def _one_long(N: int, T: int, layout: str, op: str = "") -> dict:
    """One sequence (or a few), very long T: ``chained_scan_kernel``, one tile of ``BLOCK_T``
    steps per program scanned across its threads, chained in one pass by words read ``W`` per
    round trip (``lb W``), against the heuristic's two launches of 512-step tiles. V-trace's and
    Retrace's tiles take at most 8 steps per thread (16 spilled, compiled for sm_90 here)."""
    rows = ((256, 1, 64), (256, 1, 128), (512, 1, 64), (512, 1, 128), (512, 2, 64), (512, 2, 128), (1024, 1, 64),
            (1024, 2, 64), (1024, 2, 128), (2048, 2, 64), (2048, 4, 64))
    return {f"chained_scan {N}x{bt} w{w} lb{lb}": dict(kind="chained_scan", block_b=N, block_t=bt, num_warps=w,
                                                       lookback=lb, link="words")
            for bt, w, lb in rows if op not in ("vtrace", "retrace") or bt * N <= 8 * 32 * w}  # theirs spill beyond


def _mid_envs(N: int, T: int, layout: str, op: str = "") -> dict:
    """512 environments, long T (4.3-8.3x the bandwidth floor in run 53, on 16-wide tiles in two
    launches): the chained blocks that ship for ``N >= 4096`` (64 environments, words), with
    wider look-backs since fewer programs chain longer, the two-pass windows of 16-64
    environments, and tiles chained in one pass."""
    heavy = op in ("vtrace", "retrace")
    steps = 16 if heavy else 32
    out = {f"chained 64x1x{steps} lb{lb} words": dict(kind="chained", block_b=64, stripes=1, steps=steps,
                                                       num_warps=1, lookback=lb, link="words") for lb in (1, 8)}
    out["chained 128x1x16 lb4 flags"] = dict(kind="chained", block_b=128, stripes=1, steps=16, num_warps=1,
                                              lookback=4)
    out.update({f"chained_stripe 16x16x16 w4 lb{lb} words": dict(kind="chained_stripe", block_b=16, stripes=16,
                                                                 steps=16, num_warps=4, lookback=lb, link="words")
                for lb in (2, 8)})
    out["chained_scan 32x128 w4 lb16 words"] = dict(kind="chained_scan", block_b=32, block_t=128, num_warps=4,
                                                    lookback=16, link="words")
    return out


def _small(N: int, T: int, layout: str, op: str = "") -> dict:
    """Short T, too few environments to fill the GPU with 64-environment tiles: narrower tiles,
    more programs (the whole-grid run 24 had V-trace at 64 x 16 in 5.05 us and at 8 x 16, one
    8-environment program, in 2.27 us)."""
    return {f"scan {bb}x{min(16, T)} w{w}": dict(kind="scan", block_b=bb, block_t=min(16, T), num_warps=w)
            for bb, w in ((8, 1), (16, 1), (32, 1), (32, 2))}


def _heavy(N: int, T: int, layout: str, op: str = "") -> dict:
    """What run 20's heuristic ran for V-trace and Retrace at ``N >= 4096, T >= 512`` (128
    environments per program, 8 steps, look-back of 1 and 4), against the heuristic."""
    return {"run 20": dict(kind="chained", block_b=128, stripes=1, steps=8, num_warps=1,
                           lookback=1 if op == "vtrace" else 4)}


def _before_after(N: int, T: int, layout: str, op: str = "") -> dict:
    """What run 15's heuristic ran for these shapes (its kernels scanned steps by shuffles)."""
    forward = op in ("eligibility_traces", "episodic_cumsum")  # the scans forward in time
    if N >= 4096 and T >= 512 and not forward:
        return {"run 15": dict(kind="chained", block_b=128, stripes=1, steps=8, num_warps=1, step_scan="shuffles")}
    if N >= 4096 and T >= 512:
        return {"run 15": dict(kind="block", block_b=128, stripes=1, steps=4, num_warps=1, step_scan="shuffles",
                               n_chunks=min(32, -(-16 * 132 // -(-N // 128))))}
    if T <= 16:
        return {"run 15": dict(kind="scan", block_b=64, block_t=16, num_warps=2)}
    return {"run 15": dict(kind="scan", block_b=16, block_t=256, num_warps=4,
                           n_chunks=min(T // 256, -(-4 * 132 // -(-N // 16)), 4096 // 16))}


GROUPS = {
    "long": (_long, [("gae", 16, 262144, "tn"), ("gae", 1, 1_000_000, "tn"), ("gae", 64, 65536, "tn")]),
    "pipeline": (_pipelined, [
        ("gae", 4096, 2048, "tn"), ("vtrace", 4096, 2048, "tn"), ("gae", 16384, 512, "tn"),
        ("gae", 4096, 128, "tn"), ("gae", 16, 262144, "tn"), ("gae", 1, 1_000_000, "tn"),
        ("gae", 4096, 2048, "nt"), ("vtrace", 16384, 16, "tn"),
    ]),
    "wide": (_wide, [("gae", 4096, 2048, "tn"), ("gae", 16384, 512, "tn"), ("vtrace", 4096, 2048, "tn"),
                      ("gae", 65536, 2048, "tn")]),
    "block": (_blocks, [("gae", 4096, 2048, "tn"), ("gae", 16384, 512, "tn"), ("vtrace", 4096, 2048, "tn"),
                        ("gae", 4096, 128, "tn")]),
    "block_refined": (_block_refined, [("gae", 4096, 2048, "tn"), ("vtrace", 4096, 2048, "tn"),
                                        ("gae", 16384, 512, "tn"), ("gae", 8192, 1024, "tn")]),
    "chained": (_chained, [(op, 4096, 2048, "tn") for op in cases.CASES] + [
        ("gae", 16384, 512, "tn"), ("vtrace", 16384, 512, "tn"), ("gae", 8192, 1024, "tn"),
        ("gae", 16, 262144, "tn"), ("gae", 1, 1_000_000, "tn"), ("gae", 4096, 128, "tn")]),
    "chained_long": (_chained_long, [(op, 16, 262144, "tn") for op in ("gae", "discounted_returns", "vtrace")] + [
        (op, 1, 1_000_000, "tn") for op in ("gae", "discounted_returns", "vtrace")] + [("gae", 64, 65536, "tn")]),
    "short": (_short, [(op, 16384, 16, "tn") for op in ("gae", "discounted_returns", "vtrace", "retrace",
                                                         "eligibility_traces", "linear_scan")] + [
        ("gae", 65536, 8, "tn")]),
    "registers": (_registers, [(op, 4096, 2048, "tn") for op in cases.CASES] + [
        ("gae", 16384, 512, "tn"), ("vtrace", 16384, 512, "tn"), ("gae", 16, 262144, "tn"),
        ("vtrace", 16, 262144, "tn"), ("gae", 64, 65536, "tn")]),
    "narrow": (_narrow, [(op, 4096, 2048, "tn") for op in ("gae", "discounted_returns", "vtrace", "retrace")] + [
        (op, 16384, 512, "tn") for op in ("vtrace", "retrace")]),
    "few_long": (_few_long, [(op, 16, 262144, "tn") for op in ("gae", "discounted_returns", "vtrace", "retrace")] + [
        ("gae", 64, 65536, "tn")]),
    "few_one_warp": (_few_one_warp, [(op, 16, 262144, "tn") for op in ("gae", "vtrace")] + [
        ("gae", 64, 65536, "tn")]),
    "chained_stripe": (_chained_stripe, [(op, 16, 262144, "tn") for op in ("gae", "vtrace", "retrace",
                                                                            "discounted_returns")] + [
        ("gae", 64, 65536, "tn"), ("gae", 1, 1_000_000, "tn")] + [
        (op, 4096, 2048, "tn") for op in ("gae", "vtrace", "retrace")]),
    "few_refine": (_few_refine, [(op, 16, 262144, "tn") for op in ("gae", "discounted_returns", "vtrace",
                                                                     "td_lambda")]),
    "words": (_words, [(op, 4096, 2048, "tn") for op in cases.CASES] + [
        (op, 16384, 512, "tn") for op in ("gae", "discounted_returns", "vtrace")]),
    "words_few": (_words, [(op, 16, 262144, "tn") for op in cases.CASES] + [("gae", 64, 65536, "tn")]),
    "words_one": (_words, [(op, 1, 1_000_000, "tn") for op in ("gae", "vtrace", "discounted_returns")]),
    "one_long": (_one_long, [(op, 1, 1_000_000, "tn") for op in ("discounted_returns", "vtrace", "gae", "retrace")]
                 + [("gae", 1, 262144, "tn"), ("gae", 1, 65536, "tn"), ("discounted_returns", 1, 65536, "tn"),
                    ("gae", 1, 8192, "tn")]),
    "mid_envs": (_mid_envs, [(op, 512, T, "tn") for T in (2048, 16384) for op in ("gae", "discounted_returns",
                                                                                  "vtrace")]),
    "words_light": (_words_light, [(op, N, T, "tn") for N, T in ((4096, 2048), (16384, 512)) for op in cases.CASES
                                   if op not in ("vtrace", "retrace")]),
    "small": (_small, [(op, N, 16, "tn") for op in ("vtrace", "gae", "retrace") for N in (64, 512, 4096, 16384)] + [
        (op, N, 8, "tn") for op in ("vtrace", "gae") for N in (64, 4096)]),
    "heavy": (_heavy, [(op, N, T, "tn") for op in ("vtrace", "retrace") for N, T in ((4096, 2048), (16384, 512))]),
    "before_after": (_before_after, [(op, 4096, 2048, "tn") for op in cases.CASES] + [
        (op, 16384, 16, "tn") for op in cases.CASES] + [
        ("gae", 16384, 512, "tn"), ("vtrace", 16384, 512, "tn"), ("retrace", 16384, 512, "tn"),
        ("gae", 16, 262144, "tn"), ("discounted_returns", 16, 262144, "tn"), ("vtrace", 16, 262144, "tn"),
        ("retrace", 16, 262144, "tn"), ("gae", 64, 65536, "tn")]),
    "many_envs": (_many_envs, [("gae", 65536, 16, "tn"), ("gae", 65536, 128, "tn"), ("gae", 65536, 2048, "tn"),
                               ("vtrace", 65536, 128, "tn")]),
}


def sweep(group: str, only=()) -> list:
    variants_of, shapes = GROUPS[group]
    if only:
        shapes = [s for s in shapes if any(o in f"{s[0]} {s[3]} {s[1]}x{s[2]}" for o in only)]
    dev = torch.device("cuda")
    fl = floors.measure(dev, quick=True)
    print(f"# copy bandwidth {fl.bandwidth / 1e12:.2f} TB/s", flush=True)
    rows = []
    for op, N, T, layout in shapes:
        case = cases.CASES[op]
        inputs = cases.make_inputs(case, T, N, torch.float32, layout, dev)
        want, _ = check.truth(case, inputs, T, N)
        floor_us = cases.moved_bytes(inputs, len(want), T, N, torch.float32) / fl.bandwidth * 1e6
        shape = f"{op} {layout} {N}x{T}"
        print(f"# {shape}", flush=True)  # the settings the heuristic ran are printed on its row
        for label, forced in {"heuristic": {}, **variants_of(N, T, layout, op)}.items():
            L._PLANS.clear()
            fn = lambda: case.call(rlscan, inputs)  # noqa: E731
            try:
                with L.forced_config(**forced):
                    err = check.relative_error(cases.outputs_of(fn()), want)
                    us = device_us(fn) if err < 1e-4 else float("nan")
            except Exception as exc:  # noqa: BLE001 - a setting the compiler refuses is a result too
                print(f"  {label:28s} failed: {repr(exc)[:200]}", flush=True)
                continue
            rows.append((shape, label, us, us / floor_us, err))
            ran = ""
            if label == "heuristic":  # the settings its plan kept (the first candidate that does not spill)
                ran = " ran " + "; ".join(f"{c.kind} {c.block_b}x{c.stripes}x{c.steps} w{c.num_warps} look-back "
                                          f"{c.lookback} {c.link} {c.step_scan}"
                                          for c in (p.cfg for p in L._PLANS.values()))
            print(f"  {label:28s} {us:9.1f} us  {us / floor_us:5.2f}x floor  err {err:.1e}{ran}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("groups", nargs="+", choices=sorted(GROUPS))
    ap.add_argument("--only", default="", help="comma-separated: keep the shapes whose label "
                    "('op layout NxT') contains one of these")
    args = ap.parse_args()
    rows = []
    for group in args.groups:
        rows += sweep(group, tuple(filter(None, args.only.split(","))))
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}: "
          "device time, best five per shape")
    for shape in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == shape]
        heur = next(r for r in mine if r[1] == "heuristic")
        print(f"  {shape}: heuristic {heur[2]:.1f} us ({heur[3]:.2f}x floor)")
        for r in sorted(mine, key=lambda r: r[2] if r[2] == r[2] else float("inf"))[:5]:
            print(f"      {r[1]:28s} {r[2]:8.1f} us {r[3]:5.2f}x  ×{heur[2] / r[2]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
