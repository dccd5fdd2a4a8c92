"""``rlscan.gae(..., group=, sequence_sharded=True)`` on ``torch.distributed``'s gloo
backend: 2 and 4 processes on localhost, each test bounded in time.

Every rank builds the same random ``[B, T]`` batch and takes its chunk of every sequence
along time (uneven cuts; some chunks empty, some whose mask keeps nothing on some rows, the
last rank's among them). The chunks' results, side by side, must be the unsplit
``rlscan.gae``'s: at float32 rounding, and bit for bit with ``exact=True``; with a mask,
terminated flags inside the chunks, a bootstrap value, per-token γ/λ, ``[T, B]`` layouts and
``whiten=True``. Each rank counts what it sends through ``torch.distributed`` (its
functions wrapped): one ``all_gather`` of ``6 B + 1`` float64 scalars (exact: one ``send``
of ``2 B + 1``), the same for every ``T``. A mask of other values than 0 and 1 on one rank,
or no bootstrap on the last rank without a mask, raises without leaving a rank waiting.
"""
from __future__ import annotations

import math

import pytest
import torch

from rank_processes import counting, run

B = 6


def _batch(T: int, cuts: list, seed: int = 3):
    """The whole batch ``[B, T]``: rewards, values, mask, terminated, bootstrap, per-token γ, λ.
    The mask keeps nothing in the chunk before the last cut on the first half of the rows."""
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    mask = torch.rand(B, T, generator=g) < 0.7
    mask[: B // 2, cuts[-3]:cuts[-2]] = False
    term = torch.rand(B, T, generator=g) < 0.04
    boot = torch.randn(B, generator=g)
    gammas = 0.9 + 0.1 * torch.rand(B, T, generator=g)
    lmbdas = 0.8 + 0.2 * torch.rand(B, T, generator=g)
    return r, v, mask, term, boot, gammas, lmbdas


def _call(rlscan, dist, tensors, kind: str, exact: bool, group, time_first: bool, sliced):
    """``rlscan.gae`` on ``tensors`` (whole, or this rank's chunk when ``group``)."""
    r, v, mask, term, boot, gammas, lmbdas = (sliced(x) for x in tensors)
    kw = dict(terminated=term, bootstrap_value=boot, exact=exact)
    if kind != "unmasked":
        kw["mask"] = mask
    if kind == "per_token":
        kw.update(gamma=gammas, lmbda=lmbdas)
    if kind == "whiten":
        kw["whiten"] = True
    if group is not None:
        kw.update(group=group, sequence_sharded=True)
        if kind == "out":  # written into, and returned
            kw["out"] = (torch.full_like(r, math.nan), torch.full_like(r, math.nan))
    if time_first:
        flip = (lambda x: x if x is None or x.dim() < 2 else x.t())
        kw = {k: flip(x) if isinstance(x, torch.Tensor) else x for k, x in kw.items()}
        adv, ret = rlscan.gae(r.t(), v.t(), time_dim=0, **kw)
        return adv.t(), ret.t()
    got = rlscan.gae(r, v, time_dim=-1, **kw)
    if "out" in kw:
        assert got[0] is kw["out"][0] and got[1] is kw["out"][1]
    return got


def _case(rank: int, world: int, case: tuple) -> None:
    """One case on this rank; raises where it fails."""
    import torch.distributed as dist

    import rlscan

    kind, exact, T, cuts, time_first = case
    tensors = _batch(T, cuts)
    lo, hi = cuts[rank], cuts[rank + 1]

    def chunk(x):
        return x if x.dim() < 2 else x[:, lo:hi]

    group = dist.group.WORLD
    log: list = []
    if kind in ("bad_mask", "bad_mask_whiten", "no_bootstrap"):
        r, v, mask, term, boot, _, _ = (chunk(x) for x in tensors)
        kw = dict(group=group, sequence_sharded=True, exact=exact, time_dim=-1)
        if kind.startswith("bad_mask"):
            bad = 1 if cuts[2] > cuts[1] else 0  # a rank with a chunk
            mask = mask.long()
            if rank == bad:
                mask[0, 0] = 2
            kw.update(mask=mask, bootstrap_value=boot, whiten=kind == "bad_mask_whiten")
            # with the exact chain, the ranks after the bad one finish first (without whitening)
            raises = not exact or kind == "bad_mask_whiten" or rank <= bad
            match = "only 0 and 1"
        else:
            kw.update(bootstrap_value=None if rank == world - 1 else boot)
            raises, match = True, "bootstrap_value on the group's last rank"
        originals = counting(dist, log)
        try:
            if raises:
                with pytest.raises(ValueError, match=match):
                    rlscan.gae(r, v, **kw)
            else:  # after the bad rank in exact mode: this chunk's result does not depend on it
                rlscan.gae(r, v, **kw)
        finally:
            for name, fn in originals.items():
                setattr(dist, name, fn)
        return
    originals = counting(dist, log)
    try:
        got = _call(rlscan, dist, tensors, kind, exact, group, time_first, chunk)
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    want = _call(rlscan, dist, tensors, kind, exact, None, time_first, lambda x: x)
    for g, w in zip(got, want):
        w = w[:, lo:hi]
        assert g.shape == w.shape and g.dtype == w.dtype
        if exact and kind != "whiten":
            assert torch.equal(g, w), (case, rank, (g - w).abs().max())
        else:
            torch.testing.assert_close(g, w, rtol=2e-5, atol=2e-5)
    # what this rank sent: O(B) scalars, whatever T
    whitening = [("all_reduce", 3 * 8)] if kind == "whiten" else []
    if exact:
        expected = ([("recv", 0)] if rank < world - 1 else []) + ([("send", (2 * B + 1) * 8)] if rank > 0 else [])
    else:
        expected = [("all_gather", (6 * B + 1) * 8)]
    assert log == expected + whitening, (case, rank, log)


def _cases(cuts_of, lengths=(40,)):
    cases = []
    for exact in (False, True):
        for kind in ("masked", "unmasked", "per_token", "whiten"):
            for T in lengths:
                cases.append((kind, exact, T, cuts_of(T), False))
        cases.append(("masked", exact, 40, cuts_of(40), True))
        cases.append(("out", exact, 40, cuts_of(40), False))
        cases.append(("bad_mask", exact, 40, cuts_of(40), False))
        cases.append(("bad_mask_whiten", exact, 40, cuts_of(40), False))
    cases.append(("no_bootstrap", False, 40, cuts_of(40), False))
    cases.append(("no_bootstrap", True, 40, cuts_of(40), False))
    return tuple(cases)


@pytest.mark.parametrize("world,cuts_of", [
    (2, lambda T: [0, T // 2 + 3, T]),
    (2, lambda T: [0, T, T]),  # the last rank's chunk is empty: its bootstrap passes through
    (4, lambda T: [0, 0, T // 3, T // 3, T]),  # the first rank's chunk is empty, and rank 2's between two
], ids=["2-uneven", "2-last-empty", "4-first-and-middle-empty"])
def test_sharded_gae_is_the_unsplit_one(world, cuts_of, tmp_path, request):
    # ten times the steps send the same bytes: checked once, on the first split
    lengths = (40, 400) if request.node.callspec.id == "2-uneven" else (40,)
    run(_case, world, _cases(cuts_of, lengths), tmp_path)


def test_sequence_sharded_is_refused_without_a_group():
    import rlscan

    with pytest.raises(ValueError, match="sequence_sharded=True needs group="):
        rlscan.gae(torch.randn(2, 4), torch.randn(2, 4), mask=torch.ones(2, 4), sequence_sharded=True, time_dim=-1)
    with pytest.raises(ValueError, match="group: torch.distributed is not initialised"):
        rlscan.gae(torch.randn(2, 4), torch.randn(2, 4), group=object(), sequence_sharded=True, time_dim=-1)
    with pytest.raises(ValueError, match="takes neither next_values nor truncated"):
        rlscan.gae(torch.randn(2, 4), torch.randn(2, 4), next_values=torch.randn(2, 4), group=object(),
                   sequence_sharded=True, time_dim=-1)
    with pytest.raises(ValueError, match="sequence_sharded=True is not differentiable"):
        rlscan.gae(torch.randn(2, 4, requires_grad=True), torch.randn(2, 4), group=object(), sequence_sharded=True)
    with pytest.raises(TypeError, match="sequence_sharded"):
        rlscan.gae(torch.randn(2, 4), torch.randn(2, 4), bootstrap_value=torch.randn(2), sequence_sharded="yes")
