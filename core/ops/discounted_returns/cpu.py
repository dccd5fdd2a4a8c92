"""Discounted returns as a compiled CPU loop (absent inputs are ``None``; see gae/cpu.py)."""
import numpy as np

from ..._cpu import grid, njit, prange, step_ends
from ..._cpu_rows import ROWS_AT_ONCE, load_value, row_sums, step_helper


@njit
def discounted_loop(r, v_next, boot, term, trunc, gammas, gamma, one, out):
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        for t in range(T - 1, -1, -1):
            for j in range(Bl):
                vn = zero
                if v_next is not None:
                    vn = v_next[t, i, j]
                elif boot is not None:
                    if t == T - 1:
                        vn = boot[0, i, j]
                nu, kappa = step_ends(term, trunc, t, i, j, t == T - 1, zero, one)
                g = gamma
                if gammas is not None:
                    g = gammas[t, i, j]
                alpha = r[t, i, j] + g * nu * (one - kappa) * vn
                last = out[t + 1, i, j] if t < T - 1 else zero
                out[t, i, j] = alpha + g * kappa * last


def run(layout, arrays, scalars, outs, dtype):
    r, nv, boot, term, trunc, g = arrays
    (gamma,) = scalars
    discounted_loop(r, nv, boot, term, trunc, g, dtype(gamma), dtype(1), *outs)


@njit
def discounted_masked_loop(r, boot, term, mask, gammas, gamma, one, out):
    """With a step-skip mask; ``G_T`` is the bootstrap (0 when absent)."""
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        for t in range(T - 1, -1, -1):
            for j in range(Bl):
                last = zero
                if t < T - 1:
                    last = out[t + 1, i, j]
                else:
                    if boot is not None:
                        last = boot[0, i, j]
                if mask[t, i, j] != 0:
                    nu = one
                    if term is not None:
                        if term[t, i, j] != 0:
                            nu = zero
                    g = gamma
                    if gammas is not None:
                        g = gammas[t, i, j]
                    out[t, i, j] = r[t, i, j] + g * nu * last
                else:
                    out[t, i, j] = last


def run_masked(layout, arrays, scalars, outs, dtype):
    r, boot, term, mask, g = arrays
    (gamma,) = scalars
    discounted_masked_loop(r, boot, term, mask, g, dtype(gamma), dtype(1), *outs)


@step_helper
def _kept_step(r, mask, b, t, gamma, one, out, bad, running, n, s, q, c):
    """One step of one row of :func:`kept_returns_rows_loop`: the carried state in, the state out."""
    g = load_value(r, b, t, one) + gamma * running
    kept = mask[b, t]
    if kept != 0:
        if kept != 1:
            bad += 1
        running = g
        if n == 0.0:
            c = np.float64(g)
        d = np.float64(g) - c
        n += 1.0
        s += d
        q += d * d
    else:
        g = g * (one - one)
    out[b, t] = g
    return bad, running, n, s, q, c


@njit
def kept_returns_rows_loop(r, mask, gamma, one, out, sums, bad):
    """REINFORCE++'s returns (``kept_returns``) over ``[B, T]`` rows contiguous in time
    (:mod:`rlscan._cpu_rows`), each row walked from its end: where ``m_t = 1``,
    ``G = r_t + γ G'`` becomes the running return ``G'``; where ``m_t = 0``, ``G'`` passes
    and the return is ``(r_t + γ G') · 0`` (verl's product, the sign of its zero included).
    A thread walks ``ROWS_AT_ONCE`` rows side by side (see ``gae_masked_rows_loop``). Each
    row's count, ``Σ(G − c)`` and ``Σ(G − c)²`` over its kept steps, and ``c``, to ``sums``;
    ``bad[b]`` counts the mask's values other than 0 and 1."""
    B, T = r.shape
    zero = one - one
    for p in prange((B + ROWS_AT_ONCE - 1) // ROWS_AT_ONCE):
        b0 = p * ROWS_AT_ONCE
        # a short last group walks its last row again: the same values, written twice, counted once
        b1, b2, b3 = min(b0 + 1, B - 1), min(b0 + 2, B - 1), min(b0 + 3, B - 1)
        g0, g1, g2, g3 = zero, zero, zero, zero
        n0, s0, q0, c0 = 0.0, 0.0, 0.0, 0.0
        n1, s1, q1, c1 = 0.0, 0.0, 0.0, 0.0
        n2, s2, q2, c2 = 0.0, 0.0, 0.0, 0.0
        n3, s3, q3, c3 = 0.0, 0.0, 0.0, 0.0
        e0, e1, e2, e3 = 0, 0, 0, 0
        for k in range(T):
            t = T - 1 - k
            e0, g0, n0, s0, q0, c0 = _kept_step(r, mask, b0, t, gamma, one, out, e0, g0, n0, s0, q0, c0)
            e1, g1, n1, s1, q1, c1 = _kept_step(r, mask, b1, t, gamma, one, out, e1, g1, n1, s1, q1, c1)
            e2, g2, n2, s2, q2, c2 = _kept_step(r, mask, b2, t, gamma, one, out, e2, g2, n2, s2, q2, c2)
            e3, g3, n3, s3, q3, c3 = _kept_step(r, mask, b3, t, gamma, one, out, e3, g3, n3, s3, q3, c3)
        bad[b0], bad[b1], bad[b2], bad[b3] = e0, e1, e2, e3
        row_sums(sums, b3, n3, s3, q3, c3)
        row_sums(sums, b2, n2, s2, q2, c2)
        row_sums(sums, b1, n1, s1, q1, c1)
        row_sums(sums, b0, n0, s0, q0, c0)
