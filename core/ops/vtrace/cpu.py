"""V-trace as a compiled CPU loop (absent inputs are ``None``; see gae/cpu.py)."""
import numpy as np

from ..._cpu import exp, njit, prange


@njit
def vtrace_loop(r, v, rhos, v_next, boot, term, trunc, gammas, lmbdas, gamma, lmbda,
                rho_clip, c_clip, pg_rho_clip, one, vs, pg):
    T, Bh, Bl = r.shape
    zero = one - one
    vs_minus_v = np.zeros_like(r[0])
    for i in prange(Bh):
        for k in range(T):  # ascending, as in gae_loop
            t = T - 1 - k
            last_step = k == 0
            for j in range(Bl):
                if v_next is not None:
                    vn = v_next[t, i, j]
                else:  # nested checks, so numba prunes whichever of v and boot is None
                    vn = zero
                    if boot is not None:
                        if last_step:
                            vn = boot[0, i, j]
                    if v is not None:
                        if not last_step:
                            vn = v[t + 1, i, j]
                terminated = False
                if term is not None:
                    terminated = term[t, i, j] != 0
                ended = terminated
                if trunc is not None:
                    ended = ended or trunc[t, i, j] != 0
                nu = zero if terminated else one
                inside = not (ended or last_step)
                kappa = one if inside else zero
                g = gamma
                if gammas is not None:
                    g = gammas[t, i, j]
                lam = lmbda
                if lmbdas is not None:
                    lam = lmbdas[t, i, j]
                rho = rhos[t, i, j]
                rho_bar = min(rho, rho_clip)
                c = lam * min(rho, c_clip)
                delta = rho_bar * (r[t, i, j] + g * vn * nu - v[t, i, j])
                last = vs_minus_v[i, j] if not last_step else zero
                a = delta + g * c * kappa * last
                vs_minus_v[i, j] = a
                vs[t, i, j] = v[t, i, j] + a
                rho_pg = min(rho, pg_rho_clip)
                v_ahead = v[t + 1, i, j] if inside else vn
                base = rho_pg * (r[t, i, j] + g * nu * v_ahead - v[t, i, j])
                pg[t, i, j] = base + rho_pg * (g * nu) * last if inside else base


def run(layout, arrays, scalars, outs, dtype):
    r, v, log_rho, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, rho_clip, c_clip, pg_rho_clip = scalars
    rhos = exp(log_rho)
    vtrace_loop(r, v, rhos, nv, boot, term, trunc, g, lam, dtype(gamma), dtype(lmbda),
                dtype(rho_clip), dtype(c_clip), dtype(pg_rho_clip), dtype(1), *outs)
