"""verl's optimal token baselines (``optimal_token_baseline`` and
``tir_optimal_token_baseline``) over every group at once.

With ``m`` the response mask, ``r`` the token rewards, ``π_t = exp(old_log_probs)`` and
``Σπ²`` the actor's ``sum_pi_squared``:

* ``G_t = Σ_{s ≥ t} r_s m_s`` (the returns: a reverse cumulative sum, whose float32 verl
  sums in float64 on the CPU, as torch's ``cumsum`` does, and rounds at each step);
* ``w_t = (1 − 2 π_t + Σπ²_t) · ρ_t²`` (``ρ``: ``rollout_is_weights``, if given) and
  ``W_t = Σ_{s ≤ t} w_s m_s`` (a cumulative sum, likewise);
* in each group ``g`` (``index``) of ``N ≥ 2`` responses, a baseline per step,
  ``b_t = Σ_g G_t W_t m_t / (Σ_g W_t m_t + ε)``, summed over the group's responses in
  torch's order for ``tensor.sum(dim=0)``;
  ``optimal_token_baseline`` aligns the responses by position ``t``;
  ``tir_optimal_token_baseline`` by the rank ``k`` of the kept token (the ``k``-th token
  with ``m = 1`` of each response, those without one left out: multi-turn responses line up
  turn after turn), and leaves responses with no kept token out of their group;
* ``handle_zero_tail``: where one response of the group is the longest (its count of kept
  tokens), its baseline is 0 from the second longest count on (a position for
  ``optimal_token_baseline``, a kept rank for ``tir_optimal_token_baseline``);
* a group of one: ``b = 0``; the advantages are ``(G − b) · m``.

Two forms compute it. On the CPU, for float32 inputs in ``[B, T]`` rows contiguous in time
(verl's layout), :func:`rows`: one compiled loop per group, run on every core, that walks
each response backwards once for ``G`` (and its count of kept tokens), then the group's
responses forwards side by side for ``W``, the baseline and the advantages, reading each
input once from memory; ``π`` is torch's ``exp`` (verl's bits), written into the
advantages' memory, which the loop reads it from and overwrites. Everywhere else (CUDA
tensors, other dtypes or layouts), :func:`tensors`: torch operations over the whole batch,
the group sums one ``index_add_`` over group ids. The CPU loop gives verl's bits; the torch
form gives verl's where ``index_add_`` adds in the order of torch's sum (on the CPU, groups
of up to 16), and within float32's rounding of those sums elsewhere.
"""
from __future__ import annotations

import collections
import concurrent.futures
import os
import threading
import time

import numpy as np
import torch

from . import _common

try:
    import numba
    from numba import njit
except ImportError:  # pragma: no cover - numba is rlscan's dependency
    numba = None

#: mask dtypes the CPU loop reads in place, as their bytes (one compiled version for all)
ROW_MASKS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
#: below this many elements the loop runs on the calling thread alone
PARALLEL_MIN_ELEMENTS = 1 << 18
#: positions (kept ranks) of a group's responses the loop takes at once: their terms stay in cache
_TILE = 1024
#: runs of groups per thread
CHUNKS_PER_THREAD = 4


def token_baseline(r, m, ids, n_groups: int, lp, sp, iw, zero_tail: bool, eps: float, multi_turn: bool):
    """``(advantages, returns)`` of verl's ``compute_optimal_token_baseline_advantage``
    (``multi_turn=False``) or ``compute_multi_turn_optimal_token_baseline_advantage``
    (``multi_turn=True``); ``ids``: each response's group, ``0 .. n_groups − 1``."""
    if _rows_apply(r, m, lp, sp, iw):
        return rows(r, m, ids, n_groups, lp, sp, iw, zero_tail, eps, multi_turn)
    _common.check_mask_values("response_mask", m)
    return tensors(r, m, ids, n_groups, lp, sp, iw, zero_tail, eps, multi_turn)


def _rows_apply(r, m, lp, sp, iw) -> bool:
    floats = (r, lp, sp) if iw is None else (r, lp, sp, iw)
    return (numba is not None and r.device.type == "cpu" and r.dim() == 2 and r.numel() > 0
            and all(x.dtype == torch.float32 and x.is_contiguous() for x in floats)
            and m.dtype in ROW_MASKS and m.is_contiguous())


# ----------------------------------------------------------------------------- torch operations


