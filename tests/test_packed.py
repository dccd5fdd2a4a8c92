"""Packed sequences (``cu_seqlens=``) on the CPU path.

The definition (core/_packed.py): the result on sequence ``s`` is the padded op's on
``[S, max_len]`` rows, row ``s`` holding the sequence, the mask (or 1) inside and 0 past
its end, the bootstrap 0 where the sequence terminated. The CPU path must give the padded
op's bits (checked here against the padded op itself, run on rows built so), and both be
close to the float64 reference.

Each case below is one set of argument types (each compiles its own loop, a few seconds,
once: numba caches it on disk); hypothesis draws the lengths (empty sequences and
sequences of one token included), the values, the mask and the flags.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlscan
from rlscan import _packed_cpu
from rlscan.ops.discounted_returns import kept_returns
from rlscan_testing import path_for

GAMMA, LMBDA = 0.97, 0.9


@dataclass(frozen=True)
class Types:
    op: str
    values: torch.dtype = torch.float32  # and rewards, unless rewards_dtype says otherwise
    mask: Optional[torch.dtype] = torch.bool
    boot: bool = True
    term: bool = True
    gamma: str = "float"  # "float", "seq" or "token"
    lmbda: str = "float"
    cu: torch.dtype = torch.int64
    whiten: bool = False
    rewards_dtype: Optional[torch.dtype] = None

    def __str__(self):
        return "-".join(str(x).replace("torch.", "") for x in self.__dict__.values())


CASES = [
    Types("gae"),
    Types("gae", whiten=True),
    Types("gae", mask=None, boot=False, term=False, whiten=True, cu=torch.int32),
    Types("gae", values=torch.bfloat16, rewards_dtype=torch.float32, mask=torch.uint8, gamma="seq", lmbda="token",
          cu=torch.int32),
    Types("gae", values=torch.float64, mask=torch.float32, boot=False, gamma="token", lmbda="seq"),
    Types("td_lambda"),
    Types("td_lambda", values=torch.float64, mask=None, gamma="seq", lmbda="seq", cu=torch.int32),
    Types("discounted_returns", gamma="token"),
    Types("discounted_returns", values=torch.bfloat16, mask=None, term=False, gamma="seq"),
    Types("kept_returns", boot=False, term=False),
    Types("kept_returns", values=torch.float64, mask=torch.uint8, boot=False, term=False, cu=torch.int32),
]


# ----------------------------------------------------------------------------- a packed batch


@dataclass
class Batch:
    lengths: list
    cu: torch.Tensor
    args: dict  # the packed call's tensors, by argument name

    @property
    def S(self):
        return len(self.lengths)

    @property
    def L(self):
        return max(self.lengths, default=0)

    def pad(self, x, fill=0):
        """``[S, L]`` rows, row ``s`` holding sequence ``s``, ``fill`` past its end."""
        out = torch.full((self.S, self.L), fill, dtype=x.dtype)
        for s, n in enumerate(self.lengths):
            out[s, :n] = x[int(self.cu[s]):int(self.cu[s]) + n]
        return out

    def unpad(self, x):
        return torch.cat([x[s, :n] for s, n in enumerate(self.lengths)]) if self.S else x.reshape(0)


@st.composite
def batches(draw, types: Types):
    lengths = draw(st.lists(st.integers(0, 9) | st.sampled_from([0, 1]), min_size=0, max_size=7))
    S, total = len(lengths), sum(lengths)
    if "seq" in (types.gamma, types.lmbda) and S == total and S:
        lengths[0] += 1  # a tensor of total values is read per token: one of S values is then not per sequence
        total += 1
    cu = torch.tensor([0] + list(np.cumsum(lengths, dtype=np.int64)), dtype=types.cu)
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))

    def rand(n, dtype):
        return torch.randn(n, generator=gen).to(dtype)

    args = {"rewards": rand(total, types.rewards_dtype or types.values)}
    if types.op in ("gae", "td_lambda"):
        args["values"] = rand(total, types.values)
    if types.mask is not None:
        keep = torch.rand(total, generator=gen) < draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]))
        args["mask"] = keep.to(types.mask)
    if types.boot:
        args["bootstrap_value"] = rand(S, types.values)
    if types.term:
        args["terminated"] = torch.rand(S, generator=gen) < 0.5
    for name, mode in (("gamma", types.gamma), ("lmbda", types.lmbda)):
        if name == "lmbda" and types.op not in ("gae", "td_lambda"):
            continue
        if mode != "float":
            args[name] = torch.rand(S if mode == "seq" else total, generator=gen)
    return Batch(lengths, cu, args)


def packed_call(types: Types, batch: Batch):
    a = dict(batch.args)
    if types.op == "kept_returns":
        return kept_returns.returns_and_advantages(a.pop("rewards"), a.pop("mask", None), GAMMA,
                                                   cu_seqlens=batch.cu, **a)
    fn = getattr(rlscan, types.op)
    a.setdefault("gamma", GAMMA)
    if types.op in ("gae", "td_lambda"):
        a.setdefault("lmbda", LMBDA)
    if types.whiten:
        a["whiten"] = True
    out = fn(a.pop("rewards"), *([a.pop("values")] if "values" in a else []), cu_seqlens=batch.cu, **a)
    return tuple(out) if isinstance(out, tuple) else (out,)


def padded_args(types: Types, batch: Batch) -> dict:
    """The padded call's arguments, per the definition."""
    a = batch.args
    mask = a.get("mask")
    inside = torch.ones(sum(batch.lengths), dtype=torch.bool) if mask is None else mask
    out = {"rewards": batch.pad(a["rewards"]), "mask": batch.pad(inside, 0), "time_dim": -1}
    if "values" in a:
        out["values"] = batch.pad(a["values"])
    boot, term = a.get("bootstrap_value"), a.get("terminated")
    if boot is not None:
        out["bootstrap_value"] = boot if term is None else torch.where(term, torch.zeros((), dtype=boot.dtype), boot)
    for name in ("gamma", "lmbda"):
        x = a.get(name)
        if x is not None:  # per sequence: one value along the row; per token: a row of them
            out[name] = x[:, None].expand(batch.S, batch.L) if getattr(types, name) == "seq" else batch.pad(x, 0.5)
    return out


