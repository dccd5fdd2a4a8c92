"""LLM shapes on the CPU path, where verl's and OpenRLHF's drivers compute advantages:
``[B, T]`` rows of thousands of tokens, response masks, and γ and λ per sample (a ``[B, 1]``
tensor, NeMo-RL's per-sample λ) or per token (``[B, T]``), against the float64 reference.
"""
from __future__ import annotations

import pytest
import torch

import rlscan
from rlscan import reference

B, T = 16, 6144


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    for i in range(0, B, 3):  # observation spans inside every third response
        start = int(torch.randint(0, T // 2, (1,), generator=g))
        mask[i, start:start + 300] = False
    rewards = -0.01 * torch.rand(B, T, generator=g)
    rewards[torch.arange(B), lengths - 1] += torch.randn(B, generator=g)
    values = torch.randn(B, T, generator=g)
    return rewards, values, mask


def _coefs(kind: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    if kind == "per sample":
        return 0.98 + 0.02 * torch.rand(B, 1, generator=g), 0.9 + 0.1 * torch.rand(B, 1, generator=g)
    if kind == "per token":
        return 0.98 + 0.02 * torch.rand(B, T, generator=g), 0.9 + 0.1 * torch.rand(B, T, generator=g)
    return 1.0, 0.95


@pytest.mark.parametrize("kind", ["per sample", "per token", "floats"])
def test_masked_gae_at_llm_shapes(kind):
    rewards, values, mask = _batch(0)
    gamma, lmbda = _coefs(kind, 1)
    got = rlscan.gae(rewards, values, mask=mask, gamma=gamma, lmbda=lmbda, time_dim=-1)
    want = reference.gae(rewards, values, mask=mask, gamma=gamma, lmbda=lmbda, time_dim=-1)
    for x, w in zip(got, want):
        torch.testing.assert_close(x.double(), w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["per sample", "per token"])
def test_returns_at_llm_shapes(kind):
    rewards, values, mask = _batch(2)
    gamma, lmbda = _coefs(kind, 3)
    last = torch.zeros(B)
    torch.testing.assert_close(
        rlscan.td_lambda(rewards, values, bootstrap_value=last, gamma=gamma, lmbda=lmbda, time_dim=-1).double(),
        reference.td_lambda(rewards, values, bootstrap_value=last, gamma=gamma, lmbda=lmbda, time_dim=-1),
        rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(
        rlscan.discounted_returns(rewards, mask=mask, gamma=gamma, time_dim=-1).double(),
        reference.discounted_returns(rewards, mask=mask, gamma=gamma, time_dim=-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["per sample", "per token", "floats"])
def test_dual_lambda_at_llm_shapes(kind):
    """VAPO's decoupled λ: the advantages with λ (per sample, per token or a float), the returns
    with λ_value = 1, against the float64 reference; the returns are the bits of a call with
    ``lmbda=1.0`` (the CPU path is exact)."""
    rewards, values, mask = _batch(4)
    gamma, lmbda = _coefs(kind, 5)
    got = rlscan.gae(rewards, values, mask=mask, gamma=gamma, lmbda=lmbda, value_lmbda=1.0, time_dim=-1)
    want = reference.gae(rewards, values, mask=mask, gamma=gamma, lmbda=lmbda, value_lmbda=1.0, time_dim=-1)
    for x, w in zip(got, want):
        torch.testing.assert_close(x.double(), w, rtol=1e-4, atol=1e-4)
    assert torch.equal(got.returns, rlscan.gae(rewards, values, mask=mask, gamma=gamma, lmbda=1.0, time_dim=-1).returns)
