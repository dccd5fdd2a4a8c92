"""Packed sequences (``cu_seqlens=``) against padded rows on the CPU path, side by side in
one run::

    python tools/packed_timing.py              # one thread (the loops compared)
    python tools/packed_timing.py --parallel   # the runners' serial/parallel choice
    python tools/packed_timing.py --dry        # tiny shapes: checks the script

(a) Equal lengths: ``B`` sequences of ``T`` tokens, packed (``[B·T]`` and ``cu_seqlens``)
against the same batch as ``[B, T]`` rows, for the masked GAE with whitening (verl's) and
REINFORCE++'s returns (``kept_returns``): the same tokens, the same bits.

(b) Long-tailed lengths: 256 sequences whose lengths are lognormal (median 1024, fixed
seed, clipped to [1, 32768], the longest set to 32768), packed against padding every
sequence to the longest and calling the padded op (the padding copy counted), and, for
GAE, against verl's Python loop over the padded batch's time steps (run once: it takes
seconds).

Each time is the median of ``REPEATS`` public calls (fresh outputs, checks included) after
one that compiles, packed and padded called in turn; the ratio is the median of the
rounds' ratios. The results are checked equal (bit for bit, the loop's order) before they
are timed. The machine's other work moves every
figure: compare the columns of one run.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch

import rlscan
from rlscan import _cpu
from rlscan.ops.discounted_returns import kept_returns
from timed_rounds import rounds

DRY = "--dry" in sys.argv
PARALLEL = "--parallel" in sys.argv
EQUAL = [(16, 64), (4, 256)] if DRY else [(256, 4096), (64, 32768), (4096, 256)]
TAIL = dict(S=16, median=16, longest=128) if DRY else dict(S=256, median=1024, longest=32768)
REPEATS = 3 if DRY else 9
GAMMA, LMBDA = 0.99, 0.95


def timed(packed, padded) -> tuple:
    """``(packed's median seconds, padded's, the median of padded / packed over the rounds)``:
    the two called in turn, each round's ratio taken between calls a moment apart (the
    machine's other work drifts between rounds more than within one)."""
    times = rounds({"packed": packed, "padded": padded}, REPEATS)
    ratio = statistics.median(b / a for a, b in zip(times["packed"], times["padded"]))
    return statistics.median(times["packed"]), statistics.median(times["padded"]), ratio


def batch(lengths: np.ndarray, seed: int = 0) -> tuple:
    """``(cu_seqlens, rewards, values, mask)`` packed, and the same padded to the longest."""
    g = torch.Generator().manual_seed(seed)
    cu = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    total = int(cu[-1])
    r, v = torch.randn(total, generator=g), torch.randn(total, generator=g)
    m = torch.rand(total, generator=g) < 0.9  # observation tokens inside the responses
    return cu, r, v, m


def pad(x: torch.Tensor, cu: torch.Tensor, longest: int) -> torch.Tensor:
    """``[S, longest]`` rows of the packed ``x``, zeros past each sequence (one copy)."""
    lengths = (cu[1:] - cu[:-1])
    out = torch.zeros(len(lengths), longest, dtype=x.dtype)
    keep = torch.arange(longest)[None, :] < lengths[:, None]
    out[keep] = x
    return out