def padded_call(types: Types, batch: Batch, reference: bool = False):
    p = padded_args(types, batch)
    if types.op == "kept_returns":
        if reference:
            ret = rlscan.reference.discounted_returns(p["rewards"], mask=p["mask"], gamma=GAMMA, time_dim=-1)
            ret = torch.where(p["mask"] != 0, ret, 0.0)
            return rlscan.reference.masked_whiten(ret, p["mask"], zero_skipped=True), ret
        return kept_returns.returns_and_advantages(p["rewards"], p["mask"], GAMMA)
    p.setdefault("gamma", GAMMA)
    if types.op in ("gae", "td_lambda"):
        p.setdefault("lmbda", LMBDA)
    fn = getattr(rlscan.reference if reference else rlscan, types.op)
    r = p.pop("rewards")
    series = [p.pop("values")] if "values" in p else []
    if types.whiten and not reference:
        p["whiten"] = True
    out = fn(r, *series, **p)
    out = tuple(out) if isinstance(out, tuple) else (out,)
    if types.whiten and reference:
        out = (rlscan.reference.masked_whiten(out[0], p["mask"]),) + out[1:]
    return out


def kept_count(types: Types, batch: Batch) -> int:
    mask = batch.args.get("mask")
    return sum(batch.lengths) if mask is None else int((mask != 0).sum())


def whitens(types: Types) -> bool:
    return types.whiten or types.op == "kept_returns"


def bitwise_expected(types: Types) -> bool:
    """Where the padded op's whitening is the row loop's (the same sums, merged alike): scalar
    coefficients and results in the compute dtype. Elsewhere it is ``masked_whiten``'s torch
    sums, which round the statistics in another order."""
    if not whitens(types):
        return True
    return types.gamma == "float" and types.lmbda == "float" and types.values != torch.bfloat16


