"""Float64 reference for the linear scan (docs/semantics.md, "The linear scan")."""
import numpy as np

from ..._reference import as_f64, batch_f64, from_time_first, time_first


def linear_scan(alpha, beta, *, reverse=False, initial=None, time_dim=0):
    """``A_t = α_t + β_t A_{t∓1}``, with ``initial`` before the first step in scan order (NaN
    where ``β_t`` is not finite)."""
    shape = as_f64(alpha).shape
    a = time_first(alpha, time_dim)
    b = time_first(beta, time_dim, shape)
    state = batch_f64(initial, a)
    out = a.copy()
    steps = range(a.shape[0])
    for t in reversed(steps) if reverse else steps:
        state = np.where(np.isfinite(b[t]), a[t], np.nan) + b[t] * state
        out[t] = state
    return from_time_first(out, time_dim)
