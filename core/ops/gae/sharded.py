"""``rlscan.gae(..., group=, sequence_sharded=True)``: GAE on sequences split along time
across the ranks of a context-parallel group.

Rank ``j`` of the ``R`` ranks holds the ``j``-th contiguous chunk of every sequence (rank 0
the first tokens; chunks may differ in length, or be empty). Over a chunk, the masked GAE
(docs/semantics.md, "Skipped steps") is ``Â_t = α_t + β_t Â_{t+1}`` with::

    kept t:     α_t = r_t + γ_t W'_t ν_t − V_t,   β_t = γ_t λ_t ν_t
    skipped t:  α_t = 0,                          β_t = 1

where ``W'_t`` is the value of the next kept token. Only two numbers per sequence come from
after the chunk: the advantage carried in, ``A_in`` (``Â`` at the next rank's first token),
and ``W_in``, the value of the first kept token after the chunk (``bootstrap_value`` past
the last rank). ``W_in`` enters only ``α_L`` of the chunk's last kept token ``L``, so the
chunk's first advantage is affine in them::

    Â_0 = a + k · A_in + c · W_in,   k = Π_t β_t,   c = γ_L ν_L Π_{t<L} β_t

``a`` is the chunk's scan with ``A_in = W_in = 0``. Each rank reduces its chunk to
``(a, k, c, V_F, has_kept)`` per sequence (``V_F`` its first kept value), one
``all_gather`` of those O(sequences) scalars gives every rank the later ranks' maps, and a
rank folds them from the last rank back to its own carries. It then scans its chunk again
from those carries, the same per-token arithmetic as the unsplit loop: only the carries'
rounding differs from the unsplit result.

``exact=True`` passes the exact carries instead, rank to rank from the last (a
point-to-point send of two scalars per sequence, ``R − 1`` hops): each rank scans its chunk
once, after the ranks behind it, so the ranks run one after another (latency for bits), and
the result is bit for bit the unsplit computation's.

Example, on every rank of ``cp_group`` (``rewards``, ``values``, ``mask``: this rank's
``[B, T_r]`` chunk; ``last_values``: ``[B]``, read on the last rank)::

    adv, ret = rlscan.gae(rewards, values, mask=mask, bootstrap_value=last_values, time_dim=-1,
                          group=cp_group, sequence_sharded=True, whiten=True)

On the CPU, ``[B, T_r]`` rows contiguous in time with float ``γ``, ``λ`` run the two compiled
loops of :mod:`.sharded_cpu`, reading the inputs in place; elsewhere (CUDA tensors, per-token
``γ``/``λ``, other layouts) ``_Chunk`` forms ``α`` and ``β`` with torch operations and runs
:func:`rlscan.linear_scan`.

No rank holds more than its chunk; the scalars travel as float64. A rank whose mask holds
other values than 0 and 1 still takes part in the exchange, with a flag that makes every
rank that depends on it raise after it (all of them with the ``all_gather``; with the chain,
the ranks before it, whose results would be wrong, and every rank through the whitening's
all-reduce): no rank is left waiting.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ... import _cpu_rows
from ..._call import Call, _compiling
from .. import _skip
from ..linear_scan import linear_scan

_FINE, _MASK_VALUES, _NO_BOOTSTRAP = 0.0, 1.0, 2.0  # what a rank reports besides its scalars


def distributed(group):
    """``torch.distributed``, checked to be usable with ``group``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("group: torch.distributed is not initialised (call torch.distributed.init_process_group)")
    if _compiling():
        raise ValueError("group: sequence_sharded=True runs outside torch.compile (collectives per call)")
    return dist