# ----------------------------------------------------------------------------- packed == padded


@pytest.mark.parametrize("types", CASES, ids=str)
@settings(max_examples=max(5, settings.default.max_examples // 2))
@given(data=st.data())
def test_packed_is_the_padded_op(types, data):
    batch = data.draw(batches(types), label="batch")
    if whitens(types) and kept_count(types, batch) < 2:
        with pytest.raises(ValueError, match="at least two"):
            packed_call(types, batch)
        return
    got = packed_call(types, batch)
    assert all(g.shape == (sum(batch.lengths),) for g in got)
    if batch.S == 0 or batch.L == 0:
        return
    want = tuple(batch.unpad(w) for w in padded_call(types, batch))
    assert all(g.dtype == w.dtype for g, w in zip(got, want))
    if bitwise_expected(types):
        for g, w in zip(got, want):
            assert torch.equal(g, w), (g, w)
    else:
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    ref = tuple(batch.unpad(w) for w in padded_call(types, batch, reference=True))
    tolerance = {torch.float64: 1e-12, torch.float32: 2e-5, torch.bfloat16: 1e-2}[got[0].dtype]
    for g, w in zip(got, ref):
        torch.testing.assert_close(g.double(), w, rtol=tolerance, atol=tolerance)


def test_many_sequences_of_unequal_lengths():
    """Long sequences beside short ones, more groups than lanes: the lanes' hand-overs."""
    gen = torch.Generator().manual_seed(3)
    lengths = [int(x) for x in torch.randint(0, 300, (37,), generator=gen)] + [1000, 0, 1]
    types = Types("gae", whiten=True)
    cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int64)
    total = int(cu[-1])
    args = {"rewards": torch.randn(total, generator=gen), "values": torch.randn(total, generator=gen),
            "mask": torch.rand(total, generator=gen) < 0.8, "bootstrap_value": torch.randn(len(lengths), generator=gen),
            "terminated": torch.rand(len(lengths), generator=gen) < 0.5}
    batch = Batch(lengths, cu, args)
    got = packed_call(types, batch)
    want = tuple(batch.unpad(w) for w in padded_call(types, batch))
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_groups_deal_sequences_longest_first():
    lengths = np.array([3, 9, 0, 5, 5, 1, 7, 2, 4])
    order = _packed_cpu.groups(lengths, threads=1)
    assert order.shape == (12,)
    real = order[order >= 0]
    assert sorted(real.tolist()) == list(range(9))
    for group in order.reshape(-1, 4):
        lens = [lengths[i] if i >= 0 else -1 for i in group]
        assert lens == sorted(lens, reverse=True)  # longest first; the empty lanes last
    dealt = _packed_cpu.groups(np.arange(40), threads=2).reshape(-1, 4)
    first, second = dealt[:5], dealt[5:]  # each thread's block gets long and short groups
    assert abs(int(np.arange(40)[first[first >= 0]].sum()) - int(np.arange(40)[second[second >= 0]].sum())) < 100


# ----------------------------------------------------------------------------- forms of the call


def _small(n_seq=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lengths = [3, 0, 5, 1][:n_seq]
    cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int64)
    total = int(cu[-1])
    r, v = torch.randn(total, generator=gen), torch.randn(total, generator=gen)
    return cu, r, v, torch.rand(total, generator=gen) < 0.7


def test_nested_jagged_round_trip():
    cu, r, v, m = _small()
    nr = torch.nested.nested_tensor_from_jagged(r, cu)
    nv = torch.nested.nested_tensor_from_jagged(v, nr.offsets())
    nm = torch.nested.nested_tensor_from_jagged(m, nr.offsets())
    adv, ret = rlscan.gae(nr, nv, mask=nm, gamma=GAMMA, lmbda=LMBDA)
    flat = rlscan.gae(r, v, mask=m, cu_seqlens=cu, gamma=GAMMA, lmbda=LMBDA)
    for nested, plain in zip((adv, ret), flat):
        assert nested.is_nested and nested.layout == torch.jagged
        assert torch.equal(nested.offsets(), cu)
        assert torch.equal(nested.values(), plain)
    g = rlscan.discounted_returns(nr, mask=nm, gamma=GAMMA)
    assert torch.equal(g.values(), rlscan.discounted_returns(r, mask=m, cu_seqlens=cu, gamma=GAMMA))
    a, g = kept_returns.returns_and_advantages(nr, nm, GAMMA)
    a2, g2 = kept_returns.returns_and_advantages(r, m, GAMMA, cu_seqlens=cu)
    assert torch.equal(a.values(), a2) and torch.equal(g.values(), g2)


def test_numpy_in_numpy_out():
    cu, r, v, m = _small()
    adv, ret = rlscan.gae(r.numpy(), v.numpy(), mask=m.numpy(), cu_seqlens=cu.numpy(), gamma=GAMMA)
    assert isinstance(adv, np.ndarray) and isinstance(ret, np.ndarray)
    want = rlscan.gae(r, v, mask=m, cu_seqlens=cu, gamma=GAMMA)
    assert np.array_equal(adv, want[0].numpy()) and np.array_equal(ret, want[1].numpy())


def test_strided_and_out_dtype():
    cu, r, v, m = _small()
    wide = torch.stack([r, r], 1)[:, 0]  # a strided view
    adv, _ = rlscan.gae(wide, v, mask=m, cu_seqlens=cu, gamma=GAMMA, out_dtype=torch.float64)
    assert adv.dtype == torch.float64
    assert torch.equal(adv, rlscan.gae(r, v, mask=m, cu_seqlens=cu, gamma=GAMMA)[0].double())


def test_the_loop_reads_the_callers_buffers(monkeypatch):
    """No padded copy, no copy at all: the loop is handed the caller's memory, and writes
    only the outputs."""
    cu, r, v, m = _small()
    seen = []
    real = _packed_cpu._cpu_rows.run

    def noting(loop, key, shape, *args):
        seen.append(args)
        return real(loop, key, shape, *args)

    monkeypatch.setattr(_packed_cpu._cpu_rows, "run", noting)
    adv, ret = rlscan.gae(r, v, mask=m, cu_seqlens=cu, gamma=GAMMA)
    (args,) = seen
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    for tensor in (r, v, m):
        assert any(a.ctypes.data == tensor.data_ptr() and a.size == tensor.numel() for a in arrays)
    for out in (adv, ret):
        assert any(a.ctypes.data == out.data_ptr() for a in arrays)
    big = sum(a.size for a in arrays if a.size >= r.numel())
    assert big == 5 * r.numel()  # rewards, values, mask, advantages, returns: nothing padded


def test_requires_grad_is_refused():
    cu, r, v, m = _small()
    with pytest.raises(ValueError, match="values requires grad"):
        rlscan.gae(r, v.requires_grad_(), cu_seqlens=cu)
    with torch.no_grad():
        rlscan.gae(r, v, cu_seqlens=cu)


# ----------------------------------------------------------------------------- bad arguments


def _bad_calls():
    cu, r, v, m = _small()
    S, total = cu.numel() - 1, r.numel()
    two_d = r.reshape(1, -1)
    return [
        ("cu_seqlens", TypeError, lambda: rlscan.gae(r, v, cu_seqlens=cu.float())),
        ("cu_seqlens", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu.reshape(1, -1))),
        ("cu_seqlens", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu[1:])),  # not from 0
        ("cu_seqlens", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu[:-1])),  # not to total
        ("cu_seqlens", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=torch.tensor([0, 5, 3, total]))),
        ("cu_seqlens", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu.to("meta"))),
        ("rewards", ValueError, lambda: rlscan.gae(two_d, v.reshape(1, -1), cu_seqlens=cu)),
        ("time_dim", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, time_dim=1)),
        ("time_dim", TypeError, lambda: rlscan.gae(r, v, cu_seqlens=cu, time_dim=0.0)),
        ("next_values", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, next_values=v)),
        ("truncated", ValueError, lambda: rlscan.td_lambda(r, v, cu_seqlens=cu, truncated=m)),
        ("out", ValueError, lambda: rlscan.discounted_returns(r, cu_seqlens=cu, out=torch.empty_like(r))),
        ("values", ValueError, lambda: rlscan.gae(r, v[:-1], cu_seqlens=cu)),
        ("values", TypeError, lambda: rlscan.td_lambda(r, None, cu_seqlens=cu)),
        ("mask", ValueError, lambda: rlscan.gae(r, v, mask=m[:-1], cu_seqlens=cu)),
        ("mask", ValueError, lambda: rlscan.gae(r, v, mask=torch.full_like(r, 0.5), cu_seqlens=cu)),
        ("mask", ValueError, lambda: kept_returns.returns_and_advantages(r, torch.full_like(r, 2.0), GAMMA,
                                                                         cu_seqlens=cu)),
        ("terminated", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, terminated=torch.zeros(S + 1, dtype=bool))),
        ("terminated", TypeError, lambda: rlscan.gae(r, v, cu_seqlens=cu,
                                                     terminated=torch.zeros(S, dtype=torch.int32))),
        ("bootstrap_value", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, bootstrap_value=torch.zeros(total))),
        ("gamma", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, gamma=torch.rand(S + 1))),
        ("gamma", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, gamma=torch.full((S,), 1.5))),
        ("gamma", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, gamma=1.5)),
        ("lmbda", ValueError, lambda: rlscan.gae(r, v, cu_seqlens=cu, lmbda=torch.rand(2, total))),
        ("gamma", TypeError, lambda: rlscan.discounted_returns(r, cu_seqlens=cu, gamma="0.9")),
        ("whiten", ValueError, lambda: rlscan.gae(r, v, mask=torch.zeros_like(m), cu_seqlens=cu, whiten=True)),
        ("cu_seqlens", ValueError, lambda: rlscan.gae(torch.nested.nested_tensor_from_jagged(r, cu), v,
                                                      cu_seqlens=cu)),
        ("values", TypeError, lambda: rlscan.gae(torch.nested.nested_tensor_from_jagged(r, cu), v)),
        ("values", ValueError, lambda: rlscan.gae(
            torch.nested.nested_tensor_from_jagged(r, cu),
            torch.nested.nested_tensor_from_jagged(v, torch.tensor([0, 1, 4, 8, total])))),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_bad_argument_is_named(case):
    name, error, call = _bad_calls()[case]
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    if name == "whiten":
        assert "at least two" in message
    else:
        assert name in message, message


