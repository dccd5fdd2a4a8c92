"""rlscan.adapters.rsl_rl against rsl_rl's own PPO.

``compute_returns`` is compared on a real ``RolloutStorage`` filled with random rollouts
(episode ends inside and at the window's edge, γ and λ not exact in binary): exact mode
must give rsl_rl's returns and (normalised) advantages bit for bit, on the CPU loop and on
the Triton kernel (run by Triton's interpreter on CPU tensors); fast mode within 1e-5.
Then a real ``OnPolicyRunner`` trains on a small vectorised torch environment (with
terminations and time-outs), stock and enabled from the same seed: exact mode ends with
identical parameters, for MLP and recurrent (LSTM, GRU) actors and critics.
"""
from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("rsl_rl")

from rsl_rl.algorithms import PPO  # noqa: E402
from rsl_rl.runners import OnPolicyRunner  # noqa: E402
from tensordict import TensorDict  # noqa: E402

import rlscan  # noqa: E402
from rlscan._backend import interpreting  # noqa: E402
from rlscan.adapters import rsl_rl as adapter  # noqa: E402
from rsl_rl_env import OBS, make_runner, train_cfg  # noqa: E402  (this folder's rsl_rl world)

TRITON = pytest.mark.skipif(not interpreting(), reason="needs TRITON_INTERPRET=1 on CPU")


@pytest.fixture
def gae_calls(monkeypatch):
    """The number of calls to rlscan.gae (so a test knows rlscan, not rsl_rl, computed)."""
    calls = []
    real = rlscan.gae

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(rlscan, "gae", counting)
    return calls


# ----------------------------------------------------------------------------- compute_returns


def filled_alg(T=9, N=5, seed=0, **algorithm) -> PPO:
    """A runner's PPO whose storage holds a random rollout (rewards, values, dones) with
    episode ends inside the window and at its last step."""
    alg = make_runner({**train_cfg(**algorithm), "num_steps_per_env": T}, seed=seed, num_envs=N).alg
    g = torch.Generator().manual_seed(seed + 1)
    st = alg.storage
    st.rewards.copy_(torch.randn(T, N, 1, generator=g))
    st.values.copy_(torch.randn(T, N, 1, generator=g))
    dones = torch.rand(T, N, 1, generator=g) < 0.2
    dones[2, 0], dones[-1, 1] = True, True
    st.dones.copy_(dones)
    return alg


def observations(N=5, seed=0) -> TensorDict:
    return TensorDict({"policy": torch.randn(N, OBS, generator=torch.Generator().manual_seed(seed + 2))},
                      batch_size=[N])


def returns_of(alg: PPO, obs) -> tuple:
    alg.compute_returns(obs)
    return alg.storage.returns.clone(), alg.storage.advantages.clone()


@pytest.mark.parametrize("backend", ["cpu", pytest.param("triton", marks=TRITON)])
@pytest.mark.parametrize("per_mini_batch", [False, True])
@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.98, 0.9), (0.995, 0.41)])
def test_exact_is_rsl_rl_bit_for_bit(gamma, lam, per_mini_batch, backend, gae_calls):
    """Returns and advantages (normalised over the rollout, or left for the mini-batches).
    For (0.98, 0.9) and (0.995, 0.41), rsl_rl's ``fl32(γ₃₂ λ₃₂)`` is not ``fl32(γλ)``."""
    N = 5
    stock = filled_alg(N=N, gamma=gamma, lam=lam, normalize_advantage_per_mini_batch=per_mini_batch)
    ours = adapter.enable(copy.deepcopy(stock), exact=True)
    obs = observations(N)
    expected = returns_of(stock, obs)
    with rlscan.use_backend(backend):
        got = returns_of(ours, obs)
    assert len(gae_calls) == 1
    for name, a, b in zip(("returns", "advantages"), got, expected):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b), f"{name}: max difference {(a - b).abs().max().item():.3g}"


@TRITON
def test_fast_mode_close():
    stock = filled_alg(T=12, N=6)
    ours = adapter.enable(copy.deepcopy(stock))
    obs = observations(6)
    expected = returns_of(stock, obs)
    with rlscan.use_backend("triton"):
        got = returns_of(ours, obs)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.97, 0.93), (0.8, 0.7)])
