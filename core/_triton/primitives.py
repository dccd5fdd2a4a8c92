"""What every scan kernel and every op's kernel functions share: the recurrence's pair
composition, loads and stores of tiles, the value ops' per-step terms, and which
environments a program owns.

Each kernel solves ``A_t = alpha_t + beta_t * A_{t-1}`` (forward) or
``A_t = alpha_t + beta_t * A_{t+1}`` (``REVERSE``) for a block of environments, carrying
the state in registers, so registers stay fixed whatever ``T`` is. A step is the affine map
``x -> alpha + beta*x``, the pair ``(alpha, beta)``; two steps compose into one pair
(:func:`compose`), which is associative, so a run of steps reduces to one pair and runs can
be scanned in parallel.

An op plugs in two ``@triton.jit`` functions:

* ``COEFFS(ins, strides, scalars, tile, T, ACC) -> (alpha, beta, keep)`` loads its raw
  inputs for a tile of (time, environment) positions and builds the recurrence's
  coefficients in registers; ``keep`` is a tuple of tiles the emit step needs again.
* ``EMIT(outs, strides, scalars, A, A_in, keep, tile, T)`` writes the outputs from the
  state ``A``; ``A_in`` is the state carried into each step (``A_{t+1}`` in reverse,
  ``A_{t-1}`` forward), for ops that read it (an ``EMIT`` whose source never names it
  spares the kernel the work: ``launch.state_in``). An ``EMIT`` that reads it writes its
  first output, when given, at every step of the tile: the tile kernel may keep ``A``
  there until ``EMIT`` runs.

A ``tile`` is the tuple ``(t, b_hi, b_lo, mask, batch_mask)``; element ``(t, b)`` of a
tensor with strides ``s`` is at ``t*s[0] + b_hi*s[1] + b_lo*s[2]`` (see ``_inputs``).
Scalars arrive as float64 values split into three float32 parts (``split``), because
Triton passes Python floats as float32. (The kernel argument is ``scalars``, not
``params``: Triton 3.6's argument binder has a local of that name, which shadows it.)

The kernels, which all take the same arguments, one file per family:

* ``tile_scan.py``: ``scan_kernel``, time in ``[BLOCK_T, BLOCK_B]`` tiles scanned across
  threads, for inputs contiguous along time; the two-launch chunk carry.
* ``stripe_scan.py``: ``stripe_kernel`` and ``block_kernel``, steps held in each thread,
  for inputs contiguous along environments.
* ``chained_scan.py``: ``chained_kernel``, ``chained_scan_kernel`` and
  ``chained_stripe_kernel``, one launch whose programs are chained across time by a
  decoupled look-back.
"""
import triton
import triton.language as tl


@triton.jit
def compose(a_first, b_first, a_then, b_then):
    """Apply ``x -> a_first + b_first*x``, then ``x -> a_then + b_then*x``."""
    return a_then + b_then * a_first, b_then * b_first


@triton.jit
def compose_exclusive(a_first, b_first, ea_first, eb_first, a_then, b_then, ea_then, eb_then):
    """:func:`compose` of two runs ``(a, b)``, and of the first run with the second run's
    ``(ea, eb)``: everything in it before its last step. Scanned over ``(α, β, 0, 1)``, the
    last two give each step the map of the steps before it in scan order (an exclusive scan),
    without reading a neighbour's result across threads."""
    return a_then + b_then * a_first, b_then * b_first, ea_then + eb_then * a_first, eb_then * b_first


@triton.jit
def nan_where_unbounded(x, factor):
    """``x`` where ``factor`` is finite, NaN where it is ±inf or NaN (docs/semantics.md,
    "Numbers"): ``α_t`` with ``β_t`` as the factor. A scan multiplies several steps' ``β``
    together before they meet the state, so ``∞ · A`` would come out ``∞ − ∞`` in one
    order and ``±∞`` in another."""
    # |factor| < inf, not (factor − factor) == 0: compiled for the GPU, the select on that
    # compare returned wrong values for finite factors (Retrace's α everywhere), which
    # Triton's interpreter does not show; tools/gpu_check.py checks it on a GPU
    return tl.where(tl.abs(factor) < float("inf"), x, factor - factor)


@triton.jit
def scalar(parts, ACC: tl.constexpr):
    """A float64 scalar passed as three float32 parts, in the compute dtype."""
    hi, mid, lo = parts
    if ACC == tl.float64:
        return tl.cast(hi, tl.float64) + tl.cast(mid, tl.float64) + tl.cast(lo, tl.float64)
    else:
        return tl.cast(hi, ACC)


