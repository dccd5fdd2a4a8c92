"""GAE as a compiled CPU loop, in the order of Stable-Baselines3's and CleanRL's loops."""
from ..._cpu import coef, njit, no_flags, series_or_zeros


@njit
def gae_loop(r, v, v_next, has_next, boot, term, trunc, gamma, lmbda, gamma_lmbda, per_step, one, adv, ret):
    T, Bh, Bl = r.shape
    zero = one - one
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
                kappa = zero if (terminated or trunc[t, i, j] != 0 or t == T - 1) else one
                g = gamma[t, i, j]
                gl = g * lmbda[t, i, j] if per_step else gamma_lmbda
                delta = r[t, i, j] + g * vn * nu - v[t, i, j]
                last = adv[t + 1, i, j] if t < T - 1 else zero
                a = delta + gl * kappa * last
                adv[t, i, j] = a
                ret[t, i, j] = a + v[t, i, j]


def run(layout, arrays, scalars, outs, dtype):
    r, v, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    gae_loop(
        r, v, series_or_zeros(layout, nv, dtype), nv is not None,
        series_or_zeros(layout, boot, dtype)[:1] if boot is None else boot,
        no_flags(layout) if term is None else term, no_flags(layout) if trunc is None else trunc,
        coef(layout, g, gamma, dtype), coef(layout, lam, lmbda, dtype), dtype(gamma_lmbda),
        g is not None or lam is not None, dtype(1), *outs,
    )