def test_float64_storage(gamma, lam):
    """A float64 default dtype gives a float64 storage and critic, while rsl_rl still rounds
    γ and γλ to float32 (its ``1 − done`` is float32)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        stock = filled_alg(gamma=gamma, lam=lam)
    finally:
        torch.set_default_dtype(default)
    assert stock.storage.values.dtype == torch.float64
    ours = adapter.enable(copy.deepcopy(stock), exact=True)
    obs = observations().apply(lambda x: x.double())
    for a, b in zip(returns_of(ours, obs), returns_of(stock, obs)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("rnn_type", ["lstm", "gru"])
def test_recurrent_critic_state_is_kept(rnn_type):
    """The bootstrap's critic call leaves the hidden state where the rollout left it."""
    stock = filled_alg(model="RNNModel", rnn_type=rnn_type)
    obs = observations()
    with torch.no_grad():
        stock.act(obs)  # a hidden state exists now
    ours = adapter.enable(copy.deepcopy(stock), exact=True)
    before = copy.deepcopy(ours.critic.get_hidden_state())
    for a, b in zip(returns_of(ours, obs), returns_of(stock, obs)):
        assert torch.equal(a, b)
    after, reference = ours.critic.get_hidden_state(), stock.critic.get_hidden_state()
    for state in (before, after, reference):
        assert state is not None
    flat = lambda s: s if isinstance(s, tuple) else (s,)  # noqa: E731
    for x, y, z in zip(flat(before), flat(after), flat(reference)):
        assert torch.equal(x, y) and torch.equal(y, z)


# ----------------------------------------------------------------------------- training


def parameters(runner: OnPolicyRunner) -> dict:
    alg = runner.alg
    named = list(alg.actor.named_parameters(prefix="actor")) + list(alg.critic.named_parameters(prefix="critic"))
    return {name: p.detach().clone() for name, p in named}


def train(cfg: dict, iterations: int, enable=None, backend="cpu") -> dict:
    runner = make_runner(cfg)
    if enable is not None:
        adapter.enable(runner.alg, **enable)
    with rlscan.use_backend(backend):
        runner.learn(iterations)
    return parameters(runner)


@pytest.mark.parametrize(
    "model, rnn_type, per_mini_batch",
    [("MLPModel", None, False), ("MLPModel", None, True), ("RNNModel", "lstm", False), ("RNNModel", "gru", False)],
)
def test_training_exact_gives_identical_parameters(model, rnn_type, per_mini_batch, gae_calls):
    """OnPolicyRunner.learn for 3 iterations, stock and with rlscan's exact GAE."""
    cfg = train_cfg(model, rnn_type or "lstm", normalize_advantage_per_mini_batch=per_mini_batch)
    stock = train(cfg, 3)
    ours = train(cfg, 3, enable={"exact": True})
    assert len(gae_calls) == 3
    assert stock.keys() == ours.keys()
    moved = train(cfg, 0)
    assert any(not torch.equal(stock[k], moved[k]) for k in stock), "training changed nothing"
    for name in stock:
        assert torch.equal(stock[name], ours[name]), name


@TRITON
def test_training_fast_mode_close(gae_calls):
    """Fast mode on the Triton kernel: the returns differ from rsl_rl's in the last bits,
    so the parameters drift apart only at float32 rounding."""
    cfg = train_cfg()
    stock = train(cfg, 2)
    ours = train(cfg, 2, enable={}, backend="triton")
    assert len(gae_calls) == 2
    for name in stock:
        torch.testing.assert_close(ours[name], stock[name], rtol=1e-4, atol=1e-5, msg=name)


# ----------------------------------------------------------------------------- the switch


def test_refusals():
    runner = make_runner(train_cfg())
    with pytest.raises(TypeError, match="runner.alg"):
        adapter.enable(runner)
    with pytest.raises(TypeError, match="exact must be a bool"):
        adapter.enable(runner.alg, exact=1)

    class OwnReturns(PPO):
        def compute_returns(self, obs):
            pass

    alg = copy.deepcopy(runner.alg)
    alg.__class__ = OwnReturns
    with pytest.raises(TypeError, match="overrides compute_returns"):
        adapter.enable(alg)
    alg = copy.deepcopy(runner.alg)
    alg.compute_returns = lambda obs: None
    with pytest.raises(TypeError, match="replaced"):
        adapter.enable(alg)
    alg = adapter.enable(filled_alg())
    alg.critic.double()
    with pytest.raises(TypeError, match="float64 values for a storage of torch.float32"):
        alg.compute_returns(observations().apply(lambda x: x.double()))
    alg = adapter.enable(filled_alg())
    alg.gamma = "0.99"
    with pytest.raises(TypeError, match="alg.gamma must be a float"):
        alg.compute_returns(observations())
