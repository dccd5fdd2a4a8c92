"""The bench's stand-in for the seed's design (``rlscan.bench.whole_row``) computes what
rlscan's references do, on ``[N, T]`` rows (a partial row of the padded length)."""
import pytest
import torch

from rlscan import reference
from rlscan.bench import whole_row
from rlscan_testing import assert_close, path_for


@pytest.mark.parametrize("op", ["gae", "discounted_returns"])
@pytest.mark.parametrize("flags", [torch.bool, torch.float32])
def test_whole_row_matches_reference(op, flags):
    device = path_for("triton").device
    gen = torch.Generator().manual_seed(len(op))
    N, T = 3, 11
    r, v = torch.randn(N, T, generator=gen), torch.randn(N, T, generator=gen)
    term = torch.rand(N, T, generator=gen) < 0.2
    boot = torch.randn(N, generator=gen)
    got = whole_row.run(op, r.to(device), term.to(flags).to(device), boot.to(device), v.to(device), gamma=0.9,
                        lmbda=0.8)
    if op == "gae":
        want = reference.gae(r, v, bootstrap_value=boot, terminated=term, gamma=0.9, lmbda=0.8, time_dim=1)
    else:
        want = (reference.discounted_returns(r, bootstrap_value=boot, terminated=term, gamma=0.9, time_dim=1),)
    for g, w in zip(got, want):
        assert_close(g.cpu(), torch.as_tensor(w), torch.float32, op)
