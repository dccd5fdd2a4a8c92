"""The next kept value's coefficients for the scan engine (docs/semantics.md, "Skipped steps")."""
import triton
import triton.language as tl

from ..._triton.primitives import load, load_flag, store


@triton.jit
def coeffs(ins, s, scalars, tile, T, ACC: tl.constexpr):
    """``α_t = m_t V_t``, ``β_t = 1 − m_t`` (a selection: no arithmetic on the values)."""
    V, BOOT, MASK = ins
    v = load(V, s[0], tile, ACC)
    kept = load_flag(MASK, s[2], tile, 0, T)
    return tl.where(kept, v, 0), (~kept).to(ACC), (v,)


@triton.jit
def emit(outs, s, scalars, A, A_in, keep, tile, T):
    (OUT,) = outs
    store(OUT, s, tile, A)