def verl_gae(r, v, m, gamma, lam):
    """verl's ``compute_gae_advantage_return``: a Python loop over the time steps."""
    m = m.to(r.dtype)
    nextvalues, lastgaelam, reversed_ = 0, 0, []
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * nextvalues - v[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = v[:, t] * m[:, t] + (1 - m[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * m[:, t] + (1 - m[:, t]) * lastgaelam
        reversed_.append(lastgaelam)
    adv = torch.stack(reversed_[::-1], dim=1)
    return rlscan.masked_whiten(adv, m), adv + v


def equal_rows() -> list:
    rows = []
    for B, T in EQUAL:
        cu, r, v, m = batch(np.full(B, T))
        R, V, M = r.view(B, T), v.view(B, T), m.view(B, T)
        cases = {
            "gae mask whiten": (lambda: rlscan.gae(r, v, mask=m, cu_seqlens=cu, whiten=True, gamma=GAMMA, lmbda=LMBDA),
                                lambda: rlscan.gae(R, V, mask=M, whiten=True, gamma=GAMMA, lmbda=LMBDA, time_dim=-1)),
            "kept_returns": (lambda: kept_returns.returns_and_advantages(r, m, GAMMA, cu_seqlens=cu),
                             lambda: kept_returns.returns_and_advantages(R, M, GAMMA)),
        }
        for name, (packed, padded) in cases.items():
            for a, b in zip(packed(), padded()):
                assert torch.equal(a, b.reshape(-1)), name
            rows.append((f"{name}, {B} x {T}", *timed(packed, padded), None))
    return rows


def tail_rows() -> list:
    rng = np.random.default_rng(0)
    S, longest = TAIL["S"], TAIL["longest"]
    lengths = np.clip(np.rint(rng.lognormal(np.log(TAIL["median"]), 1.0, S)), 1, longest).astype(np.int64)
    lengths[np.argmax(lengths)] = longest
    cu, r, v, m = batch(lengths, seed=1)
    total = int(cu[-1])

    def padded_gae():
        R, V, M = pad(r, cu, longest), pad(v, cu, longest), pad(m, cu, longest)
        return rlscan.gae(R, V, mask=M, whiten=True, gamma=GAMMA, lmbda=LMBDA, time_dim=-1)

    def padded_kept():
        return kept_returns.returns_and_advantages(pad(r, cu, longest), pad(m, cu, longest), GAMMA)

    def packed_gae():
        return rlscan.gae(r, v, mask=m, cu_seqlens=cu, whiten=True, gamma=GAMMA, lmbda=LMBDA)

    def packed_kept():
        return kept_returns.returns_and_advantages(r, m, GAMMA, cu_seqlens=cu)

    keep = pad(torch.ones(total, dtype=torch.bool), cu, longest)
    for packed, padded in ((packed_gae, padded_gae), (packed_kept, padded_kept)):
        for a, b in zip(packed(), padded()):
            assert torch.equal(a, b[keep])
    label = f"{S} seqs, lognormal median {TAIL['median']}, max {longest} ({total} tokens, {S * longest} padded)"
    gae_times, kept_times = timed(packed_gae, padded_gae), timed(packed_kept, padded_kept)
    R, V, M = pad(r, cu, longest), pad(v, cu, longest), pad(m, cu, longest)
    start = time.perf_counter()
    adv, _ = verl_gae(R, V, M, GAMMA, LMBDA)
    t_verl = time.perf_counter() - start
    torch.testing.assert_close(adv[keep], packed_gae()[0], rtol=1e-3, atol=1e-3)
    return [(f"gae mask whiten, {label}", *gae_times, t_verl), (f"kept_returns, {label}", *kept_times, None)]


def main() -> int:
    if not PARALLEL:
        _cpu.PARALLEL_MIN_ELEMENTS = 1 << 62  # one thread: the loops compared, not the threads
    rows = equal_rows() + tail_rows()
    threads = f"{_cpu.cpu_threads()} threads, the runners' choice" if PARALLEL else "one thread"
    print(f"CPU, {threads}, median of {REPEATS} calls (ms); padded / packed: the median of the rounds' ratios; "
          f"torch {torch.__version__}\n")
    print("| case | packed | padded | padded / packed | verl's loop (padded) | verl / packed |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, packed, padded, ratio, verl in rows:
        verl_cells = "| | |" if verl is None else f"| {verl * 1e3:.0f} | {verl / packed:.0f}x |"
        print(f"| {name} | {packed * 1e3:.2f} | {padded * 1e3:.2f} | {ratio:.2f}x {verl_cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