def tensors(r, m, ids, n_groups: int, lp, sp, iw, zero_tail: bool, eps: float, multi_turn: bool):
    """The estimator as torch operations on the whole batch, verl's elementwise arithmetic
    in verl's dtypes; the group sums are ``index_add_`` over ``ids``."""
    B, T = r.shape
    returns = (r * m).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    w = 1 - 2 * torch.exp(lp) + sp
    if iw is not None:
        w = w * (iw ** 2)
    W = (w * m).cumsum(dim=-1)
    lengths = m.sum(dim=-1)
    if multi_turn:
        # each kept token at its rank k in the row (the masked ones into a last column, dropped)
        kept = m != 0
        rank = torch.where(kept, kept.long().cumsum(dim=-1) - 1, T)
        W_k = W.new_zeros(B, T + 1).scatter_(1, rank, W)[:, :T]
        G_k = W.new_zeros(B, T + 1).scatter_(1, rank, returns.to(W.dtype))[:, :T]
        members = lengths > 0
        num = _group_sums(ids, n_groups, G_k * W_k)
        den = _group_sums(ids, n_groups, W_k)
        baseline = (num / (den + eps)).to(W.dtype)[ids]
        size = _group_sums(ids, n_groups, members.double())[ids]
        baseline = _tail_zeroed(baseline, ids, n_groups, lengths, members, size, zero_tail)
        advantages = torch.where(kept, (G_k - baseline).gather(1, rank.clamp(max=T - 1)).to(returns.dtype), 0)
        return advantages * m, returns
    masked_W = W * m
    num = _group_sums(ids, n_groups, returns * masked_W)
    den = _group_sums(ids, n_groups, masked_W)
    baseline = (num / (den + eps))[ids].to(returns.dtype)
    size = _group_sums(ids, n_groups, torch.ones(B, dtype=torch.float64, device=r.device))[ids]
    baseline = _tail_zeroed(baseline, ids, n_groups, lengths, None, size, zero_tail)
    return (returns - baseline) * m, returns


def _group_sums(ids, n_groups: int, x: torch.Tensor) -> torch.Tensor:
    """``[n_groups, *x.shape[1:]]``: ``x`` summed over each group's rows, in their order."""
    return x.new_zeros((n_groups,) + x.shape[1:]).index_add_(0, ids, x)


def _tail_zeroed(baseline, ids, n_groups: int, lengths, members, size, zero_tail: bool):
    """The baseline, 0 in groups of one, and with ``zero_tail`` 0 in the longest response of
    a group from the second longest length on (where one response alone is the longest)."""
    baseline = torch.where((size > 1)[:, None], baseline, 0)
    if not zero_tail:
        return baseline
    L = lengths.to(torch.float64)
    if members is not None:  # responses outside every group count as no length
        L = torch.where(members, L, -1.0)
    lowest = torch.full((n_groups,), -2.0, dtype=torch.float64, device=L.device)
    top = lowest.clone().scatter_reduce_(0, ids, L, "amax")[ids]
    at_top = L == top
    unique = _group_sums(ids, n_groups, at_top.double())[ids] == 1
    second = lowest.clone().scatter_reduce_(0, ids, torch.where(at_top, -2.0, L), "amax")[ids]
    star = at_top & unique & (size > 1)
    positions = torch.arange(baseline.shape[1], device=L.device)
    return baseline.masked_fill(star[:, None] & (positions[None, :] >= second[:, None]), 0)


# ----------------------------------------------------------------------------- the CPU loop


def rows(r, m, ids, n_groups: int, lp, sp, iw, zero_tail: bool, eps: float, multi_turn: bool):
    """The CPU loop (float32 ``[B, T]`` rows contiguous in time): verl's bits."""
    B, T = r.shape
    order = torch.argsort(ids, stable=True)  # each group's responses in their batch order
    starts = torch.zeros(n_groups + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(ids, minlength=n_groups), 0, out=starts[1:])
    advantages = torch.exp(lp)  # π, read and overwritten by the loop
    returns = torch.empty_like(r)
    bad = np.zeros(n_groups, dtype=np.int64)
    weights = sp if iw is None else iw  # read only with has_iw
    args = (r.detach().numpy(), m.detach().view(torch.uint8).numpy(), m.element_size(), advantages.numpy(),
            sp.detach().numpy(), weights.detach().numpy(), iw is not None, order.numpy(), starts.numpy(),
            np.float32(eps), zero_tail, multi_turn, returns.numpy(), bad)
    chunks = _chunks(starts.numpy(), T)
    if len(chunks) == 1:
        _groups_loop(*args, 0, n_groups)
    else:
        ways = _ways((B, T, n_groups, multi_turn, iw is not None))
        parallel = ways.parallel()
        start = time.perf_counter()
        if parallel:
            for done in [_pool().submit(_groups_loop, *args, g0, g1) for g0, g1 in chunks]:
                done.result()
        else:
            _groups_loop(*args, 0, n_groups)
        ways.note(parallel, time.perf_counter() - start)
    if bad.any():
        _common.raise_mask_values("response_mask")
    return advantages, returns


