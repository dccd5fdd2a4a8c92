"""GAE as a compiled CPU loop, in the order of Stable-Baselines3's and CleanRL's loops.

Absent inputs arrive as ``None``: numba compiles a version for each combination and prunes
the branches, so the loop over environments has no stand-in arrays to read and vectorises.
"""
import numpy as np

from ..._cpu import grid, njit, prange, step_coefs, step_ends
from ..._cpu_rows import ROWS_AT_ONCE, load_value, row_sums, step_helper


@njit
def gae_loop(r, v, v_next, boot, term, trunc, gammas, lmbdas, gamma, lmbda, gamma_lmbda, one, adv, ret):
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        # an ascending counter and one test for the last step, rather than range(T - 1, -1, -1)
        # and tests of t: one compare per step fewer in the loop over environments
        for k in range(T):
            t = T - 1 - k
            last_step = k == 0
            for j in range(Bl):
                if v_next is not None:
                    vn = v_next[t, i, j]
                elif last_step:
                    vn = zero
                    if boot is not None:
                        vn = boot[0, i, j]
                else:
                    vn = v[t + 1, i, j]
                nu, kappa = step_ends(term, trunc, t, i, j, last_step, zero, one)
                g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                delta = r[t, i, j] + g * vn * nu - v[t, i, j]
                last = zero if last_step else adv[t + 1, i, j]
                a = delta + gl * kappa * last
                adv[t, i, j] = a
                ret[t, i, j] = a + v[t, i, j]


def run(layout, arrays, scalars, outs, dtype):
    r, v, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    gae_loop(r, v, nv, boot, term, trunc, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), dtype(1), *outs)


@njit
def gae_masked_loop(r, v, w, boot, term, mask, gammas, lmbdas, gamma, lmbda, gamma_lmbda, one, adv, ret):
    """With a step-skip mask: ``w`` holds the next kept values ``W_t`` (docs/semantics.md)."""
    T, Bh, Bl = grid(r)
    zero = one - one
    for i in prange(Bh):
        for t in range(T - 1, -1, -1):
            for j in range(Bl):
                last = zero
                wn = zero
                if t < T - 1:
                    last = adv[t + 1, i, j]
                    wn = w[t + 1, i, j]
                else:
                    if boot is not None:
                        wn = boot[0, i, j]
                if mask[t, i, j] != 0:
                    nu = one
                    if term is not None:
                        if term[t, i, j] != 0:
                            nu = zero
                    g, lam, gl = step_coefs(gammas, lmbdas, t, i, j, gamma, lmbda, gamma_lmbda)
                    a = r[t, i, j] + g * wn * nu - v[t, i, j] + gl * nu * last
                else:
                    a = last
                adv[t, i, j] = a
                ret[t, i, j] = a + v[t, i, j]


def run_masked(layout, arrays, scalars, outs, dtype):
    r, v, w, boot, term, mask, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    gae_masked_loop(r, v, w, boot, term, mask, g, lam, dtype(gamma), dtype(lmbda), dtype(gamma_lmbda), dtype(1),
                    *outs)


@step_helper
def _row_step(r, v, mask, term, b, t, gamma, gamma_lmbda, gamma_value_lmbda, one, adv, ret, sums, bad, wn, last,
              last_value, n, s, q, c):
    """One step of one row of :func:`gae_masked_rows_loop`: the carried state in, the state out."""
    zero = one - one
    vt = load_value(v, b, t, one)
    kept = mask[b, t]
    a_value = last_value
    if kept != 0:
        if kept != 1:
            bad += 1
        nu = one
        if term is not None:
            if term[b, t] != 0:
                nu = zero
        delta = load_value(r, b, t, one) + gamma * wn * nu - vt
        a = delta + gamma_lmbda * nu * last
        if gamma_value_lmbda is not None:
            # the single-λ step's arithmetic with γλ_value (the bits of a call with lmbda=value_lmbda), on
            # the same δ: loading r again here made the loop 15 times slower (numba 0.68, no whitening)
            a_value = delta + gamma_value_lmbda * nu * last_value
        wn = vt
        if sums is not None:
            if n == 0.0:
                c = np.float64(a)
            d = np.float64(a) - c
            n += 1.0
            s += d
            q += d * d
    else:
        a = last
    adv[b, t] = a
    if gamma_value_lmbda is not None:
        ret[b, t] = a_value + vt
    else:
        ret[b, t] = a + vt
    return bad, wn, a, a_value, n, s, q, c


