"""Calling an op in a loop does not grow the process's memory (CPU path)."""
import os

import numpy as np
import pytest
import torch

import rlscan

CALLS = 10_000
WARM_UP = 1_000
TOLERANCE = 2 * 2**20  # bytes: 8,000 measured calls leaking 256 bytes each would exceed it


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _gae_torch():
    r, v, b = torch.randn(16, 4), torch.randn(16, 4), torch.randn(4)
    term = torch.rand(16, 4) < 0.1
    return lambda: rlscan.gae(r, v, bootstrap_value=b, terminated=term)


def _vtrace_strided():
    r, v, lr = torch.randn(4, 16).t(), torch.randn(16, 4), torch.randn(16, 4)
    nv, trunc = torch.randn(16, 4), torch.rand(16, 4) < 0.1
    return lambda: rlscan.vtrace(r, v, lr, next_values=nv, truncated=trunc)


def _cumsum_numpy():
    x, d = np.random.rand(16, 4).astype(np.float32), np.random.rand(16, 4) < 0.2
    return lambda: rlscan.episodic_cumsum(x, dones=d)


def _grad_scan():
    alpha = torch.randn(16, 4, requires_grad=True)
    return lambda: rlscan.linear_scan(alpha, 0.9, reverse=True).sum().backward()


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@pytest.mark.parametrize("make_call", [_gae_torch, _vtrace_strided, _cumsum_numpy, _grad_scan],
                         ids=["gae", "vtrace-strided", "cumsum-numpy", "linear-scan-backward"])
def test_no_growth_over_many_calls(make_call):
    call = make_call()
    with rlscan.use_backend("cpu"):
        for _ in range(WARM_UP):
            call()
        before = resident_bytes()
        for _ in range(CALLS - WARM_UP):
            call()
        grown = resident_bytes() - before
    assert grown < TOLERANCE, f"resident memory grew by {grown / 2**20:.2f} MiB over {CALLS - WARM_UP} calls"