_pool_lock = threading.Lock()
_pools: dict = {}  # process id -> the threads that run the loop's runs of groups (a forked child makes its own)


def _threads() -> int:
    """The threads the loop runs on: numba's (``NUMBA_NUM_THREADS``, by default every CPU)."""
    return numba.get_num_threads()


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    with _pool_lock:
        pool = _pools.get(os.getpid())
        if pool is None:
            pool = _pools[os.getpid()] = concurrent.futures.ThreadPoolExecutor(_threads(),
                                                                               thread_name_prefix="rlscan-verl")
        return pool


class _Ways:
    """Whether a batch's next call runs its groups on every core or on the calling thread:
    the way whose calls took less time lately (the least of each way's last ``RECENT``).
    Other work on the CPUs can make the threads wait for each other longer than the calling
    thread alone takes. The first calls take turns until each way has ``RECENT`` timed calls
    (its first call is not timed: it may compile); then the faster runs, and the other again
    every ``RECHECK_EVERY`` calls. Both compute the same bits."""

    RECENT, RECHECK_EVERY = 3, 32

    def __init__(self):
        self.recent = ([], [])  # the calling thread's and every core's last timed calls
        self.runs = [0, 0]
        self.calls = 0

    def parallel(self) -> bool:
        self.calls += 1
        if self.calls <= 2 * (self.RECENT + 1):
            return self.calls % 2 == 1
        serial, parallel = self.recent
        return (min(parallel) <= min(serial)) != (self.calls % self.RECHECK_EVERY == 0)

    def note(self, parallel: bool, seconds: float) -> None:
        k = int(parallel)
        self.runs[k] += 1
        if self.runs[k] > 1:
            self.recent[k].append(seconds)
            del self.recent[k][:-self.RECENT]


_ways_of: collections.OrderedDict = collections.OrderedDict()  # a batch's shape and options -> its _Ways


def _ways(key: tuple) -> _Ways:
    with _pool_lock:
        ways = _ways_of.get(key)
        if ways is None:
            ways = _ways_of[key] = _Ways()
            if len(_ways_of) > 64:  # the shapes seen last
                _ways_of.popitem(last=False)
        else:
            _ways_of.move_to_end(key)
        return ways


def _chunks(starts: np.ndarray, T: int) -> list:
    """``[(g0, g1), ...]``: the groups in runs of about equal rows, ``CHUNKS_PER_THREAD`` per
    thread, which the threads take in turn as they finish (a thread slowed by other work
    on its core takes fewer); one run for a small batch."""
    n_groups = len(starts) - 1
    threads = _threads()
    if threads < 2 or n_groups < 2 or starts[-1] * T < PARALLEL_MIN_ELEMENTS:
        return [(0, n_groups)]
    runs = min(n_groups, CHUNKS_PER_THREAD * threads)
    cuts = np.searchsorted(starts, np.arange(1, runs) * (starts[-1] / runs))
    bounds = [0, *sorted(set(int(c) for c in cuts) - {0, n_groups}), n_groups]
    return list(zip(bounds[:-1], bounds[1:]))


