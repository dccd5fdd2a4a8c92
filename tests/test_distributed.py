"""Whitening across ranks, on ``torch.distributed``'s gloo backend: 2 and 4 processes on
localhost, each test bounded in time.

Every rank holds a shard of one batch (shards of different lengths; one rank's mask keeps
nothing). :func:`rlscan.masked_whiten` and ``rlscan.gae(..., whiten=True)`` with
``group=`` (on padded rows, and on packed sequences with ``cu_seqlens``) must give each rank its shard of the concatenated batch's result (float64
rounding for the whitening alone), through exactly one collective, an
all-reduce of three float64 scalars, which each rank counts by wrapping
``torch.distributed``'s collectives. A batch with fewer than two kept positions in all
raises on every rank alike, as does a mask of other values than 0 and 1 on one rank, and no
rank is left waiting.
"""
from __future__ import annotations

import pytest
import torch

from rank_processes import counting, run
def _shards(world: int, dtype, empty_rank: int, kept: float = 0.7):
    """Each rank's ``(values, mask)``: ``[rows, 64]`` with rows varying by rank; the mask of
    ``empty_rank`` keeps nothing (``empty_rank = -1``: every rank keeps some)."""
    g = torch.Generator().manual_seed(7)
    shards = []
    for rank in range(world):
        rows = 3 + 2 * rank
        x = (torch.randn(rows, 64, generator=g) * 3 + 1.5).to(dtype)
        m = torch.rand(rows, 64, generator=g) < kept
        if rank == empty_rank:
            m[:] = False
        shards.append((x, m))
    return shards


def _case(rank: int, world: int, case: str) -> None:
    """One case on this rank; raises where it fails."""
    import torch.distributed as dist

    from rlscan import masked_whiten

    log: list = []
    if case in ("gae", "gae_dual", "gae_packed"):  # gae_dual: value_lmbda's returns beside the whitened advantages;
        import rlscan                                # gae_packed: each row a packed sequence (cu_seqlens)

        dual = dict(value_lmbda=1.0) if case == "gae_dual" else {}

        shards = _shards(world, torch.float32, empty_rank=world - 1)
        values = [torch.randn(x.shape, generator=torch.Generator().manual_seed(r)) for r, (x, _) in enumerate(shards)]
        x, m = shards[rank]
        originals = counting(dist, log)
        try:
            if case == "gae_packed":
                cu = torch.arange(x.shape[0] + 1) * x.shape[1]
                adv, ret = (o.view(x.shape) for o in rlscan.gae(x.flatten(), values[rank].flatten(), cu_seqlens=cu,
                                                                mask=m.flatten(), whiten=True, group=dist.group.WORLD,
                                                                gamma=0.99, lmbda=0.95))
            else:
                adv, ret = rlscan.gae(x, values[rank], mask=m, whiten=True, group=dist.group.WORLD, gamma=0.99,
                                      lmbda=0.95, time_dim=-1, **dual)
        finally:
            for name, fn in originals.items():
                setattr(dist, name, fn)
        whole = rlscan.gae(torch.cat([s[0] for s in shards]), torch.cat(values), mask=torch.cat([s[1] for s in shards]),
                           whiten=True, gamma=0.99, lmbda=0.95, time_dim=-1, **dual)
        start = sum(s[0].shape[0] for s in shards[:rank])
        for got, want in zip((adv, ret), whole):
            torch.testing.assert_close(got, want[start:start + x.shape[0]], rtol=1e-5, atol=1e-5)
    elif case == "bad_mask":  # one rank's mask holds a 2: every rank raises, none is left waiting
        shards = _shards(world, torch.float32, empty_rank=-1)
        x, m = shards[rank]
        m = m.long()
        if rank == 1:
            m[0, 0] = 2
        originals = counting(dist, log)
        try:
            with pytest.raises(ValueError, match="only 0 and 1"):
                masked_whiten(x, m, group=dist.group.WORLD)
        finally:
            for name, fn in originals.items():
                setattr(dist, name, fn)
    elif case == "too_few":
        shards = _shards(world, torch.float32, empty_rank=-1, kept=0.0)
        shards[0][1][0, 0] = True  # one kept position in all
        x, m = shards[rank]
        originals = counting(dist, log)
        try:
            with pytest.raises(ValueError, match="at least two"):
                masked_whiten(x, m, group=dist.group.WORLD)
        finally:
            for name, fn in originals.items():
                setattr(dist, name, fn)
    else:
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}[case]
        shards = _shards(world, dtype, empty_rank=world - 1)
        x, m = shards[rank]
        kwargs = dict(shift_mean=rank % 2 == 0, zero_skipped=rank == 1)
        numpy_in = dtype == torch.float32 and rank == 0  # numpy in, numpy out
        originals = counting(dist, log)
        try:
            got = masked_whiten(x.numpy() if numpy_in else x, m, group=dist.group.WORLD, **kwargs)
        finally:
            for name, fn in originals.items():
                setattr(dist, name, fn)
        got = torch.from_numpy(got) if numpy_in else got
        whole = masked_whiten(torch.cat([s[0].double().flatten() for s in shards]),
                              torch.cat([s[1].flatten() for s in shards]), **kwargs)
        start = sum(s[0].numel() for s in shards[:rank])
        want = whole[start:start + x.numel()].view(x.shape)
        assert got.dtype == x.dtype and got.shape == x.shape
        tol = {torch.float64: 1e-12, torch.float32: 2e-6, torch.bfloat16: 1e-2}[dtype]
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    assert log == [("all_reduce", 3 * 8)], (case, log)


@pytest.mark.parametrize("world,cases", [(2, ("float32", "too_few", "bad_mask", "gae", "gae_dual")),
                                           (4, ("bfloat16", "float64", "gae", "gae_packed"))])
def test_masked_whiten_across_ranks_is_the_whole_batchs(world, cases, tmp_path):
    run(_case, world, cases, tmp_path)


def test_group_outside_torch_distributed_is_refused_by_name():
    import rlscan

    with pytest.raises(ValueError, match="group: torch.distributed is not initialised"):
        rlscan.masked_whiten(torch.randn(4), torch.ones(4), group=object())
    with pytest.raises(ValueError, match="group= is the process group of the whitening"):
        rlscan.gae(torch.randn(4, 2), torch.randn(4, 2), mask=torch.ones(4, 2), group=object())
