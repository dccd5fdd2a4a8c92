"""``retrace_from_q`` on the GPU in two kernels: a prologue reads the action tables once, in
memory order, and writes the per-step series of :func:`rlscan.retrace`::

    q_t = Q[t, a_t],   E_t = Σ_a π[t, a] Q[t, a],   log ρ_t = log π[t, a_t] − log μ_t

then the plain Retrace scan runs on them: the tables are read in memory order once, where
reducing them inside the scan's tiles reads them in the scan's order (docs/benchmarks.md
has the comparison). The exact path keeps the fused kernel. The dispatcher runs this plan
as a variant of the op's launch plan (``rlscan._dispatch``), the fused kernel's plan as its
fallback.

A program of the prologue reads the settings table's ``retrace_table_elements`` positions
times actions, its actions ``retrace_max_block_a`` at a time (the table's ``policy``, with
their reasons; ``rlscan plan retrace`` prints them). Contiguous inputs (every series in one
memory order, the tables in rows of consecutive actions, up to ``retrace_max_block_a`` of
them) take the prologue's vector path: no position is
divided into its indices and the number of actions is a compile-time constant, so the rows
load as 16-byte vectors for 4 actions (8 bytes for 6 or 18); anything else takes the
strided path.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..._triton import launch, policy
from ..._triton.primitives import split_envs

_ALIGN = 256  # bytes: each scratch series starts as aligned as a fresh allocation's, for the vector loads


@triton.jit
def table_prologue_kernel(Q, sq, P, sp, ACT, s_act, MU, s_mu, QT, E, LR, s_out, T, B, B_lo,
                          ACC: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_A: tl.constexpr, TIME_FAST: tl.constexpr,
                          TWO_LEVEL: tl.constexpr, WIDE: tl.constexpr, FLAT_A: tl.constexpr):
    """``BLOCK_P`` positions of the ``[T, B]`` grid, taken in memory order (time fastest for
    inputs contiguous along time), each with its row of actions: ``q``, ``E`` and ``log ρ``
    (NaN ``q`` for an action outside ``[0, A)``).

    ``FLAT_A > 0``: for some numbering ``p`` of the positions, every series lies at ``p`` and
    both tables at ``p * FLAT_A + a`` (contiguous inputs, any order of axes), so no index is
    divided and, with the number of actions known to the compiler, a thread's row of actions
    is one vector load where ``FLAT_A`` allows (16 bytes for 4 actions, 8 for 6 or 18)."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    if WIDE:
        p = tl.program_id(0).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    if WIDE:
        m = p < T.to(tl.int64) * B
    else:
        m = p < T * B
    if FLAT_A > 0:
        a = tl.load(ACT + p, mask=m, other=0)
        mu = tl.load(MU + p, mask=m, other=0).to(ACC)
        valid = (a >= 0) & (a < FLAT_A)
        e = tl.zeros([BLOCK_P], ACC)
        q = tl.zeros([BLOCK_P], ACC)
        p_taken = tl.zeros([BLOCK_P], ACC)
        # the actions in runs of 2**j, one for each bit of FLAT_A (18 = 2 + 16): no lane masked off
        for j in tl.static_range(7):
            if (FLAT_A >> j) & 1:
                k = (FLAT_A & ((1 << j) - 1)) + tl.arange(0, 1 << j)[None, :]
                row = (p * FLAT_A)[:, None] + k
                qk = tl.load(Q + row, mask=m[:, None], other=0).to(ACC)
                pk = tl.load(P + row, mask=m[:, None], other=0).to(ACC)
                hit = k == a[:, None]
                e += tl.sum(qk * pk, axis=1)
                q += tl.sum(tl.where(hit, qk, 0), axis=1)
                p_taken += tl.sum(tl.where(hit, pk, 0), axis=1)
        off = p
    else:
        if TIME_FAST:
            t = p % T
            b = p // T
        else:
            t = p // B
            b = p % B
        b_hi, b_lo = split_envs(b, B_lo, TWO_LEVEL)
        n_actions = sq[4]
        a = tl.load(ACT + t * s_act[0] + b_hi * s_act[1] + b_lo * s_act[2], mask=m, other=0)
        mu = tl.load(MU + t * s_mu[0] + b_hi * s_mu[1] + b_lo * s_mu[2], mask=m, other=0).to(ACC)
        valid = (a >= 0) & (a < n_actions)
        q_row = (t * sq[0] + b_hi * sq[1] + b_lo * sq[2])[:, None]
        p_row = (t * sp[0] + b_hi * sp[1] + b_lo * sp[2])[:, None]
        e = tl.zeros([BLOCK_P], ACC)
        q = tl.zeros([BLOCK_P], ACC)
        p_taken = tl.zeros([BLOCK_P], ACC)
        for a0 in range(0, n_actions, BLOCK_A):
            k = a0 + tl.arange(0, BLOCK_A)[None, :]
            mk = m[:, None] & (k < n_actions)
            qk = tl.load(Q + q_row + k * sq[3], mask=mk, other=0).to(ACC)
            pk = tl.load(P + p_row + k * sp[3], mask=mk, other=0).to(ACC)
            hit = k == a[:, None]
            e += tl.sum(qk * pk, axis=1)
            q += tl.sum(tl.where(hit, qk, 0), axis=1)
            p_taken += tl.sum(tl.where(hit, pk, 0), axis=1)
        off = t * s_out[0] + b_hi * s_out[1] + b_lo * s_out[2]
    zero = q * 0
    q = tl.where(valid, q, zero / zero)
    p_taken = tl.where(valid, p_taken, 1)
    tl.store(QT + off, q, mask=m)
    tl.store(E + off, e, mask=m)
    tl.store(LR + off, tl.log(p_taken) - mu, mask=m)