@njit
def gae_masked_rows_loop(r, v, mask, boot, term, gamma, gamma_lmbda, gamma_value_lmbda, one, adv, ret, sums, bad):
    """The masked GAE over ``[B, T]`` rows contiguous in time (:mod:`rlscan._cpu_rows`), each
    row walked from its end in the order of ``gae_masked_loop``, the next kept value ``W``
    and ``Â`` carried in registers, not read back from arrays. A thread walks
    ``ROWS_AT_ONCE`` rows side by side: one row's steps form a chain of dependent
    operations, and independent rows fill the processor's pipeline meanwhile. With
    ``sums``, each row's count, ``Σ(Â − c)`` and ``Σ(Â − c)²`` over its kept steps, and
    ``c``; ``bad[b]`` counts the mask's values other than 0 and 1. With
    ``gamma_value_lmbda`` (``γ·λ_value``; ``None``: a branch numba prunes), a second
    advantage ``Â(λ_value)`` is carried beside ``Â`` from the same loads, and ``ret`` holds
    ``Â(λ_value) + V`` (``value_lmbda``, :mod:`rlscan.ops.gae.dual`)."""
    B, T = r.shape
    zero = one - one
    for p in prange((B + ROWS_AT_ONCE - 1) // ROWS_AT_ONCE):
        b0 = p * ROWS_AT_ONCE
        # a short last group walks its last row again: the same values, written twice, counted once
        b1, b2, b3 = min(b0 + 1, B - 1), min(b0 + 2, B - 1), min(b0 + 3, B - 1)
        w0, w1, w2, w3 = zero, zero, zero, zero
        if boot is not None:
            w0, w1 = load_value(boot, b0, 0, one), load_value(boot, b1, 0, one)
            w2, w3 = load_value(boot, b2, 0, one), load_value(boot, b3, 0, one)
        l0, l1, l2, l3 = zero, zero, zero, zero
        u0, u1, u2, u3 = zero, zero, zero, zero
        n0, s0, q0, c0 = 0.0, 0.0, 0.0, 0.0
        n1, s1, q1, c1 = 0.0, 0.0, 0.0, 0.0
        n2, s2, q2, c2 = 0.0, 0.0, 0.0, 0.0
        n3, s3, q3, c3 = 0.0, 0.0, 0.0, 0.0
        e0, e1, e2, e3 = 0, 0, 0, 0
        for k in range(T):
            t = T - 1 - k
            e0, w0, l0, u0, n0, s0, q0, c0 = _row_step(
                r, v, mask, term, b0, t, gamma, gamma_lmbda, gamma_value_lmbda, one, adv, ret, sums,
                e0, w0, l0, u0, n0, s0, q0, c0)
            e1, w1, l1, u1, n1, s1, q1, c1 = _row_step(
                r, v, mask, term, b1, t, gamma, gamma_lmbda, gamma_value_lmbda, one, adv, ret, sums,
                e1, w1, l1, u1, n1, s1, q1, c1)
            e2, w2, l2, u2, n2, s2, q2, c2 = _row_step(
                r, v, mask, term, b2, t, gamma, gamma_lmbda, gamma_value_lmbda, one, adv, ret, sums,
                e2, w2, l2, u2, n2, s2, q2, c2)
            e3, w3, l3, u3, n3, s3, q3, c3 = _row_step(
                r, v, mask, term, b3, t, gamma, gamma_lmbda, gamma_value_lmbda, one, adv, ret, sums,
                e3, w3, l3, u3, n3, s3, q3, c3)
        bad[b0], bad[b1], bad[b2], bad[b3] = e0, e1, e2, e3
        if sums is not None:
            row_sums(sums, b3, n3, s3, q3, c3)
            row_sums(sums, b2, n2, s2, q2, c2)
            row_sums(sums, b1, n1, s1, q1, c1)
            row_sums(sums, b0, n0, s0, q0, c0)
