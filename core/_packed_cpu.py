"""Packed sequences on the CPU (``cu_seqlens``: sequences laid end to end in ``[total]``
buffers): one loop per op over the sequences, each walked from its end with its state in
registers, then, where the op whitens, one pass over the buffer.

The per-token arithmetic is that of the padded masked loops (``gae_masked_rows_loop``,
``td_lambda_masked_loop``, ``discounted_masked_loop``, ``kept_returns_rows_loop``), in
their order, so a packed batch gives the bits of the padded one that holds each sequence
in a row (docs/llm.md's definition): a sequence's last token sees the bootstrap (0 where
the sequence terminated) as the padded row's does after the padding, which passes it
through unchanged.

Inputs are read in place as :mod:`rlscan._cpu_rows` reads them (bfloat16 as its bits, a
bool mask as bytes) through ``[1, total]`` views of the caller's buffers; nothing is
padded or copied. The mask's values other than 0 and 1 are counted on the way, per
sequence, and each sequence adds its kept tokens' whitening sums (count, ``Σ(x − c)``,
``Σ(x − c)²``, ``c``) to its own row of an ``[S, 4]`` array, as a padded row does: the
whitening (``_cpu_rows.statistics``) then merges the same rows in the same order.

One sequence is one chain of dependent operations, so a thread walks ``LANES``
sequences side by side and their chains overlap (as the padded loop walks
``_cpu_rows.ROWS_AT_ONCE`` rows). The sequences are sorted by length, longest first, and
taken four at a time, so the four lanes of a group have similar lengths; when the
shortest lane of a group ends, it takes over the state of the next shorter one and walks
it again in its shadow (the same values into the same places, not counted twice), so the
loop over a group's tokens has no test per lane. The groups are dealt to the threads'
blocks of the ``prange`` in turn, so that each block gets long and short ones.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import _cpu, _cpu_rows
from ._cpu import njit, prange
from ._cpu_rows import load_value, row_sums, step_helper

#: Sequences a thread walks side by side (the loop below is written for 4).
LANES = 4
#: Tokens per row of the ``[rows, WHITEN_ROW]`` view the whitening pass runs on (its ``prange``).
WHITEN_ROW = 1 << 16

KINDS = ("gae", "td_lambda", "discounted_returns", "kept_returns")


# ----------------------------------------------------------------------------- per token


@step_helper
def _coefs(gt, lt, t, g, lam, gl):
    """``(γ, λ, γλ)`` at token ``t``: the per-token arrays where given (``gae_masked_loop``'s
    ``step_coefs``), else the sequence's."""
    if gt is not None:
        g = gt[t]
        gl = g * lam
    if lt is not None:
        lam = lt[t]
        gl = g * lam
    return g, lam, gl


@step_helper
def _kept(mask, t, e):
    """Whether token ``t`` is kept, and the count ``e`` of mask values other than 0 and 1."""
    keep = True
    if mask is not None:
        k = mask[0, t]
        keep = k != 0
        if keep:
            if k != 1:
                e += 1
    return keep, e


@step_helper
def _gather(x, n, s, q, c):
    """The whitening sums with one more kept value ``x`` (``gae_masked_rows_loop``'s)."""
    if n == 0.0:
        c = np.float64(x)
    d = np.float64(x) - c
    return n + 1.0, s + d, q + d * d, c


@step_helper
def _gae_step(r, v, mask, gt, lt, t, g, lam, gl, one, o1, o2, sums, e, x, y, n, s, q, c):
    """GAE at token ``t``: ``x`` the next kept value ``W``, ``y`` the advantage after ``t``."""
    vt = load_value(v, 0, t, one)
    keep, e = _kept(mask, t, e)
    if keep:
        g, lam, gl = _coefs(gt, lt, t, g, lam, gl)
        a = load_value(r, 0, t, one) + g * x - vt + gl * y
        x = vt
        if sums is not None:
            n, s, q, c = _gather(a, n, s, q, c)
    else:
        a = y
    o1[0, t] = a
    o2[0, t] = a + vt
    return e, x, a, n, s, q, c