@triton.jit
def offsets(s, t, tile):
    off = t * s[0] + tile[1] * s[1] + tile[2] * s[2]
    if len(off.shape) == 3:
        # a block_kernel block: at most 4 contiguous environments per thread, so that the
        # compiler spreads environments and stripes across all threads and keeps steps in each;
        # a one-stripe block narrower than 128 environments takes fewer per thread, so that a
        # warp's 32 threads still lie along its environments
        if off.shape[1] == 1 and off.shape[2] < 128:
            off = tl.max_contiguous(off, [1, 1, max(1, off.shape[2] // 32)])
        else:
            off = tl.max_contiguous(off, [1, 1, 4])
    return off


@triton.jit
def load(P, s, tile, ACC: tl.constexpr):
    """The tile of a ``[T, B]`` series, in the compute dtype (0 outside the mask)."""
    return tl.load(P + offsets(s, tile[0], tile), mask=tile[3], other=0).to(ACC)


@triton.jit
def load_or_zero(P, s, tile, ACC: tl.constexpr):
    """The tile of a series, or zeros where ``P`` is None (an output's gradient autograd left out)."""
    if P is None:
        return tl.zeros(tile[3].shape, ACC)
    else:
        return load(P, s, tile, ACC)


@triton.jit
def load_shifted(P, s, tile, shift: tl.constexpr, T, ACC: tl.constexpr):
    """The series at ``t + shift``, 0 where that falls outside ``[0, T)``."""
    t = tile[0] + shift
    return tl.load(P + offsets(s, t, tile), mask=tile[3] & (t >= 0) & (t < T), other=0).to(ACC)


@triton.jit
def load_batch(P, s, tile, ACC: tl.constexpr):
    """A per-environment value (a ``[*B]`` tensor) as a ``[1, BLOCK_B]`` row."""
    return tl.load(P + tile[1] * s[1] + tile[2] * s[2], mask=tile[4], other=0).to(ACC)


@triton.jit
def load_flag(P, s, tile, shift: tl.constexpr, T):
    """Where a flag is set (non-zero) at ``t + shift``; all False when ``P`` is None."""
    if P is None:
        return tl.zeros(tile[3].shape, tl.int1)
    else:
        t = tile[0] + shift
        return tl.load(P + offsets(s, t, tile), mask=tile[3] & (t >= 0) & (t < T), other=0) != 0


@triton.jit
def load_coef(P, s, tile, parts, shift: tl.constexpr, T, ACC: tl.constexpr):
    """A per-step coefficient (gamma, lambda) at ``t + shift``: the tensor when given, else the scalar."""
    if P is None:
        return scalar(parts, ACC)
    else:
        t = tile[0] + shift
        return tl.load(P + offsets(s, t, tile), mask=tile[3] & (t >= 0) & (t < T), other=0).to(ACC)


@triton.jit
def step_terms(TERM, s_term, TRUNC, s_trunc, GAMMA, s_gamma, LMBDA, s_lmbda, scalars, tile, SHIFT: tl.constexpr, T,
               ACC: tl.constexpr):
    """At ``t + SHIFT``: ``(ν, κ, γ, λ)``, the bootstrap mask ``1 − terminated``, the
    continuation (0 where terminated or truncated and at the last step), and the per-step
    coefficients (tensors, or the scalars ``scalars[0]`` and ``scalars[1]``)."""
    term = load_flag(TERM, s_term, tile, SHIFT, T)
    done = term | load_flag(TRUNC, s_trunc, tile, SHIFT, T)
    nu = (~term).to(ACC)
    kappa = ((~done) & (tile[0] + SHIFT < T - 1)).to(ACC)
    gamma = load_coef(GAMMA, s_gamma, tile, scalars[0], SHIFT, T, ACC)
    lmbda = load_coef(LMBDA, s_lmbda, tile, scalars[1], SHIFT, T, ACC)
    return nu, kappa, gamma, lmbda


@triton.jit
def value_after(V, sV, NV, sNV, BOOT, sBOOT, tile, T, ACC: tl.constexpr):
    """``V'_t``: ``next_values[t]`` if given, else ``V[t+1]``, with the bootstrap at ``t = T-1``."""
    if NV is not None:
        return load(NV, sNV, tile, ACC)
    else:
        t = tile[0]
        if V is not None:
            nxt = load_shifted(V, sV, tile, 1, T, ACC)
        else:
            nxt = tl.zeros(tile[3].shape, ACC)
        if BOOT is not None:
            nxt = tl.where(t == T - 1, load_batch(BOOT, sBOOT, tile, ACC), nxt)
        return nxt


@triton.jit
def store(P, s, tile, x):
    tl.store(P + offsets(s, tile[0], tile), x, mask=tile[3])


@triton.jit
def _along_first_axis(n: tl.constexpr, like):
    """``0 .. n-1`` along the first axis of a tensor of ``like``'s rank (2 or 3)."""
    if len(like.shape) == 3:
        return tl.arange(0, n)[:, None, None]
    else:
        return tl.arange(0, n)[:, None]


@triton.jit
def row(x, i, BLOCK_T: tl.constexpr, KEEP_DIMS: tl.constexpr = True):
    """Row ``i`` along the first axis of a tile (``[BLOCK_T, BLOCK_B]``, or a block
    ``[STEPS, STRIPES, BLOCK_B]``), that axis kept with length 1 or dropped."""
    return tl.sum(tl.where(_along_first_axis(BLOCK_T, x) == i, x, 0), axis=0, keep_dims=KEEP_DIMS)


@triton.jit
def split_envs(b, B_lo, TWO_LEVEL: tl.constexpr):
    """Environment indices ``b`` split in two levels, ``b = b_hi * B_lo + b_lo`` (``b_hi = 0``,
    ``b_lo = b`` for one level): the ``(b_hi, b_lo)`` that ``t*s[0] + b_hi*s[1] + b_lo*s[2]`` takes."""
    if TWO_LEVEL:
        b_hi = b // B_lo
        b_lo = b % B_lo
    else:
        b_hi = b * 0
        b_lo = b
    return b_hi, b_lo


@triton.jit
def _envs(pid_b, B, B_lo, BLOCK_B: tl.constexpr, TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr):
    """Environment block ``pid_b``: indices ``b``, their two-level split, and the mask ``b < B``."""
    b = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)[None, :]
    if WIDE:
        b = b.to(tl.int64)
    b_hi, b_lo = split_envs(b, B_lo, TWO_LEVEL)
    return b, b_hi, b_lo, b < B


@triton.jit
def _initial(INIT, init_strides, b_hi, b_lo, mb, ACC: tl.constexpr, BLOCK_B: tl.constexpr):
    """The state carried into the first step in scan order: ``INIT``, or zeros."""
    if INIT is not None:
        return tl.load(INIT + b_hi * init_strides[1] + b_lo * init_strides[2], mask=mb, other=0).to(ACC)
    else:
        return tl.zeros([1, BLOCK_B], ACC)
