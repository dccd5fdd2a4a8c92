"""The two loops of :mod:`rlscan.ops.gae.sharded` on the CPU path, over ``[B, T]`` rows
contiguous in time (each rank's chunk of every sequence), each row walked from its end in
the order of ``cpu.gae_masked_loop``:

- ``reduce_rows_loop``: the chunk's affine map, ``(a, k, c, V_F, has_kept)`` per row
  (``Â_0 = a + k A_in + c W_in``; ``V_F`` the first kept value), computed in the compute
  dtype (the products ``k``, ``c`` round as the unsplit scan's carry of ``A_in`` would) and
  stored as float64, reading the inputs once and writing nothing else;
- ``finish_rows_loop``: the advantages and returns from the carries ``(A_in, W_in)``, the
  masked loop's per-token arithmetic, and what the previous rank needs, ``(Â_0, W)`` where
  ``W`` is the first kept value (``W_in`` where the chunk keeps nothing).

``mask`` and ``term`` may be ``None`` (every step kept; no terminations): numba compiles a
version without them.
"""
from ..._cpu import njit, prange
from ..._cpu_rows import ROWS_AT_ONCE, load_value, step_helper


@step_helper
def _kept(mask, term, b, t, one):
    """``(kept, ν)`` at ``[b, t]``."""
    kept = True
    if mask is not None:
        kept = mask[b, t] != 0
    nu = one
    if term is not None:
        if term[b, t] != 0:
            nu = one - one
    return kept, nu


@step_helper
def _reduce_step(r, v, mask, term, b, t, gamma, gamma_lmbda, one, a, wn, k, c, seen):
    """One step of one row of :func:`reduce_rows_loop`: the carried state in, the state out."""
    kept, nu = _kept(mask, term, b, t, one)
    # every value computed, then selected: a branch on the mask would be mispredicted
    vt = load_value(v, b, t, one)
    a_kept = load_value(r, b, t, one) + gamma * wn * nu - vt + gamma_lmbda * nu * a
    beta = gamma_lmbda * nu
    # c: at the last kept step W_in enters its α with γ ν; each kept step before multiplies by β
    c_kept = c * beta if seen else gamma * nu
    if kept:
        a, wn, c, k, seen = a_kept, vt, c_kept, k * beta, True
    return a, wn, k, c, seen


@step_helper
def _reduced(out, b, a, wn, k, c, seen):
    out[0, b] = a
    out[1, b] = k
    out[2, b] = c
    out[3, b] = wn
    out[4, b] = seen


@njit
def reduce_rows_loop(r, v, mask, term, gamma, gamma_lmbda, one, out):
    """A thread walks ``ROWS_AT_ONCE`` rows side by side (see ``cpu.gae_masked_rows_loop``)."""
    B, T = r.shape
    zero = one - one
    for p in prange((B + ROWS_AT_ONCE - 1) // ROWS_AT_ONCE):
        b0 = p * ROWS_AT_ONCE
        # a short last group walks its last row again: the same values, written twice
        b1, b2, b3 = min(b0 + 1, B - 1), min(b0 + 2, B - 1), min(b0 + 3, B - 1)
        a0, a1, a2, a3 = zero, zero, zero, zero
        w0, w1, w2, w3 = zero, zero, zero, zero
        k0, k1, k2, k3 = one, one, one, one
        c0, c1, c2, c3 = zero, zero, zero, zero
        s0, s1, s2, s3 = False, False, False, False
        for i in range(T):
            t = T - 1 - i
            a0, w0, k0, c0, s0 = _reduce_step(r, v, mask, term, b0, t, gamma, gamma_lmbda, one, a0, w0, k0, c0, s0)
            a1, w1, k1, c1, s1 = _reduce_step(r, v, mask, term, b1, t, gamma, gamma_lmbda, one, a1, w1, k1, c1, s1)
            a2, w2, k2, c2, s2 = _reduce_step(r, v, mask, term, b2, t, gamma, gamma_lmbda, one, a2, w2, k2, c2, s2)
            a3, w3, k3, c3, s3 = _reduce_step(r, v, mask, term, b3, t, gamma, gamma_lmbda, one, a3, w3, k3, c3, s3)
        _reduced(out, b3, a3, w3, k3, c3, s3)
        _reduced(out, b2, a2, w2, k2, c2, s2)
        _reduced(out, b1, a1, w1, k1, c1, s1)
        _reduced(out, b0, a0, w0, k0, c0, s0)


@step_helper
def _finish_step(r, v, mask, term, b, t, gamma, gamma_lmbda, one, adv, ret, wn, last):
    """One step of one row of :func:`finish_rows_loop`: the carried state in, the state out."""
    kept, nu = _kept(mask, term, b, t, one)
    vt = load_value(v, b, t, one)
    if kept:
        a = load_value(r, b, t, one) + gamma * wn * nu - vt + gamma_lmbda * nu * last
        wn = vt
    else:
        a = last
    adv[b, t] = a
    ret[b, t] = a + vt
    return wn, a


@njit
def finish_rows_loop(r, v, mask, term, gamma, gamma_lmbda, one, a_in, w_in, adv, ret, out):
    """``ROWS_AT_ONCE`` rows side by side, as :func:`reduce_rows_loop`."""
    B, T = r.shape
    zero = one - one
    for p in prange((B + ROWS_AT_ONCE - 1) // ROWS_AT_ONCE):
        b0 = p * ROWS_AT_ONCE
        b1, b2, b3 = min(b0 + 1, B - 1), min(b0 + 2, B - 1), min(b0 + 3, B - 1)
        # in one's dtype (a float times the integer 0 would be float64)
        l0, l1, l2, l3 = zero + a_in[b0], zero + a_in[b1], zero + a_in[b2], zero + a_in[b3]
        w0, w1, w2, w3 = zero + w_in[b0], zero + w_in[b1], zero + w_in[b2], zero + w_in[b3]
        for i in range(T):
            t = T - 1 - i
            w0, l0 = _finish_step(r, v, mask, term, b0, t, gamma, gamma_lmbda, one, adv, ret, w0, l0)
            w1, l1 = _finish_step(r, v, mask, term, b1, t, gamma, gamma_lmbda, one, adv, ret, w1, l1)
            w2, l2 = _finish_step(r, v, mask, term, b2, t, gamma, gamma_lmbda, one, adv, ret, w2, l2)
            w3, l3 = _finish_step(r, v, mask, term, b3, t, gamma, gamma_lmbda, one, adv, ret, w3, l3)
        out[0, b3], out[1, b3] = l3, w3
        out[0, b2], out[1, b2] = l2, w2
        out[0, b1], out[1, b1] = l1, w1
        out[0, b0], out[1, b0] = l0, w0