@step_helper
def _td_lambda_step(r, v, mask, gt, lt, t, g, lam, gl, one, o1, o2, sums, e, x, y, n, s, q, c):
    """TD(λ) at token ``t``: ``x`` the next kept value ``W``, ``y`` the return after ``t``."""
    keep, e = _kept(mask, t, e)
    if keep:
        g, lam, gl = _coefs(gt, lt, t, g, lam, gl)
        y = load_value(r, 0, t, one) + g * (one - lam) * x + gl * y
        x = load_value(v, 0, t, one)
    o1[0, t] = y
    return e, x, y, n, s, q, c


@step_helper
def _discounted_step(r, v, mask, gt, lt, t, g, lam, gl, one, o1, o2, sums, e, x, y, n, s, q, c):
    """The discounted return at token ``t``: ``y`` the return after ``t``."""
    keep, e = _kept(mask, t, e)
    if keep:
        if gt is not None:
            g = gt[t]
        y = load_value(r, 0, t, one) + g * y
    o1[0, t] = y
    return e, x, y, n, s, q, c


@step_helper
def _kept_returns_step(r, v, mask, gt, lt, t, g, lam, gl, one, o1, o2, sums, e, x, y, n, s, q, c):
    """REINFORCE++'s return at token ``t`` (``_kept_step``): ``x`` the running return."""
    if gt is not None:
        g = gt[t]
    G = load_value(r, 0, t, one) + g * x
    keep, e = _kept(mask, t, e)
    if keep:
        x = G
        n, s, q, c = _gather(G, n, s, q, c)
    else:
        G = G * (one - one)
    o1[0, t] = G
    return e, x, y, n, s, q, c


@step_helper
def _gae_start(b, zero):
    return b, zero  # W past the end is the bootstrap; no advantage after the last token


@step_helper
def _return_start(b, zero):
    return b, b  # the return after the last token is the bootstrap (td_lambda's W too)


# ----------------------------------------------------------------------------- per sequence


@step_helper
def _open(cu, boot, term, gs, ls, seq, gamma, lmbda, gamma_lmbda, zero, one):
    """``(end, length, b, γ, λ, γλ)`` of a lane starting sequence ``seq`` (``-1``: none), ``b``
    the value after its end (the bootstrap; 0 where it terminated)."""
    end, length, b = 0, 0, zero
    g, lam, gl = gamma, lmbda, gamma_lmbda
    if seq >= 0:
        end = cu[seq + 1]
        length = end - cu[seq]
        if boot is not None:
            b = load_value(boot, 0, seq, one)
        if term is not None:
            if term[seq] != 0:
                b = zero
        if gs is not None:
            g = gs[seq]
            gl = g * lam
        if ls is not None:
            lam = ls[seq]
            gl = g * lam
    return end, length, b, g, lam, gl


@step_helper
def _record(sums, bad, seq, e, n, s, q, c):
    """A finished lane's count of bad mask values and whitening sums (none for a shadow)."""
    if seq >= 0:
        bad[seq] = e
        if sums is not None:
            row_sums(sums, seq, n, s, q, c)


def _start(b, zero):  # replaced in each op's copy of packed_loop (see _loop)
    raise NotImplementedError


def _step(*args):  # replaced in each op's copy of packed_loop (see _loop)
    raise NotImplementedError