def run(call: Call, values, mask, bootstrap_value, terminated, g, lam, whiten: bool, group, exact: bool, out):
    """``(advantages, returns)`` of this rank's chunk (the inputs checked by ``gae``)."""
    dist = distributed(group)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    last_rank = rank == world - 1
    problem = _FINE
    if mask is not None and mask.dtype != torch.bool and mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
        problem = _MASK_VALUES  # reported through the exchange, so that no rank is left waiting
    elif mask is None and last_rank and bootstrap_value is None:
        problem = _NO_BOOTSTRAP
    chunk = _Rows.of(call, values, mask, terminated, g, lam) or _Chunk(call, values, mask, terminated, g, lam, exact)
    boot = torch.zeros(chunk.batch, dtype=torch.float64, device=call.device)
    if last_rank and bootstrap_value is not None:
        boot = bootstrap_value.reshape(-1).to(torch.float64)
    if exact:
        (adv, ret), problem = _chain(dist, group, rank, world, chunk, boot, problem)
        if problem == _NO_BOOTSTRAP or (problem == _MASK_VALUES and not whiten):
            _raise(problem)  # with whiten, the whitening's all-reduce makes every rank raise
    else:
        (adv, ret), problem = _gathered(dist, group, rank, world, chunk, boot, problem)
        if problem != _FINE:
            _raise(problem)
    dtype = call.result_dtype
    adv, ret = (x.to(dtype).movedim(-1, call.time_dim) for x in (adv, ret))
    if whiten:
        from ...whiten import masked_whiten

        adv = masked_whiten(adv, mask, group=group)
    if out is not None:
        outs = call.given_outputs(out, 2, (call.anchor, values, mask, terminated, bootstrap_value))
        for o, x in zip(outs, (adv, ret)):
            o.copy_(x)
        adv, ret = outs
    return call.finish((adv, ret))


def _raise(problem: float):
    if problem == _NO_BOOTSTRAP:
        raise ValueError("gae needs the value after the last step: with sequence_sharded=True and no mask, pass "
                         "bootstrap_value on the group's last rank (read there only)")
    _skip.raise_mask_values()


