"""The words look-back on its own (``chained_scan._walk_window``, ``chained_scan._look_back_words``),
against a plain Python walk, with windows of words crafted to be ready or not, to end the walk
or not. The kernels' tests cannot reach a word that is not ready yet: the interpreter runs
programs one after another, so every predecessor has published by the time one looks back."""
import struct

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given
from hypothesis import strategies as st

from rlscan._triton import chained_scan

NOT_READY = -1
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _window_kernel(WORDS, OUT, B, W: tl.constexpr, BLOCK_B: tl.constexpr):
    r = tl.arange(0, W)[:, None]
    b = tl.arange(0, BLOCK_B)[None, :]
    a, k, code = chained_scan._walk_window(tl.load(WORDS + r * B + b), W)
    tl.store(OUT + b, a)
    tl.store(OUT + BLOCK_B + b, k)
    tl.store(OUT + 2 * BLOCK_B + b, code.to(tl.float32))


@triton.jit
def _look_back_kernel(WORDS, OUT, j, B, W: tl.constexpr, BLOCK_B: tl.constexpr):
    b = tl.arange(0, BLOCK_B)[None, :]
    carry, composed, _ = chained_scan._look_back_words(WORDS, j, B, b, b < B, tl.float32, BLOCK_B, W)
    tl.store(OUT + b, carry)
    tl.store(OUT + BLOCK_B, composed.to(tl.float32))


def _word(a: float, k: float) -> int:
    """The int64 word of the float32 pair ``(a, k)``, as ``chained_scan._word`` packs it."""
    lo, hi = (struct.unpack("<I", struct.pack("<f", x))[0] for x in (a, k))
    return struct.unpack("<q", struct.pack("<Q", (hi << 32) | lo))[0]


def _walk(pairs):
    """The walk's reference: compose ready pairs nearest first, up to the first not ready
    (``None``, not taken) or up to and including the first with ``k = 0``. Returns the
    composed pair, the pairs taken, whether the walk goes on past the window, whether it ended."""
    a, k, taken = 0.0, 1.0, 0
    for pair in pairs:
        if pair is None:
            return a, k, taken, False, False
        a, k, taken = a + k * pair[0], k * pair[1], taken + 1
        if pair[1] == 0:
            return a, k, taken, False, True
    return a, k, taken, True, False


pair = st.one_of(st.none(), st.tuples(st.floats(-2, 2, width=32), st.sampled_from([0.0, 0.5, 0.9, 1.0, -0.7])))


@pytest.mark.parametrize("W", [1, 2, 4, 8, 16])
@given(data=st.data())
def test_window_composes_up_to_the_first_stop(W, data):
    """Each environment's window: the pairs taken, their composition, and whether the walk
    goes on or ends, for the row-by-row fold (W <= 4) and the scan (W > 4) alike."""
    B = 4
    columns = [data.draw(st.lists(pair, min_size=W, max_size=W)) for _ in range(B)]
    words = torch.tensor([[NOT_READY if c[i] is None else _word(*c[i]) for c in columns] for i in range(W)],
                         dtype=torch.int64, device=DEVICE)
    out = torch.empty(3, B, device=DEVICE)
    _window_kernel[(1,)](words, out, B, W=W, BLOCK_B=B)
    for e, column in enumerate(columns):
        a, k, taken, goes_on, ends = _walk(column)
        assert out[0, e].item() == pytest.approx(a, rel=1e-5, abs=1e-4)
        assert out[1, e].item() == pytest.approx(k, rel=1e-5, abs=1e-6)
        assert int(out[2, e].item()) == 4 * taken + 2 * goes_on + ends


@pytest.mark.parametrize("W", [1, 2, 8, 64])
@given(data=st.data())
def test_look_back_walks_to_the_nearest_state(W, data):
    """Every position before ``j`` published: the carry is the composition from ``j - 1`` back
    to the nearest word with ``k = 0`` (position 0 always has one), over as many windows of
    ``W`` as that takes."""
    B = 2
    j = data.draw(st.integers(1, 40))
    columns = []
    for _ in range(B):
        column = [data.draw(st.tuples(st.floats(-2, 2, width=32), st.sampled_from([0.0, 0.5, 0.9, 1.0])))
                  for _ in range(j)]
        column[0] = (column[0][0], 0.0)
        columns.append(column)
    words = torch.tensor([[_word(*c[p]) for c in columns] for p in range(j)], dtype=torch.int64, device=DEVICE)
    out = torch.empty(B + 1, device=DEVICE)
    _look_back_kernel[(1,)](words, out, j, B, W=W, BLOCK_B=B)
    most = 0
    for e, column in enumerate(columns):
        a, _, taken, _, ends = _walk(column[::-1])
        assert ends
        assert out[e].item() == pytest.approx(a, rel=1e-5, abs=1e-4)
        most = max(most, taken)
    assert int(out[B].item()) == most
