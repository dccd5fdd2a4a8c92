"""V-trace as a compiled CPU loop."""
import numpy as np

from ..._cpu import coef, njit, no_flags, series_or_zeros


@njit
def vtrace_loop(r, v, log_rho, v_next, has_next, boot, term, trunc, gamma, lmbda,
                rho_clip, c_clip, pg_rho_clip, one, vs, pg):
    T, Bh, Bl = r.shape
    zero = one - one
    vs_minus_v = np.zeros_like(r[0])
    for t in range(T - 1, -1, -1):
        for i in range(Bh):
            for j in range(Bl):
                if has_next:
                    vn = v_next[t, i, j]
                elif t == T - 1:
                    vn = boot[0, i, j]
                else:
                    vn = v[t + 1, i, j]
                terminated = term[t, i, j] != 0
                nu = zero if terminated else one
                cont = not (terminated or trunc[t, i, j] != 0 or t == T - 1)
                kappa = one if cont else zero
                g = gamma[t, i, j]
                rho = np.exp(log_rho[t, i, j])
                rho_bar = min(rho, rho_clip)
                c = lmbda[t, i, j] * min(rho, c_clip)
                delta = rho_bar * (r[t, i, j] + g * vn * nu - v[t, i, j])
                last = vs_minus_v[i, j] if t < T - 1 else zero
                a = delta + g * c * kappa * last
                vs_minus_v[i, j] = a
                vs[t, i, j] = v[t, i, j] + a
                v_hat = vs[t + 1, i, j] if cont else vn
                pg[t, i, j] = min(rho, pg_rho_clip) * (r[t, i, j] + g * nu * v_hat - v[t, i, j])


def run(layout, arrays, scalars, outs, dtype):
    r, v, log_rho, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, rho_clip, c_clip, pg_rho_clip = scalars
    vtrace_loop(
        r, v, log_rho, series_or_zeros(layout, nv, dtype), nv is not None,
        series_or_zeros(layout, boot, dtype)[:1] if boot is None else boot,
        no_flags(layout) if term is None else term, no_flags(layout) if trunc is None else trunc,
        coef(layout, g, gamma, dtype), coef(layout, lam, lmbda, dtype),
        dtype(rho_clip), dtype(c_clip), dtype(pg_rho_clip), dtype(1), *outs,
    )