def test_one_mask_value_other_than_0_and_1_is_refused():
    cu, r, v, m = _small()
    bad = m.float()
    bad[2] = 0.5
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        rlscan.td_lambda(r, v, mask=bad, cu_seqlens=cu)
    bad[2] = math.nan
    with pytest.raises(ValueError, match="mask must hold only 0 and 1"):
        rlscan.discounted_returns(r, mask=bad, cu_seqlens=cu)


def test_a_coefficient_of_total_values_is_per_token_where_S_equals_total():
    """Sequences of 2, 0 and 1 tokens: S == total == 3, so a gamma of 3 values is one per token."""
    cu = torch.tensor([0, 2, 2, 3])
    r, v = torch.randn(3), torch.randn(3)
    gamma = torch.tensor([0.5, 0.25, 0.75])
    per_token = rlscan.discounted_returns(r, cu_seqlens=cu, gamma=gamma)
    assert torch.equal(per_token, torch.stack([r[0] + 0.5 * r[1], r[1], r[2]]))
    wider = torch.cat([r, torch.zeros(1)])  # one more token: the same gamma is now one per sequence
    per_sequence = rlscan.discounted_returns(wider, cu_seqlens=torch.tensor([0, 2, 2, 4]), gamma=gamma)
    assert torch.equal(per_sequence[:2], torch.stack([r[0] + 0.5 * r[1], r[1]]))
    assert torch.equal(per_sequence[2], r[2] + 0.75 * 0.0)


