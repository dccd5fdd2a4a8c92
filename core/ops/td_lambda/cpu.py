"""TD(λ) returns as a compiled CPU loop."""
from ..._cpu import coef, njit, no_flags, series_or_zeros


@njit
def td_lambda_loop(r, v, v_next, has_next, boot, term, trunc, gamma, lmbda, gamma_lmbda, per_step, one, out):
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
                lam = lmbda[t, i, j]
                gl = g * lam if per_step else gamma_lmbda
                alpha = r[t, i, j] + g * nu * (one - lam * kappa) * vn
                last = out[t + 1, i, j] if t < T - 1 else zero
                out[t, i, j] = alpha + gl * kappa * last


def run(layout, arrays, scalars, outs, dtype):
    r, v, nv, boot, term, trunc, g, lam = arrays
    gamma, lmbda, gamma_lmbda = scalars
    td_lambda_loop(
        r, series_or_zeros(layout, v, dtype), series_or_zeros(layout, nv, dtype), nv is not None,
        series_or_zeros(layout, boot, dtype)[:1] if boot is None else boot,
        no_flags(layout) if term is None else term, no_flags(layout) if trunc is None else trunc,
        coef(layout, g, gamma, dtype), coef(layout, lam, lmbda, dtype), dtype(gamma_lmbda),
        g is not None or lam is not None, dtype(1), *outs,
    )
