"""The two loops of :mod:`rlscan.ops.gae.sharded` on the CPU path, over ``[B, T]`` rows
contiguous in time (each rank's chunk of every sequence), each row walked from its end in
the order of ``cpu.gae_masked_loop``:

- ``reduce_rows_loop``: the chunk's affine map, ``(a, k, c, V_F, has_kept)`` per row in
  float64 (``Â_0 = a + k A_in + c W_in``; ``V_F`` the first kept value), reading the
  inputs once and writing nothing else;
- ``finish_rows_loop``: the advantages and returns from the carries ``(A_in, W_in)``, the
  masked loop's per-token arithmetic, and what the previous rank needs, ``(Â_0, W)`` where
  ``W`` is the first kept value (``W_in`` where the chunk keeps nothing).

``mask`` and ``term`` may be ``None`` (every step kept; no terminations): numba compiles a
version without them.
"""
import numpy as np

from ..._cpu import njit, prange
from ..._cpu_rows import load_value, step_helper


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


@njit
def reduce_rows_loop(r, v, mask, term, gamma, gamma_lmbda, one, out):
    B, T = r.shape
    zero = one - one
    for b in prange(B):
        a, wn = zero, zero
        k, c, seen = 1.0, 0.0, 0.0
        for s in range(T):
            t = T - 1 - s
            kept, nu = _kept(mask, term, b, t, one)
            if kept:
                vt = load_value(v, b, t, one)
                a = load_value(r, b, t, one) + gamma * wn * nu - vt + gamma_lmbda * nu * a
                beta = np.float64(gamma_lmbda * nu)
                if seen == 0.0:  # the last kept step: W_in enters its α with γ ν
                    c = np.float64(gamma * nu)
                    seen = 1.0
                else:
                    c *= beta
                k *= beta
                wn = vt
        out[0, b] = a
        out[1, b] = k
        out[2, b] = c
        out[3, b] = wn
        out[4, b] = seen


@njit
def finish_rows_loop(r, v, mask, term, gamma, gamma_lmbda, one, a_in, w_in, adv, ret, out):
    B, T = r.shape
    zero = one - one
    for b in prange(B):
        last = zero + a_in[b]  # in one's dtype (a float times the integer 0 would be float64)
        wn = zero + w_in[b]
        for s in range(T):
            t = T - 1 - s
            kept, nu = _kept(mask, term, b, t, one)
            vt = load_value(v, b, t, one)
            if kept:
                a = load_value(r, b, t, one) + gamma * wn * nu - vt + gamma_lmbda * nu * last
                wn = vt
            else:
                a = last
            adv[b, t] = a
            ret[b, t] = a + vt
            last = a
        out[0, b] = last
        out[1, b] = wn