class _Chunk:
    """One rank's chunk, time last, in the compute dtype: the scan's ``α`` (with ``W_in = 0``)
    and ``β``, and per sequence its last kept token ``L`` (clamped to 0 where there is none)."""

    def __init__(self, call: Call, values, mask, terminated, g, lam, exact: bool):
        cd = call.compute_dtype
        move = (lambda x: None if x is None else x.movedim(call.time_dim, -1))
        self.exact = exact
        self.r = move(call.anchor).to(cd)
        self.v = move(values).to(cd)
        self.T = T = self.r.shape[-1]
        self.shape = self.r.shape
        self.batch = self.r[..., 0].numel() if T else math.prod(self.shape[:-1])
        keep = torch.ones((), dtype=torch.bool, device=call.device) if mask is None else move(mask) != 0
        keep = keep.expand(self.shape)
        self.nu = None if terminated is None else (move(terminated) == 0).to(cd)
        # the per-token coefficients as the CPU loop's step_coefs forms them, in the compute dtype
        self.g = torch.tensor(g.value, dtype=cd, device=call.device) if g.tensor is None else move(g.tensor).to(cd)
        lam_ = torch.tensor(lam.value, dtype=cd, device=call.device) if lam.tensor is None else move(lam.tensor).to(cd)
        if g.tensor is None and lam.tensor is None:
            gl = torch.tensor(g.value * lam.value, dtype=cd, device=call.device)
        else:
            gl = self.g * lam_
        # W'_t within the chunk (0 after its last kept token, where W_in comes in)
        if mask is None:
            after = self.v
        else:
            after = move(_skip.next_kept_values(call, values, None, mask, exact)).to(cd)
        wn = torch.empty(self.shape, dtype=cd, device=call.device)
        if T:
            wn[..., :-1] = after[..., 1:]
            wn[..., -1] = 0
        self.beta = torch.where(keep, gl if self.nu is None else gl * self.nu, 1).expand(self.shape).contiguous()
        self.alpha = torch.where(keep, self._delta(self.r, self.g, wn, self.nu, self.v), 0)
        index = torch.arange(1, T + 1, device=call.device, dtype=torch.int64)
        if T:
            last = torch.where(keep, index, 0).amax(-1, keepdim=True)
        else:
            last = torch.zeros(self.shape[:-1] + (1,), dtype=torch.int64, device=call.device)
        self.has = last.squeeze(-1) > 0
        self.L = (last - 1).clamp(min=0)
        first = torch.where(keep, T + 1 - index, 0).amax(-1, keepdim=True) if T else last
        self.first_value = self._at(self.v, (T - first).clamp(max=max(T - 1, 0)))

    @staticmethod
    def _delta(r, g, w, nu, v):
        """``r + γ W' ν − V`` in the loop's order (ν = 1 left out: a product by 1 is exact)."""
        gw = g * w
        return r + (gw if nu is None else gw * nu) - v

    def _at(self, x, index):
        """``x`` at one time index per sequence (flattened batch); 0 on an empty chunk."""
        if not self.T:
            return torch.zeros(self.batch, dtype=x.dtype, device=x.device)
        return x.expand(self.shape).gather(-1, index).reshape(-1)

    def reduce(self):
        """``(a, k, c, V_F, has_kept)`` per sequence, float64: ``Â_0 = a + k A_in + c W_in``."""
        f64 = torch.float64
        if not self.T:
            zero = torch.zeros(self.batch, dtype=f64, device=self.r.device)
            return zero, zero + 1, zero, zero, zero
        a = linear_scan(self.alpha, self.beta, reverse=True, time_dim=-1, exact=self.exact)[..., 0]
        k = self.beta.prod(-1, dtype=f64)
        beta_L = self.beta.gather(-1, self.L)
        self.beta.scatter_(-1, self.L, 1)  # Π_{t<L} β_t: past L every β is 1 (skipped tokens)
        before = self.beta.prod(-1, dtype=f64)
        self.beta.scatter_(-1, self.L, beta_L)
        gnu = self._at(self.g, self.L).to(f64)
        if self.nu is not None:
            gnu = gnu * self._at(self.nu, self.L).to(f64)
        c = torch.where(self.has.reshape(-1), gnu * before.reshape(-1), 0)
        return (a.reshape(-1).to(f64), k.reshape(-1), c, self.first_value.to(f64), self.has.reshape(-1).to(f64))

    def finish(self, a_in: torch.Tensor, w_in: torch.Tensor) -> tuple:
        """``(Â, R, Â_0, W)`` from the carries (flattened batch, float64): ``α_L`` with ``W_in`` in
        the loop's arithmetic, and the scan from ``A_in``; ``Â_0`` (``A_in`` on an empty chunk)
        and ``W``, the first kept value (``W_in`` where none), for the previous rank."""
        cd = self.r.dtype
        w_out = torch.where(self.has.reshape(-1), self.first_value.to(w_in.dtype), w_in)
        a_in, w_in = a_in.to(cd).reshape(self.shape[:-1]), w_in.to(cd).reshape(self.shape[:-1] + (1,))
        if not self.T:
            adv = torch.empty(self.shape, dtype=cd, device=self.r.device)
            return adv, adv + self.v, a_in.reshape(-1).to(w_out.dtype), w_out
        at = (lambda x: x.expand(self.shape).gather(-1, self.L))
        alpha_L = self._delta(at(self.r), at(self.g), w_in, None if self.nu is None else at(self.nu), at(self.v))
        alpha_L = torch.where(self.has.unsqueeze(-1), alpha_L, at(self.alpha))
        self.alpha.scatter_(-1, self.L, alpha_L)
        adv = linear_scan(self.alpha, self.beta, reverse=True, initial=a_in, time_dim=-1, exact=self.exact)
        return adv, adv + self.v, adv[..., 0].reshape(-1).to(w_out.dtype), w_out