if numba is not None:
    _F = np.float32
    _ZERO, _ONE, _TWO = np.float32(0.0), np.float32(1.0), np.float32(2.0)

    @njit(cache=True, nogil=True, error_model="numpy")
    def _tree_sums(x, n, width, acc, out):
        """``out[c] = Σ_i x[i, c]`` over ``i < n``, in float32, in the order of torch's
        ``tensor.sum(dim=0)`` over an ``[n, T]`` tensor (``multi_row_sum``: runs of ``2^p``
        rows, ``p = max(4, ⌈log2 n⌉ // 4)``, each run's sum carried up through 4 levels);
        ``acc``: ``[4, width]`` scratch."""
        bits = 1
        if n > 2:
            bits = 0
            v = n - 1
            while v > 0:
                bits += 1
                v >>= 1
        power = max(4, bits // 4)
        step = 1 << power
        level = step - 1
        for a in range(4):
            for c in range(width):
                acc[a, c] = _ZERO
        i = 0
        while i + step <= n:
            for _ in range(step):
                for c in range(width):
                    acc[0, c] += x[i, c]
                i += 1
            for a in range(1, 4):
                for c in range(width):
                    acc[a, c] += acc[a - 1, c]
                    acc[a - 1, c] = _ZERO
                if (i & (level << (a * power))) != 0:
                    break
        while i < n:
            for c in range(width):
                acc[0, c] += x[i, c]
            i += 1
        for c in range(width):
            out[c] = ((acc[0, c] + acc[1, c]) + acc[2, c]) + acc[3, c]

    @njit(cache=True, nogil=True, error_model="numpy")
    def _longest(lengths, n):
        """``(star, second)``: the index of the one response with the most kept tokens and
        the second largest count, or ``(-1, 0)`` where two or more share the most."""
        top = -1
        count = 0
        for i in range(n):
            if lengths[i] > top:
                top = lengths[i]
                count = 1
            elif lengths[i] == top:
                count += 1
        if count != 1:
            return -1, 0
        star = -1
        second = -1
        for i in range(n):
            if lengths[i] == top:
                star = i
            elif lengths[i] > second:
                second = lengths[i]
        return star, second

    @njit(cache=True, nogil=True, error_model="numpy")
    def _returns(r, m, size, rows, ret, lengths, kept):
        """Each row's returns ``G`` (a reverse cumulative sum carried in float64, as torch's
        ``cumsum``, rounded at each step), its kept tokens as 0/1 bytes (``kept[i]``) and their
        count; the number of rows whose mask holds other values than 0 and 1. ``m``: the mask's
        bytes, ``size`` a value's (an integer or bool mask: a value is non-zero where its lowest
        byte is, once :func:`_other_values` finds only 0 and 1). Four rows at a time, so that their carries' additions overlap (the last
        rows of a group repeat its last, whose values they write again; ``kept`` has 3 rows
        to spare). The loops index views from 0 (here reversed views): numba then leaves out
        its check for negative indices, which keeps loops from vectorising."""
        N = len(rows)
        T = r.shape[1]
        bad = 0
        last = (T - 1) * size
        for i0 in range(0, N, 4):
            j0 = rows[i0]
            j1 = rows[min(i0 + 1, N - 1)]
            j2 = rows[min(i0 + 2, N - 1)]
            j3 = rows[min(i0 + 3, N - 1)]
            r0, r1, r2, r3 = r[j0, ::-1], r[j1, ::-1], r[j2, ::-1], r[j3, ::-1]
            m0, m1 = m[j0, last::-size], m[j1, last::-size]
            m2, m3 = m[j2, last::-size], m[j3, last::-size]
            g0, g1, g2, g3 = ret[j0, ::-1], ret[j1, ::-1], ret[j2, ::-1], ret[j3, ::-1]
            k0, k1 = kept[i0, ::-1], kept[i0 + 1, ::-1]
            k2, k3 = kept[i0 + 2, ::-1], kept[i0 + 3, ::-1]
            a0 = 0.0
            a1 = 0.0
            a2 = 0.0
            a3 = 0.0
            for c in range(T):
                k0[c] = m0[c] != 0
                k1[c] = m1[c] != 0
                k2[c] = m2[c] != 0
                k3[c] = m3[c] != 0
                a0 += r0[c] * (_ONE if k0[c] else _ZERO)
                a1 += r1[c] * (_ONE if k1[c] else _ZERO)
                a2 += r2[c] * (_ONE if k2[c] else _ZERO)
                a3 += r3[c] * (_ONE if k3[c] else _ZERO)
                g0[c] = a0
                g1[c] = a1
                g2[c] = a2
                g3[c] = a3
            for i in range(i0, min(i0 + 4, N)):
                kk = kept[i]
                count = 0
                for t in range(T):
                    count += kk[t]
                lengths[i] = count
                bad += _other_values(m[rows[i]], size)
        return bad

    @njit(cache=True, nogil=True, error_model="numpy")
    def _other_values(row, size):
        """Whether a mask row (its bytes; ``size`` bytes a value, little-endian) holds a value
        other than 0 and 1: a byte above 1, or a non-zero byte other than a value's lowest.
        One OR over the row's 8-byte words, masked by the bits no 0/1 value sets."""
        high = np.uint64(0)  # a value's bytes above its lowest, in a word
        for b in range(1, 8):
            if b % size != 0:
                high |= np.uint64(0xFF) << np.uint64(8 * b)
        forbidden = np.uint64(0xFEFEFEFEFEFEFEFE) | high
        n = len(row)
        whole = n - n % 8
        words = row[:whole].view(np.uint64)
        seen = np.uint64(0)
        for u in range(len(words)):
            seen |= words[u] & forbidden
        for u in range(whole, n):  # the bytes after the last word (a bool mask's)
            if row[u] > (1 if u % size == 0 else 0):
                seen = np.uint64(1)
        return 1 if seen != 0 else 0

    @njit(cache=True, nogil=True, error_model="numpy")
    def _groups_loop(r, m, size, pi_adv, sp, iw, has_iw, order, starts, eps, zero_tail, multi_turn, ret, bad, g0, g1):
        """Groups ``g0 .. g1 − 1`` (``order[starts[g]:starts[g + 1]]`` their rows): ``ret``
        the returns; ``pi_adv`` holds π and gets the advantages; ``bad[g]`` the group's count
        of rows whose mask holds other values than 0 and 1."""
        T = r.shape[1]
        most = 0
        for g in range(g0, g1):
            most = max(most, starts[g + 1] - starts[g])
        slots = most + 3  # the rows four at a time
        kept = np.empty((slots, T), np.uint8)
        num = np.empty((slots, _TILE), np.float32)
        den = np.empty((slots, _TILE), np.float32)
        acc = np.empty((4, _TILE), np.float32)
        b = np.empty(_TILE, np.float32)
        bd = np.empty(_TILE, np.float32)
        lengths = np.empty(slots, np.int64)
        carry = np.empty(slots, np.float64)
        for g in range(g0, g1):
            rows = order[starts[g]:starts[g + 1]]
            bad[g] = _returns(r, m, size, rows, ret, lengths, kept)
            if multi_turn:
                _ranked_group(kept, pi_adv, sp, iw, has_iw, rows, lengths, eps, zero_tail, ret, num, den, acc, b, bd,
                              carry)
            else:
                _positioned_group(kept, pi_adv, sp, iw, has_iw, rows, lengths, eps, zero_tail, ret, num, den, acc, b,
                                  bd, carry)

    @njit(cache=True, nogil=True, error_model="numpy")
    def _positioned_group(kept, pi_adv, sp, iw, has_iw, rows, lengths, eps, zero_tail, ret, num, den, acc, b, bd,
                          carry):
        """``optimal_token_baseline``'s advantages of one group, in tiles of positions: each
        response's ``W`` and terms (two responses at a time, so that their carries' additions
        overlap), the group's sums, then each response's advantages."""
        N = len(rows)
        T = pi_adv.shape[1]
        if N == 1:
            aa, rr, kk = pi_adv[rows[0]], ret[rows[0]], kept[0]
            for t in range(T):
                aa[t] = rr[t] * (_ONE if kk[t] else _ZERO)
            return
        star, second = -1, T
        if zero_tail:
            star, second = _longest(lengths, N)
        for i in range(N + 1):
            carry[i] = 0.0
        for c0 in range(0, T, _TILE):
            c1 = min(c0 + _TILE, T)
            width = c1 - c0
            for i in range(0, N, 2):  # two responses side by side (the last repeated for an odd count)
                ja, jb = rows[i], rows[min(i + 1, N - 1)]
                ka, pa, sa, qa, ra = kept[i, c0:c1], pi_adv[ja, c0:c1], sp[ja, c0:c1], iw[ja, c0:c1], ret[ja, c0:c1]
                kb, pb, sb, qb, rb = (kept[i + 1, c0:c1], pi_adv[jb, c0:c1], sp[jb, c0:c1], iw[jb, c0:c1],
                                      ret[jb, c0:c1])
                na, da, nb, db = num[i], den[i], num[i + 1], den[i + 1]
                wa, wb = carry[i], carry[i + 1]
                for c in range(width):
                    fa = _ONE if ka[c] else _ZERO
                    fb = _ONE if kb[c] else _ZERO
                    xa = (_ONE - _TWO * pa[c]) + sa[c]
                    xb = (_ONE - _TWO * pb[c]) + sb[c]
                    if has_iw:
                        q = qa[c]
                        xa = xa * (q * q)
                        q = qb[c]
                        xb = xb * (q * q)
                    wa += xa * fa
                    wb += xb * fb
                    Wa = _F(wa)
                    Wb = _F(wb)
                    na[c] = (ra[c] * Wa) * fa
                    nb[c] = (rb[c] * Wb) * fb
                    da[c] = Wa * fa
                    db[c] = Wb * fb
                carry[i], carry[i + 1] = wa, wb
            _tree_sums(num, N, width, acc, b)
            _tree_sums(den, N, width, acc, bd)
            for c in range(width):
                b[c] = b[c] / (bd[c] + eps)
            for i in range(N):
                j = rows[i]
                end = width if i != star else min(width, max(second - c0, 0))
                aa, rr, kk = pi_adv[j, c0:c1], ret[j, c0:c1], kept[i, c0:c1]
                for c in range(end):
                    aa[c] = (rr[c] - b[c]) * (_ONE if kk[c] else _ZERO)
                for c in range(end, width):
                    aa[c] = (rr[c] - _ZERO) * (_ONE if kk[c] else _ZERO)

    @njit(cache=True, nogil=True, error_model="numpy")
    def _ranked_group(kept, pi_adv, sp, iw, has_iw, rows, lengths, eps, zero_tail, ret, num, den, acc, b, bd, carry):
        """``tir_optimal_token_baseline``'s advantages of one group, in tiles of kept ranks:
        each response's cursor walks on to its next kept tokens, the group's sums, then the
        same tokens again for their advantages (0 at the masked ones)."""
        N = len(rows)
        T = pi_adv.shape[1]
        members = np.empty(N, np.int64)
        n = 0
        for i in range(N):
            if lengths[i] > 0:
                members[n] = i
                n += 1
            else:  # no kept token: outside the group, advantages 0
                pi_adv[rows[i]] = _ZERO
        if n == 1:
            aa, rr, kk = pi_adv[rows[members[0]]], ret[rows[members[0]]], kept[members[0]]
            for t in range(T):
                aa[t] = rr[t] if kk[t] else _ZERO
            return
        if n == 0:
            return
        L = np.empty(n, np.int64)
        cursor = np.zeros(n, np.int64)
        begin = np.zeros(n, np.int64)
        longest = 0
        for a in range(n):
            L[a] = lengths[members[a]]
            longest = max(longest, L[a])
            carry[a] = 0.0
        star, second = -1, longest
        if zero_tail:
            star, second = _longest(L, n)
        for k0 in range(0, longest, _TILE):
            width = min(_TILE, longest - k0)
            for a in range(n):
                i = members[a]
                j = rows[i]
                t0 = cursor[a]
                kk, pp, ss, qq, rr = kept[i, t0:], pi_adv[j, t0:], sp[j, t0:], iw[j, t0:], ret[j, t0:]
                nn, dd = num[a], den[a]
                w_sum = carry[a]
                ranks = min(width, max(L[a] - k0, 0))
                u = 0
                c = 0
                while c < ranks:  # without a branch: a masked token's terms are written over by the next
                    k = kk[u]
                    w = (_ONE - _TWO * pp[u]) + ss[u]
                    if has_iw:
                        q = qq[u]
                        w = w * (q * q)
                    w_sum += w * (_ONE if k else _ZERO)
                    W = _F(w_sum)
                    nn[c] = rr[u] * W
                    dd[c] = W
                    c += k
                    u += 1
                for c in range(ranks, width):  # past its length: the zeros verl pads with
                    nn[c] = _ZERO
                    dd[c] = _ZERO
                carry[a] = w_sum
                begin[a] = t0
                cursor[a] = t0 + u
            _tree_sums(num, n, width, acc, b)
            _tree_sums(den, n, width, acc, bd)
            for c in range(width):
                b[c] = b[c] / (bd[c] + eps)
            for a in range(n):  # the same tokens again: the kept ones' advantages, 0 at the others
                i = members[a]
                j = rows[i]
                ranks = min(width, max(L[a] - k0, 0))
                end = ranks if a != star else min(ranks, max(second - k0, 0))
                kk, rr, aa = kept[i, begin[a]:cursor[a]], ret[j, begin[a]:cursor[a]], pi_adv[j, begin[a]:cursor[a]]
                c = 0
                for u in range(cursor[a] - begin[a]):
                    k = kk[u]
                    v = rr[u] - (b[c] if c < end else _ZERO)
                    aa[u] = v if k else _ZERO
                    c += k
        for a in range(n):
            pi_adv[rows[members[a]], cursor[a]:] = _ZERO