def test_the_parallel_loop_gives_the_same_bits(monkeypatch):
    """The loops' parallel version (the groups dealt to the threads' blocks) against the serial
    one and the padded op; the runner takes turns between them on its first calls."""
    from rlscan import _cache, _cpu

    if _cpu.cpu_threads() < 2:
        pytest.skip("one thread: the parallel version never runs")
    monkeypatch.setattr(_cpu, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(_packed_cpu, "WHITEN_ROW", 16)  # the whitening's prange gets rows too
    _cache.CACHE.clear()
    gen = torch.Generator().manual_seed(5)
    lengths = [int(x) for x in torch.randint(0, 60, (23,), generator=gen)]
    cu = torch.tensor([0] + list(np.cumsum(lengths)), dtype=torch.int64)
    total = int(cu[-1])
    args = {"rewards": torch.randn(total, generator=gen), "values": torch.randn(total, generator=gen),
            "mask": torch.rand(total, generator=gen) < 0.8, "bootstrap_value": torch.randn(len(lengths), generator=gen)}
    types = Types("gae", term=False, whiten=True)
    batch = Batch(lengths, cu, args)
    want = tuple(batch.unpad(w) for w in padded_call(types, batch))
    for _ in range(2):  # parallel, then serial
        got = packed_call(types, batch)
        assert all(torch.equal(g, w) for g, w in zip(got, want))
    timers = [v for k, v in _cache.CACHE.items() if k[:2] == ("row loop", "gae")]
    assert [t.runs for t in timers] == [[1, 1]]  # one serial run, one parallel run


@pytest.mark.parametrize("exact", [False, True])
def test_public_calls_on_the_triton_path_match_the_cpu_path(exact):
    """The public packed calls on the triton backend (rlscan._triton.packed; on a GPU, CUDA
    tensors) give the CPU loops' results: close, and the same bits in exact mode; value_lmbda's
    returns are those of a call with that λ."""
    g = torch.Generator().manual_seed(3)
    cu = torch.tensor([0, 5, 5, 23, 24, 40], dtype=torch.int64)
    total, S = int(cu[-1]), cu.numel() - 1
    r, v = torch.randn(total, generator=g), torch.randn(total, generator=g)
    mask = torch.rand(total, generator=g) < 0.8
    term = torch.tensor([True, False, False, True, False])
    boot = torch.randn(S, generator=g)
    lmbda = torch.rand(total, generator=g)

    def calls(device):
        r_, v_, cu_, mask_, term_, boot_, lmbda_ = (x.to(device) for x in (r, v, cu, mask, term, boot, lmbda))
        common = dict(cu_seqlens=cu_, mask=mask_, terminated=term_, bootstrap_value=boot_, gamma=0.9, exact=exact)
        return {
            "gae": lambda: rlscan.gae(r_, v_, **common, lmbda=lmbda_, value_lmbda=1.0),
            "td_lambda": lambda: (rlscan.td_lambda(r_, v_, **common, lmbda=0.8),),
            "discounted_returns": lambda: (rlscan.discounted_returns(r_, **common),),
        }

    on_cpu, on_triton = calls("cpu"), calls(path_for("triton").device)
    for name in on_cpu:
        with rlscan.use_backend("cpu"):
            want = on_cpu[name]()
        with rlscan.use_backend("triton"):
            got = [o.cpu() for o in on_triton[name]()]
        for w, o in zip(want, got):
            if exact:
                assert torch.equal(o, w), name
            else:
                torch.testing.assert_close(o, w, rtol=1e-5, atol=1e-5)
    with rlscan.use_backend("cpu"):
        single = rlscan.gae(r, v, cu_seqlens=cu, mask=mask, terminated=term, bootstrap_value=boot, gamma=0.9,
                            lmbda=1.0)
        dual = on_cpu["gae"]()
    assert torch.equal(dual.returns, single.returns)


def test_sequence_sharded_is_refused_with_cu_seqlens():
    cu = torch.tensor([0, 2, 4])
    with pytest.raises(ValueError, match="sequence_sharded"):
        rlscan.gae(torch.randn(4), torch.randn(4), cu_seqlens=cu, sequence_sharded=True)
