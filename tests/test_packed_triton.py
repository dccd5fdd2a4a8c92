"""The Triton kernels of packed sequences (``rlscan._triton.packed.scan``) against their
definition, the padded masked op on the Triton backend (docs/semantics.md, "Skipped steps"):
sequence ``s`` as row ``s`` of ``[S, max_len]``, masked (``mask`` or 1) inside and 0 past its
end, bootstrapped from ``0 if terminated[s] else bootstrap_value[s]``. Close at a tolerance,
bit for bit in exact mode; and close to a float64 loop over each sequence written here.

Tiles of 16 tokens, so that sequences of up to 70 tokens are walked over several tiles that
start and end inside them, and skipped spans carry the next kept value across tiles.
"""
from __future__ import annotations

import pytest
import torch

import rlscan
from rlscan._triton import packed
from rlscan.ops.discounted_returns import kept_returns
from rlscan_testing import path_for

LENGTHS = (5, 0, 17, 70, 1, 33, 16, 3, 0, 40)
# exact mode walks no tiles, and the padded op's exact path steps through max_len in the interpreter
EXACT_LENGTHS = (5, 0, 17, 30, 1, 20, 16, 3, 0, 9)
KINDS = ("gae", "td_lambda", "discounted_returns", "kept_returns")


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    monkeypatch.setattr(packed, "FORCE_BLOCK", 16)


def device():
    return path_for("triton").device