def _extents(layout):
    return layout.T, (layout.B // layout.B_lo if layout.two_level else 1), layout.B_lo


def _dense(layout, strides) -> bool:
    """Whether ``[T, B]`` strides ``(s_t, s_hi, s_lo)`` cover ``T * B`` consecutive elements,
    each once (the axes in any order; the stride of an axis of one element never matters)."""
    axes = sorted((s, n) for n, s in zip(_extents(layout), strides[:3]) if n > 1)
    step = 1
    for s, n in axes:
        if s != step:
            return False
        step *= n
    return True


def _flat(layout, strides, like, unit) -> bool:
    """Whether a tensor lies at ``p * unit`` wherever ``like`` (dense) lies at ``p``."""
    return all(n == 1 or s == unit * r for n, s, r in zip(_extents(layout), strides[:3], like[:3]))


class TablePlan:
    """The launch plan of ``retrace_from_q``'s two kernels for one signature: the prologue
    (:func:`table_prologue_kernel`) into three scratch series laid out like the first output,
    then the plain Retrace plan (``inner``) on them. If either fails to compile or launch on
    this stack, ``fallback()`` builds the plan that runs from then on (the fused kernel, with
    its own chain of settings), after one warning."""

    def __init__(self, layout, in_strides, outs, out_strides, *, compute_dtype, time_contiguous, device, wide,
                 inner_plan, fallback=None):
        n_actions = in_strides[1][4]
        table = launch.policy_table(device)
        max_block_a = policy.value("retrace_max_block_a", table)
        self.block_a = min(max_block_a, triton.next_power_of_2(n_actions))
        self.block_p = max(16, policy.value("retrace_table_elements", table) // self.block_a)
        self.layout, self.in_strides, self.out_strides = layout, in_strides, out_strides
        self.compute_dtype, self.device = compute_dtype, device
        self.grid = (math.ceil(layout.T * layout.B / self.block_p), 1, 1)
        fast = bool(time_contiguous)
        # every input and the scratch series in one memory order, the tables in rows of actions
        flat = (n_actions <= max_block_a and in_strides[1][3] == 1 and in_strides[2][3] == 1
                and _dense(layout, out_strides)
                and all(_flat(layout, in_strides[i], out_strides, n_actions) for i in (1, 2))
                and all(_flat(layout, in_strides[i], out_strides, 1) for i in (3, 4)))
        self.constexprs = dict(ACC=launch._acc_dtype(compute_dtype), BLOCK_P=self.block_p, BLOCK_A=self.block_a,
                               TIME_FAST=fast, TWO_LEVEL=layout.two_level,
                               WIDE=wide or layout.T * layout.B >= 2**31, FLAT_A=n_actions if flat else 0)
        self.inner = inner_plan
        self.compiled = None
        self.series_bytes = None  # the bytes of one scratch series, rounded up to ``_ALIGN``
        self.fallback, self.replaced_by = fallback, None

    @property
    def cfg(self):
        return self.inner.cfg

    def scratch(self, like: torch.Tensor) -> tuple:
        """The three scratch series, strided like ``like``. Once both kernels launch directly,
        one allocation holds all three and they are passed as addresses (the compiled
        launchers take an address for a pointer): at small shapes a ``torch.empty`` costs
        more host time than the prologue's launch. The first calls, which go through
        Triton's ``JITFunction`` (it specialises on tensors), get three tensors."""
        inner = self.inner
        if self.compiled is None or inner.unchecked or len(inner.compiled) < len(inner.phases):
            return tuple(torch.empty_strided(like.shape, like.stride(), dtype=self.compute_dtype, device=like.device)
                         for _ in range(3)), None
        if self.series_bytes is None:
            item = torch.finfo(self.compute_dtype).bits // 8  # the scratch's dtype, not the output's
            size = item * (1 + sum((n - 1) * s for n, s in zip(like.shape, like.stride())))
            self.series_bytes = -(-size // _ALIGN) * _ALIGN
        buffer = torch.empty(3 * self.series_bytes, dtype=torch.uint8, device=like.device)
        base = buffer.data_ptr()
        return (base, base + self.series_bytes, base + 2 * self.series_bytes), buffer

    def __call__(self, ins, outs, scalars) -> None:
        if self.replaced_by is not None:
            self.replaced_by(ins, outs, scalars)
            return
        try:
            self._run(ins, outs, scalars)
        except Exception as exc:  # noqa: BLE001 - a kernel this stack cannot compile or launch
            if self.fallback is None:
                raise
            launch._warn_fallback(self.cfg, exc, "the fused Retrace kernel (no table prologue)")
            self.replaced_by = self.fallback()
            self.replaced_by(ins, outs, scalars)

    def _run(self, ins, outs, scalars) -> None:
        r, q_values, probs, actions, mu, ne, boot, term, trunc, g, lam = ins
        like = next(o for o in outs if o is not None)
        (q, e, log_rho), _buffer = self.scratch(like)  # the buffer lives until both kernels are queued
        s = self.in_strides
        args = (q_values, s[1], probs, s[2], actions, s[3], mu, s[4], q, e, log_rho, self.out_strides,
                self.layout.T, self.layout.B, self.layout.B_lo)
        self._launch(args)
        self.inner((r, q, e, log_rho, ne, boot, term, trunc, g, lam), outs, scalars)

    def _launch(self, args) -> None:
        """Through Triton's ``JITFunction`` the first time, then the compiled kernel's launcher
        directly, as ``LaunchPlan`` does."""
        if self.compiled is not None:
            launch.direct_launch(self.compiled, self.grid, self.device.index, args)
            return
        self.compiled = launch.first_launch(table_prologue_kernel, self.grid, args, self.constexprs, 4)


def plan(layout, ins, in_strides, outs, out_strides, *, compute_dtype, time_contiguous, device, wide, init_strides,
         fallback=None):
    """The two-kernel plan (:class:`TablePlan`); its inner plan is plain Retrace's, on scratch
    series strided like the first output."""
    from . import kernel

    r, q_values, probs, actions, mu, ne, boot, term, trunc, g, lam = ins
    like = next(o for o in outs if o is not None)
    s = in_strides
    inner = launch.LaunchPlan((kernel.coeffs, kernel.emit, True), layout,
                              (r, like, like, like, ne, boot, term, trunc, g, lam),
                              (s[0], out_strides, out_strides, out_strides) + tuple(s[5:]), outs, out_strides,
                              init_strides, compute_dtype=compute_dtype, time_contiguous=time_contiguous, exact=False,
                              device=device, wide=wide, init_of=None)
    return TablePlan(layout, in_strides, outs, out_strides, compute_dtype=compute_dtype,
                     time_contiguous=time_contiguous, device=device, wide=wide, inner_plan=inner, fallback=fallback)
