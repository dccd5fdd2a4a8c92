"""rlscan.adapters.openrlhf against OpenRLHF's own loops, from the installed release.

OpenRLHF's ``experience_maker`` imports flash-attn, DeepSpeed and vLLM at module level;
they ship CUDA builds only, and neither loop compared here calls them. Where they are not
importable, ``tools/openrlhf_timing.py``'s ``experience_maker`` gives the import an empty
module of that name, so the real ``RemoteExperienceMaker`` of the installed wheel is what
the adapter is compared with.
Skipped where OpenRLHF is not installed (the ``openrlhf`` extra plus
``pip install --no-deps openrlhf``).
"""
from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

pytestmark = pytest.mark.skipif(importlib.util.find_spec("openrlhf") is None, reason="OpenRLHF is not installed")


@pytest.fixture(scope="module")
def maker():
    """OpenRLHF's ``RemoteExperienceMaker`` class, imported from the installed wheel."""
    from openrlhf_timing import experience_maker

    return experience_maker()


def _batch(seed: int, B: int, T: int, values_dtype, multi_turn: bool):
    """Rewards per token (a KL-style term everywhere, a score at the last), values, and the
    action mask: right padding after EOS, and, for multi-turn, observation spans inside."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    if multi_turn:
        for i in range(B):
            start = int(torch.randint(0, T, (1,), generator=g))
            mask[i, start:start + int(torch.randint(1, 40, (1,), generator=g))] = False
    rewards = -0.01 * torch.rand(B, T, generator=g)
    rewards[torch.arange(B), lengths - 1] += torch.randn(B, generator=g)
    values = torch.randn(B, T, generator=g).to(values_dtype)
    return rewards, values, mask


COEFS = [(0.99, 0.95), (1.0, 1.0), (torch.tensor(0.97), torch.tensor(0.9))]


@pytest.mark.parametrize("gamma,lambd", COEFS, ids=["floats", "ones", "tensors"])
@pytest.mark.parametrize("multi_turn", [False, True], ids=["eos", "multi_turn"])
@pytest.mark.parametrize("mask_kind", ["bool", "long", "none"])
def test_gae_matches_openrlhf_bit_for_bit_in_float32(maker, gamma, lambd, multi_turn, mask_kind):
    from rlscan.adapters.openrlhf import get_advantages_and_returns

    rewards, values, mask = _batch(1, 16, 300, torch.float32, multi_turn)
    mask = {"bool": mask, "long": mask.long(), "none": None}[mask_kind]
    want = maker.get_advantages_and_returns(None, values, rewards, mask, gamma, lambd)
    got = get_advantages_and_returns(values, rewards, mask, gamma, lambd)
    for w, x in zip(want, got):
        assert x.dtype == w.dtype and x.shape == w.shape
        torch.testing.assert_close(x, w, rtol=0, atol=0)


def test_gae_with_bf16_values_is_closer_to_float64_than_openrlhfs_loop(maker):
    """OpenRLHF's ``γ · V'`` is a bfloat16 product; rlscan carries float32. Both are compared
    with the same loop in float64."""
    from rlscan.adapters.openrlhf import get_advantages_and_returns

    rewards, values, mask = _batch(2, 16, 300, torch.bfloat16, True)
    want = maker.get_advantages_and_returns(None, values, rewards, mask, 0.99, 0.95)
    truth = maker.get_advantages_and_returns(None, values.double(), rewards.double(), mask, 0.99, 0.95)
    got = get_advantages_and_returns(values, rewards, mask, 0.99, 0.95)
    for w, x, t in zip(want, got, truth):
        assert x.dtype == w.dtype
        assert (x.double() - t).abs().max() <= (w.double() - t).abs().max()
        torch.testing.assert_close(x.double(), t, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rewards_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gamma", [0.99, 1.0, torch.tensor(0.9)], ids=["0.99", "1", "tensor"])
def test_cumulative_returns_match_openrlhf_bit_for_bit(maker, rewards_dtype, gamma):
    from rlscan.adapters.openrlhf import get_cumulative_returns

    rewards, _, mask = _batch(3, 16, 300, torch.float32, True)
    rewards = rewards.to(rewards_dtype)
    want = maker.get_cumulative_returns(None, rewards, mask, gamma)
    got = get_cumulative_returns(rewards, mask, gamma)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_patched_openrlhf_calls_rlscan_as_its_methods(maker):
    """``patch()`` and ``unpatch()`` themselves: integration_tests/test_adapter_contract.py."""
    import rlscan.adapters.openrlhf as adapter

    rewards, values, mask = _batch(4, 4, 64, torch.float32, True)
    want = (maker.get_advantages_and_returns(None, values, rewards, mask, 0.99, 0.95),
            maker.get_cumulative_returns(None, rewards, mask, 0.99))
    adapter.patch()
    try:
        for name in ("get_advantages_and_returns", "get_cumulative_returns"):
            assert maker.__dict__[name].__wrapped__ is getattr(adapter, name)
        instance = object.__new__(maker)  # OpenRLHF calls them as methods of its experience maker
        got = (instance.get_advantages_and_returns(values, rewards, mask, 0.99, 0.95),
               instance.get_cumulative_returns(rewards, mask, 0.99))
    finally:
        adapter.unpatch()
    for w, x in zip((*want[0], want[1]), (*got[0], got[1])):
        torch.testing.assert_close(x, w, rtol=0, atol=0)


def _private_copy():
    """The installed ``experience_maker.py`` executed as a module of another name, as OpenRLHF's
    own tests load it (``integration_tests/test_openrlhf_own_tests.py`` runs those)."""
    import openrlhf.trainer.ppo_utils.experience_maker as installed
    from openrlhf_timing import cuda_stand_ins

    spec = importlib.util.spec_from_file_location("_rlscan_private_experience_maker", installed.__file__)
    module = importlib.util.module_from_spec(spec)
    with cuda_stand_ins():
        spec.loader.exec_module(module)
    return module


def test_patch_module_reaches_a_private_copy_and_leaves_the_installed_class(maker):
    import rlscan.adapters.openrlhf as adapter

    names = ("get_advantages_and_returns", "get_cumulative_returns")
    copy = _private_copy()
    theirs, installed = ({n: vars(c)[n] for n in names} for c in (copy.RemoteExperienceMaker, maker))
    rewards, values, mask = _batch(5, 4, 64, torch.float32, True)
    want = maker.get_advantages_and_returns(None, values, rewards, mask, 0.99, 0.95)
    assert not adapter.is_patched(module=copy)
    adapter.patch(module=copy)
    try:
        adapter.patch(module=copy)  # again: nothing changes
        assert adapter.is_patched(module=copy) and not adapter.is_patched()
        for name in names:
            assert vars(copy.RemoteExperienceMaker)[name].__wrapped__ is getattr(adapter, name)
            assert vars(maker)[name] is installed[name]
        got = object.__new__(copy.RemoteExperienceMaker).get_advantages_and_returns(values, rewards, mask, 0.99, 0.95)
        adapter.unpatch()  # the installed class's: nothing to undo, the copy stays patched
        assert adapter.is_patched(module=copy)
    finally:
        adapter.unpatch(module=copy)
    assert not adapter.is_patched(module=copy)
    assert {n: vars(copy.RemoteExperienceMaker)[n] for n in names} == theirs
    for w, x in zip(want, got):
        torch.testing.assert_close(x, w, rtol=0, atol=0)


@pytest.mark.parametrize("module,error,match", [
    ("openrlhf.trainer.ppo_utils.experience_maker", TypeError, "module must be a module .* got str"),
    (types.ModuleType("empty"), ValueError, "module must define OpenRLHF's RemoteExperienceMaker .* empty does not"),
])
def test_patch_refuses_a_module_without_the_experience_maker(module, error, match):
    import rlscan.adapters.openrlhf as adapter

    for verb in (adapter.patch, adapter.unpatch, adapter.is_patched):
        with pytest.raises(error, match=match):
            verb(module=module)


def test_a_release_outside_the_range_is_refused_by_name():
    from rlscan.adapters.openrlhf import SUPPORTED_OPENRLHF, check_release

    check_release("0.11.2")
    with pytest.raises(ImportError, match=r"0\.12\.0") as error:
        check_release("0.12.0")
    assert SUPPORTED_OPENRLHF in str(error.value)


@pytest.mark.parametrize("call,match", [
    (lambda f: f.get_advantages_and_returns([[0.0]], torch.zeros(1, 1), None, 0.9, 0.9), "values must be a torch"),
    (lambda f: f.get_advantages_and_returns(torch.zeros(2, 3), torch.zeros(2, 4), None, 0.9, 0.9), "values must have"),
    (lambda f: f.get_advantages_and_returns(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3, 2), 0.9, 0.9),
     "action_mask must have"),
    (lambda f: f.get_advantages_and_returns(torch.zeros(2, 3), torch.zeros(2, 3), None, "0.9", 0.9), "gamma"),
    (lambda f: f.get_advantages_and_returns(torch.zeros(2, 3), torch.zeros(2, 3), None, 0.9, torch.ones(2)), "lambd"),
    (lambda f: f.get_cumulative_returns(torch.zeros(6), None, 0.9), "rewards must be 2-d"),
    (lambda f: f.get_cumulative_returns(torch.zeros(2, 3, dtype=torch.long), None, 0.9), "rewards must be floating"),
    (lambda f: f.get_cumulative_returns(torch.zeros(2, 3), [[1, 1, 1]] * 2, 0.9), "action_mask must be a torch"),
    (lambda f: f.get_cumulative_returns(torch.zeros(2, 3), None, 1.5), "gamma"),
])
def test_bad_inputs_are_answered_by_name(call, match):
    import rlscan.adapters.openrlhf as adapter

    with pytest.raises((TypeError, ValueError), match=match):
        call(adapter)