def make_batch(case: str, seed: int = 0, lengths=LENGTHS) -> dict:
    """A packed batch of sequences of ``lengths``: ``case`` picks the mask's dtype, the
    coefficients' form and the inputs' dtypes."""
    g = torch.Generator().manual_seed(seed)
    S = len(lengths)
    cu = torch.zeros(S + 1, dtype=torch.int64)
    cu[1:] = torch.tensor(lengths).cumsum(0)
    N = int(cu[-1])
    dtype = torch.float64 if case == "float64" else torch.float32
    r = torch.randn(N, generator=g, dtype=dtype)
    v = torch.randn(N, generator=g, dtype=dtype)
    keep = torch.rand(N, generator=g) < 0.7
    a, n = int(cu[3]), lengths[3]  # the longest sequence: a span of skipped tokens, over three tiles
    keep[a + n * 2 // 7 : a + n * 11 // 14] = False
    a, n = int(cu[5]), lengths[5]  # a sequence that ends with skipped tokens (padding after EOS)
    keep[a + n * 2 // 5 : a + n] = False
    keep[int(cu[7]) : int(cu[8])] = False  # a sequence with no kept token
    batch = dict(cu=cu, rewards=r, values=v, terminated=torch.rand(S, generator=g) < 0.3,
                 bootstrap_value=torch.randn(S, generator=g, dtype=dtype), gamma=0.97, lmbda=0.9, mask=keep)
    if case == "plain":  # no mask, bf16 values, γ per sequence, λ per token, int32 offsets
        batch.update(mask=None, values=v.to(torch.bfloat16), cu=cu.to(torch.int32),
                     gamma=0.8 + 0.2 * torch.rand(S, generator=g), lmbda=torch.rand(N, generator=g))
    elif case == "float64":  # an int mask, γ per token, no bootstrap value
        batch.update(mask=keep.to(torch.int32), bootstrap_value=None, gamma=0.9 + 0.1 * torch.rand(N, generator=g,
                                                                                                    dtype=dtype))
    elif case == "float_mask":  # a 0/1 float mask, λ per sequence, no terminated flags
        batch.update(mask=keep.float(), terminated=None, lmbda=torch.rand(S, generator=g))
    return {k: x.to(device()) if isinstance(x, torch.Tensor) else x for k, x in batch.items()}


def compute_dtype(batch):
    return torch.float64 if batch["rewards"].dtype == torch.float64 else torch.float32


def run_packed(kind, batch, exact=False, whiten=False):
    return packed.scan(kind, batch["cu"], rewards=batch["rewards"], values=batch["values"], mask=batch["mask"],
                       terminated=batch["terminated"], bootstrap_value=batch["bootstrap_value"],
                       gamma=batch["gamma"], lmbda=batch["lmbda"], exact=exact, whiten=whiten,
                       compute_dtype=compute_dtype(batch))


# ----------------------------------------------------------------------------- the definition

def pad(x, cu, fill=0):
    """``[total]`` -> ``[S, max_len]``, ``fill`` past each sequence's end."""
    S, L = cu.numel() - 1, int(cu.diff().max())
    out = torch.full((S, L), fill, dtype=x.dtype, device=x.device)
    for s in range(S):
        a, b = int(cu[s]), int(cu[s + 1])
        out[s, : b - a] = x[a:b]
    return out


def unpad(x, cu):
    return torch.cat([x[s, : int(cu[s + 1]) - int(cu[s])] for s in range(cu.numel() - 1)])


def padded_coef(c, cu):
    S = cu.numel() - 1
    if not isinstance(c, torch.Tensor):
        return c
    return c[:, None] if c.numel() == S else pad(c, cu, 0.5)


def run_padded(kind, batch, exact=False, whiten=False):
    """The padded masked op on the Triton backend, per the definition, unpacked."""
    cu = batch["cu"]
    S, N = cu.numel() - 1, batch["rewards"].numel()
    inside = torch.ones(N, dtype=torch.bool, device=cu.device)
    mask = inside if batch["mask"] is None else batch["mask"] != 0
    m = pad(mask, cu, False)
    r, v = pad(batch["rewards"], cu), pad(batch["values"], cu)
    boot = batch["bootstrap_value"]
    if boot is None:
        boot = torch.zeros(S, dtype=r.dtype, device=r.device)
    if batch["terminated"] is not None:
        boot = torch.where(batch["terminated"], 0, boot)
    gamma, lmbda = padded_coef(batch["gamma"], cu), padded_coef(batch["lmbda"], cu)
    out_dtype = compute_dtype(batch)
    with rlscan.use_backend("triton"):
        if kind == "gae":
            out = rlscan.gae(r, v, mask=m, bootstrap_value=boot, gamma=gamma, lmbda=lmbda, time_dim=1, exact=exact,
                             whiten=whiten, out_dtype=out_dtype)
        elif kind == "td_lambda":
            out = (rlscan.td_lambda(r, v, mask=m, bootstrap_value=boot, gamma=gamma, lmbda=lmbda, time_dim=1,
                                    exact=exact, out_dtype=out_dtype),)
        elif kind == "discounted_returns":
            out = (rlscan.discounted_returns(r, mask=m, bootstrap_value=boot, gamma=gamma, time_dim=1, exact=exact,
                                             out_dtype=out_dtype),)
        else:
            out = kept_returns.returns_and_advantages(r, m, gamma, time_dim=1, exact=exact)
    return tuple(unpad(x, cu) for x in out)


def reference(kind, batch, whiten=False):
    """A float64 loop over each sequence's tokens, from its end."""
    cu = batch["cu"].cpu()
    S, N = cu.numel() - 1, batch["rewards"].numel()
    r, v = batch["rewards"].cpu().double(), batch["values"].cpu().double()
    keep = torch.ones(N, dtype=torch.bool) if batch["mask"] is None else batch["mask"].cpu() != 0

    def per_token(c):
        if not isinstance(c, torch.Tensor):
            return torch.full((N,), c, dtype=torch.float64)
        c = c.cpu().double()
        return c.repeat_interleave(cu.diff()) if c.numel() == S else c

    gamma, lmbda = per_token(batch["gamma"]), per_token(batch["lmbda"])
    boot = torch.zeros(S, dtype=torch.float64) if batch["bootstrap_value"] is None else \
        batch["bootstrap_value"].cpu().double()
    if batch["terminated"] is not None:
        boot = torch.where(batch["terminated"].cpu(), 0, boot)
    first, second = torch.zeros(N, dtype=torch.float64), torch.zeros(N, dtype=torch.float64)
    for s in range(S):
        w = float(boot[s])  # the value after the current token: the next kept token's
        A = 0.0
        G = w if kind in ("td_lambda", "discounted_returns") else 0.0
        for t in range(int(cu[s + 1]) - 1, int(cu[s]) - 1, -1):
            g, lam = float(gamma[t]), float(lmbda[t])
            if keep[t]:
                if kind == "gae":
                    A = float(r[t]) + g * w - float(v[t]) + g * lam * A
                elif kind == "td_lambda":
                    G = float(r[t]) + g * ((1 - lam) * w + lam * G)
                else:
                    G = float(r[t]) + g * G
                w = float(v[t])
            first[t] = A if kind == "gae" else G
            second[t] = A + float(v[t]) if kind == "gae" else (G if keep[t] or kind != "kept_returns" else 0.0)
    if kind == "gae":
        out = (first, second)
    elif kind == "kept_returns":
        out = (second, second)
    else:
        out = (first,)
    if whiten or kind == "kept_returns":
        x = out[0]
        mean = x[keep].mean()
        std = torch.sqrt(x[keep].var() + 1e-8)
        y = (x - mean) / std
        out = ((y * keep if kind == "kept_returns" else y),) + out[1:]
    return out


def assert_close(got, want, exactly=False):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if exactly:
            assert torch.equal(g, w), (g - w).abs().max()
        else:
            torch.testing.assert_close(g.cpu().double(), w.cpu().double(), rtol=2e-4, atol=2e-4)


# ----------------------------------------------------------------------------- the tests

# each kind in several cases, every case (mask dtype, γ and λ forms, dtypes) in several kinds
CASES = [("gae", "masked"), ("gae", "plain"), ("gae", "float64"), ("gae", "float_mask"), ("td_lambda", "masked"),
         ("td_lambda", "float_mask"), ("discounted_returns", "plain"), ("discounted_returns", "float64"),
         ("kept_returns", "masked"), ("kept_returns", "float64")]
EXACT_CASES = [("gae", "masked"), ("gae", "plain"), ("td_lambda", "float64"), ("td_lambda", "masked"),
               ("discounted_returns", "float_mask"), ("kept_returns", "masked")]


@pytest.mark.parametrize("kind, case", CASES)
def test_packed_matches_the_padded_op_and_the_loop(kind, case):
    batch = make_batch(case)
    got = run_packed(kind, batch)
    assert all(x.dtype == compute_dtype(batch) for x in got)
    assert_close(got, reference(kind, batch))
    if kind != "kept_returns" or not isinstance(batch["gamma"], torch.Tensor):  # REINFORCE++ takes a float γ
        assert_close(got, run_padded(kind, batch))


@pytest.mark.parametrize("kind, case", EXACT_CASES)
def test_exact_is_the_padded_exact_path_bit_for_bit(kind, case):
    batch = make_batch(case, seed=1, lengths=EXACT_LENGTHS)
    got = run_packed(kind, batch, exact=True)
    want = run_padded(kind, batch, exact=True)
    if kind == "kept_returns":  # the whitening adds in another order: the returns bit for bit
        assert_close(got[1:], want[1:], exactly=True)
        assert_close(got[:1], want[:1])
    else:
        assert_close(got, want, exactly=True)
    assert_close(got, reference(kind, batch))


@pytest.mark.parametrize("case", ["masked", "plain"])
def test_whitened_gae(case):
    batch = make_batch(case, seed=2)
    got = run_packed("gae", batch, whiten=True)
    assert_close(got, reference("gae", batch, whiten=True))
    if case == "masked":
        assert_close(got, run_padded("gae", batch, whiten=True))
    unwhitened = run_packed("gae", batch)
    assert torch.equal(got[1], unwhitened[1])  # the returns are not whitened


def test_exact_whitening_is_masked_whiten_of_the_exact_advantages():
    batch = make_batch("masked", seed=2, lengths=EXACT_LENGTHS)
    adv, ret = run_packed("gae", batch, exact=True)
    got = run_packed("gae", batch, exact=True, whiten=True)
    assert torch.equal(got[0], rlscan.masked_whiten(adv, batch["mask"])) and torch.equal(got[1], ret)
    assert_close(got, reference("gae", batch, whiten=True))


def test_tiles_of_other_lengths_agree(monkeypatch):
    batch = make_batch("masked", seed=3)
    want = run_packed("gae", batch)
    for block in (32, 128):
        monkeypatch.setattr(packed, "FORCE_BLOCK", block)
        assert_close(run_packed("gae", batch), want)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_batches(kind):
    empty = torch.zeros(0, device=device())
    cu = torch.zeros(4, dtype=torch.int32, device=device())  # three empty sequences
    args = dict(rewards=empty, values=empty, gamma=0.9, lmbda=0.9, compute_dtype=torch.float32)
    if kind == "kept_returns":
        with pytest.raises(ValueError, match="at least two"):
            packed.scan(kind, cu, **args)
        return
    out = packed.scan(kind, cu, **args)
    assert len(out) == packed.OUTPUTS[kind] and all(x.shape == (0,) for x in out)
    with pytest.raises(ValueError, match="at least two"):
        packed.scan("gae", cu, **args, whiten=True)


@pytest.mark.parametrize("kind, case, chunk", [("gae", "masked", 16), ("gae", "plain", 32), ("td_lambda", "float64", 16),
                                               ("td_lambda", "masked", 32), ("discounted_returns", "masked", 32),
                                               ("kept_returns", "float_mask", 16)])
def test_long_sequences_in_chunks(kind, case, chunk, monkeypatch):
    """Chunks of one or two tiles: sequences over several chunks, composed in two launches;
    with chunks of 16 tokens, whole chunks of skipped tokens pass the next kept value on."""
    batch = make_batch(case, seed=4)
    want = run_packed(kind, batch)
    monkeypatch.setattr(packed, "FORCE_CHUNK", chunk)
    got = run_packed(kind, batch)
    assert_close(got, want)
    assert_close(got, reference(kind, batch))