class _Rows:
    """A chunk of ``[B, T]`` rows contiguous in time on the CPU path, with float ``γ`` and ``λ``:
    the compiled loops of :mod:`.sharded_cpu`, which read the inputs in place (one pass to
    reduce, one to finish)."""

    @staticmethod
    def of(call: Call, values, mask, terminated, g, lam):
        """The chunk as rows, or ``None`` where the loops do not apply."""
        if call.device.type != "cpu" or g.tensor is not None or lam.tensor is not None:
            return None
        if not _cpu_rows.readable((call.anchor, values), () if mask is None else (mask,)) or (
                terminated is not None and not _cpu_rows.readable((), (terminated,))):
            return None
        rows = [None if x is None else _cpu_rows.rows_of(x, call.time_dim)
                for x in (call.anchor, values, mask, terminated)]
        if any(x is None and given is not None for x, given in zip(rows, (call.anchor, values, mask, terminated))):
            return None
        return _Rows(call, rows, g.value, lam.value)

    def __init__(self, call: Call, rows, gamma: float, lmbda: float):
        cd = call.compute_dtype
        self.np_dtype = np.float64 if cd == torch.float64 else np.float32
        self.r = rows[0]
        self.cd = cd
        self.arrays = [None if x is None else _cpu_rows.array(x) for x in rows]
        self.scalars = (self.np_dtype(gamma), self.np_dtype(gamma * lmbda), self.np_dtype(1))
        self.batch, self.T = self.r.shape

    def _run(self, loop, name: str, *args):
        key = (name, _cpu_rows.signature(*self.arrays, *[a for a in args if isinstance(a, np.ndarray)]))
        groups = -(-self.batch // _cpu_rows.ROWS_AT_ONCE)
        _cpu_rows.run(loop, key, (groups, self.r.numel()), *self.arrays, *self.scalars, *args)

    def reduce(self):
        from .sharded_cpu import reduce_rows_loop

        out = np.empty((5, self.batch))
        self._run(reduce_rows_loop, "gae_sharded_reduce", out)
        return tuple(torch.from_numpy(out))

    def finish(self, a_in: torch.Tensor, w_in: torch.Tensor) -> tuple:
        from .sharded_cpu import finish_rows_loop

        adv, ret = (_cpu_rows.new_rows(self.r, self.cd) for _ in range(2))
        carries = np.empty((2, self.batch))
        a_in, w_in = (x.to(self.cd).numpy() for x in (a_in, w_in))
        self._run(finish_rows_loop, "gae_sharded_finish", a_in, w_in, adv.numpy(), ret.numpy(), carries)
        a_out, w_out = torch.from_numpy(carries)
        return adv, ret, a_out, w_out


def _gathered(dist, group, rank: int, world: int, chunk: _Chunk, boot, problem: float):
    """The carries from one ``all_gather`` of every rank's ``(a, k, c, V_F, has_kept, boot)``
    and its problem flag, folded from the last rank back to this one."""
    n = chunk.batch
    mine = torch.cat([torch.stack([*chunk.reduce(), boot]).reshape(-1),
                      torch.tensor([problem], dtype=torch.float64, device=boot.device)])
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine, group=group)
    problem = max(float(x[-1]) for x in every)
    if problem != _FINE:
        return (None, None), problem
    a_in = torch.zeros(n, dtype=torch.float64, device=boot.device)
    w_in = every[world - 1][5 * n:6 * n]
    for j in range(world - 1, rank, -1):
        a, k, c, first, has = every[j][:5 * n].view(5, n)
        a_in = a + k * a_in + c * w_in
        w_in = torch.where(has != 0, first, w_in)
    return chunk.finish(a_in, w_in)[:2], problem


def _chain(dist, group, rank: int, world: int, chunk: _Chunk, boot, problem: float):
    """The exact carries, received from the next rank (the last rank starts from ``(0, boot)``),
    and this chunk's own passed to the previous rank: ``(Â_0, first kept value)``, 2 scalars per
    sequence, and the problem flag (the larger of the received one and this rank's)."""
    n = chunk.batch
    if rank < world - 1:
        carried = torch.empty(2 * n + 1, dtype=torch.float64, device=boot.device)
        dist.recv(carried, src=dist.get_global_rank(group, rank + 1), group=group)
        a_in, w_in = carried[:n], carried[n:2 * n]
        problem = max(problem, float(carried[-1]))
    else:
        a_in, w_in = torch.zeros(n, dtype=torch.float64, device=boot.device), boot
    adv, ret, a_out, w_out = chunk.finish(a_in, w_in)
    if rank > 0:
        sent = torch.cat([a_out.to(torch.float64), w_out.to(torch.float64),
                          torch.tensor([problem], dtype=torch.float64, device=boot.device)])
        dist.send(sent, dst=dist.get_global_rank(group, rank - 1), group=group)
    return (adv, ret), problem