def packed_loop(cu, order, r, v, mask, boot, term, gs, ls, gt, lt, gamma, lmbda, gamma_lmbda, one, o1, o2, sums,
                bad):
    """The op's steps (``_step``) over the sequences ``cu`` delimits, ``LANES`` at a time:
    ``order`` lists the groups' sequences, each group's longest first (``-1``: no sequence).
    Lane ``j`` of a group walks its sequence from its end, token ``end_j − 1 − k`` at step
    ``k``; at the step where lane 3's sequence ends, lane 3 records it and takes a copy of
    lane 2's state (and lane 2 of lane 1's where its sequence ends there too, ...), so
    every lane keeps walking a live sequence until the longest ends."""
    zero = one - one
    for p in prange(order.shape[0] // 4):
        i0, i1, i2, i3 = order[4 * p], order[4 * p + 1], order[4 * p + 2], order[4 * p + 3]
        d0, n0, x0, g0, l0, h0 = _open(cu, boot, term, gs, ls, i0, gamma, lmbda, gamma_lmbda, zero, one)
        x0, y0 = _start(x0, zero)
        d1, n1, x1, g1, l1, h1 = _open(cu, boot, term, gs, ls, i1, gamma, lmbda, gamma_lmbda, zero, one)
        x1, y1 = _start(x1, zero)
        d2, n2, x2, g2, l2, h2 = _open(cu, boot, term, gs, ls, i2, gamma, lmbda, gamma_lmbda, zero, one)
        x2, y2 = _start(x2, zero)
        d3, n3, x3, g3, l3, h3 = _open(cu, boot, term, gs, ls, i3, gamma, lmbda, gamma_lmbda, zero, one)
        x3, y3 = _start(x3, zero)
        e0, a0, s0, q0, c0 = 0, 0.0, 0.0, 0.0, 0.0
        e1, a1, s1, q1, c1 = 0, 0.0, 0.0, 0.0, 0.0
        e2, a2, s2, q2, c2 = 0, 0.0, 0.0, 0.0, 0.0
        e3, a3, s3, q3, c3 = 0, 0.0, 0.0, 0.0, 0.0
        longest = n0
        k = 0
        while True:
            if k == n3:  # lane 3 (the shortest left) ends: it shadows lane 2, and so on
                _record(sums, bad, i3, e3, a3, s3, q3, c3)
                i3, d3, n3, x3, y3, g3, l3, h3 = -1, d2, n2, x2, y2, g2, l2, h2
                e3, a3, s3, q3, c3 = e2, a2, s2, q2, c2
                if k == n2:
                    _record(sums, bad, i2, e2, a2, s2, q2, c2)
                    i2, d2, n2, x2, y2, g2, l2, h2 = -1, d1, n1, x1, y1, g1, l1, h1
                    e2, a2, s2, q2, c2 = e1, a1, s1, q1, c1
                    i3, d3, n3, x3, y3, g3, l3, h3 = -1, d1, n1, x1, y1, g1, l1, h1
                    e3, a3, s3, q3, c3 = e1, a1, s1, q1, c1
                    if k == n1:
                        _record(sums, bad, i1, e1, a1, s1, q1, c1)
                        i1, d1, n1, x1, y1, g1, l1, h1 = -1, d0, n0, x0, y0, g0, l0, h0
                        e1, a1, s1, q1, c1 = e0, a0, s0, q0, c0
                        i2, d2, n2, x2, y2, g2, l2, h2 = -1, d0, n0, x0, y0, g0, l0, h0
                        e2, a2, s2, q2, c2 = e0, a0, s0, q0, c0
                        i3, d3, n3, x3, y3, g3, l3, h3 = -1, d0, n0, x0, y0, g0, l0, h0
                        e3, a3, s3, q3, c3 = e0, a0, s0, q0, c0
            if k == longest:
                break
            # to the next lane's end (n3 > k now), with no test per step
            for j in range(k, n3):
                e0, x0, y0, a0, s0, q0, c0 = _step(r, v, mask, gt, lt, np.uint64(d0 - 1 - j), g0, l0, h0, one, o1, o2,
                                                   sums, e0, x0, y0, a0, s0, q0, c0)
                e1, x1, y1, a1, s1, q1, c1 = _step(r, v, mask, gt, lt, np.uint64(d1 - 1 - j), g1, l1, h1, one, o1, o2,
                                                   sums, e1, x1, y1, a1, s1, q1, c1)
                e2, x2, y2, a2, s2, q2, c2 = _step(r, v, mask, gt, lt, np.uint64(d2 - 1 - j), g2, l2, h2, one, o1, o2,
                                                   sums, e2, x2, y2, a2, s2, q2, c2)
                e3, x3, y3, a3, s3, q3, c3 = _step(r, v, mask, gt, lt, np.uint64(d3 - 1 - j), g3, l3, h3, one, o1, o2,
                                                   sums, e3, x3, y3, a3, s3, q3, c3)
            k = n3
        _record(sums, bad, i0, e0, a0, s0, q0, c0)


def _loop(kind: str, step, start):
    """``packed_loop`` for one op: a copy under its own name whose ``_step`` and ``_start`` are
    the op's (``_cpu._renamed``: numba's cache tells functions apart by their names)."""
    return njit(_cpu._renamed(packed_loop, kind, _step=step, _start=start))


LOOPS = {
    "gae": _loop("gae", _gae_step, _gae_start),
    "td_lambda": _loop("td_lambda", _td_lambda_step, _return_start),
    "discounted_returns": _loop("discounted_returns", _discounted_step, _return_start),
    "kept_returns": _loop("kept_returns", _kept_returns_step, _return_start),
}


# ----------------------------------------------------------------------------- the host side


def groups(lengths: np.ndarray, threads: int) -> np.ndarray:
    """The sequences in the loop's order: sorted by length, longest first, in groups of
    ``LANES`` (the last one filled with ``-1``), the groups dealt in turn to ``threads``
    contiguous blocks (the ``prange``'s static schedule gives each thread one block)."""
    S = lengths.shape[0]
    order = np.argsort(-lengths, kind="stable")
    n_groups = -(-S // LANES)
    padded = np.full(n_groups * LANES, -1, dtype=np.int64)
    padded[:S] = order
    grouped = padded.reshape(n_groups, LANES)
    if threads > 1 and n_groups > threads:
        grouped = grouped[np.argsort(np.arange(n_groups) % threads, kind="stable")]
    return grouped.reshape(-1)


def _row(x, flag: bool = False):
    """The loop's ``[1, n]`` array of a 1-D tensor's memory (no copy). float16 values, and
    half-type masks and flags, whose bits the loop does not read, are read from a float32
    copy (exact)."""
    if x is None:
        return None
    if x.dtype == torch.float16 or (flag and x.dtype == torch.bfloat16):
        x = x.float()
    return _cpu_rows.array(x.detach().reshape(1, -1))


def _coef_arrays(x, S: int, total: int, np_dtype) -> tuple:
    """``(scalar, per-sequence array, per-token array)`` of ``γ`` or ``λ``: a float, or a 1-D
    tensor of length ``total`` (one per token) or ``S`` (one per sequence), in the compute
    dtype as the padded loops read it (a converted copy where its dtype differs)."""
    if x is None or isinstance(x, float):
        return (0.0 if x is None else x), None, None
    a = x.detach().to(torch.float64 if np_dtype is np.float64 else torch.float32).numpy()
    if a.shape[0] == total:
        return 0.0, None, a
    if a.shape[0] != S:
        raise ValueError(f"a coefficient tensor must have S = {S} or total = {total} elements, got {a.shape[0]}")
    return 0.0, a, None


def _key(arrays, total: int) -> tuple:
    """A loop call's signature for the serial/parallel choice: its arrays' dtypes and layouts
    and the size's power of two (packed batches of one kind vary in length from call to call)."""
    return tuple(None if a is None else (a.dtype.str, a.ndim) for a in arrays) + (int(total).bit_length(),)


def scan(kind: str, cu_seqlens: torch.Tensor, *, rewards: torch.Tensor, values=None, mask=None, terminated=None,
         bootstrap_value=None, gamma, lmbda=None, exact: bool = False, whiten: bool = False,
         compute_dtype: torch.dtype) -> tuple:
    """The op ``kind`` over the packed sequences ``cu_seqlens`` delimits (docs/llm.md): CPU
    tensors, validated by the caller, 1-D with unit stride. Returns ``(advantages,
    returns)`` for ``gae`` and ``kept_returns``, ``(returns,)`` for the others, ``[total]``
    in ``compute_dtype``; ``gae`` whitens its advantages with ``whiten``, ``kept_returns``
    always (0 where the mask is 0). ``exact`` changes nothing: the loop is always exact.
    Raises ``ValueError`` where ``mask`` holds values other than 0 and 1."""
    loop = LOOPS[kind]
    total = rewards.numel()
    cu = cu_seqlens.detach().numpy().astype(np.int64, copy=False)
    S = cu.shape[0] - 1
    np_dtype = np.float64 if compute_dtype == torch.float64 else np.float32
    one = np_dtype(1)
    gamma_value, gs, gt = _coef_arrays(gamma, S, total, np_dtype)
    lmbda_value, ls, lt = _coef_arrays(lmbda, S, total, np_dtype)
    order = groups(np.diff(cu), _cpu.cpu_threads())
    r, v, m = _row(rewards), _row(values), _row(mask, flag=True)
    boot = _row(bootstrap_value)
    term = None if terminated is None else _row(terminated, flag=True)[0]
    pairs = kind in ("gae", "kept_returns")
    outs = [_cpu_rows.new_rows(rewards.reshape(1, -1), compute_dtype) for _ in range(2 if pairs else 1)]
    o1 = _cpu_rows.array(outs[0])
    o2 = _cpu_rows.array(outs[1]) if kind == "gae" else None
    gathers = kind == "kept_returns" or (kind == "gae" and whiten)
    sums = np.empty((S, 4)) if gathers else None
    bad = np.zeros(S, dtype=np.int64)
    arrays = (cu, order, r, v, m, boot, term, gs, ls, gt, lt, o1, o2, sums)
    _cpu_rows.run(loop, (kind, _key(arrays, total)), (order.shape[0] // LANES, total), cu, order, r, v, m, boot,
                  term, gs, ls, gt, lt, np_dtype(gamma_value), np_dtype(lmbda_value),
                  np_dtype(gamma_value * lmbda_value), one, o1, o2, sums, bad)
    if mask is not None and mask.dtype != torch.bool and bad.any():
        from .ops._skip import raise_mask_values

        raise_mask_values()
    if kind == "gae":
        if whiten:
            whiten_rows(o1, sums, one)
        return outs[0].view(-1), outs[1].view(-1)
    if kind == "kept_returns":
        advantages = outs[1]
        whiten_rows(o1, sums, one, mask=m, out=_cpu_rows.array(advantages))
        return advantages.view(-1), outs[0].view(-1)
    return (outs[0].view(-1),)


def whiten_rows(x: np.ndarray, sums: np.ndarray, one, mask=None, out=None) -> None:
    """:func:`rlscan._cpu_rows.whiten` of a ``[1, total]`` buffer with the sequences' ``sums``
    (raises, before any write, where fewer than two tokens are kept), run on ``[rows,
    WHITEN_ROW]`` views of it and one row for the rest, so that its ``prange`` has rows to
    share out."""
    _, mean, var = _cpu_rows.statistics(sums)
    dtype = type(one)
    mean, scale = dtype(mean), dtype(1.0 / math.sqrt(var + 1e-8))
    out = x if out is None else out
    total = x.shape[1]
    main = total - total % WHITEN_ROW
    zero_skipped = mask is not None
    for lo, hi, rows in ((0, main, main // WHITEN_ROW), (main, total, 1)):
        if hi > lo:
            xs, os_ = x[0, lo:hi].reshape(rows, -1), out[0, lo:hi].reshape(rows, -1)
            ms = mask[0, lo:hi].reshape(rows, -1) if zero_skipped else xs
            _cpu_rows.run(_cpu_rows.whiten_rows_loop, ("whiten", _cpu_rows.signature(xs, ms, os_), zero_skipped),
                          (rows, xs.size), xs, ms, mean, scale, zero_skipped, os_)


__all__ = ["scan", "KINDS", "LANES", "groups"]
