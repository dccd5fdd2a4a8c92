"""rlscan.adapters.sb3 against Stable-Baselines3's own GAE, in real (short) training runs.

Exact mode must be SB3's float32 loop bit for bit, so whole training runs with and
without the switch end with equal parameters. Fast mode runs the Triton kernels
(through the interpreter on CPU, compiled on a GPU) and must agree to 1e-5.
"""
from __future__ import annotations

import contextlib
import pickle
import zipfile
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
from stable_baselines3.common.env_util import make_vec_env

import rlscan
from rlscan._backend import interpreting
from rlscan.adapters import sb3 as adapter
from rlscan.adapters.sb3 import RLScanDictRolloutBuffer, RLScanRolloutBuffer, rlscan_buffer_class

try:
    import sb3_contrib
    import sb3_contrib.common.envs
    import sb3_contrib.common.maskable.buffers
    import sb3_contrib.common.recurrent.buffers
except ImportError:  # the contrib tests are skipped
    sb3_contrib = None

needs_contrib = pytest.mark.skipif(sb3_contrib is None, reason="sb3-contrib is not installed")


# ----------------------------------------------------------------------------- helpers


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != np.float32 or b.dtype != np.float32 or a.shape != b.shape:
        return False
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


def sb3_gae(buffer, last_values, dones):
    """SB3's own loop (RolloutBuffer.compute_returns_and_advantage) on a copy of the buffer's inputs."""
    shadow = SimpleNamespace(
        buffer_size=buffer.buffer_size, gamma=buffer.gamma, gae_lambda=buffer.gae_lambda,
        rewards=buffer.rewards.copy(), values=buffer.values.copy(), episode_starts=buffer.episode_starts.copy(),
        advantages=np.zeros_like(buffer.advantages),
    )
    RolloutBuffer.compute_returns_and_advantage(shadow, last_values, dones)
    return shadow.advantages, shadow.returns


@pytest.fixture
def rollouts(monkeypatch):
    """Each GAE computed by rlscan during the test: rlscan's results next to SB3's on the same inputs."""
    records = []
    compute = adapter._compute_returns_and_advantage

    def recording(buffer, last_values, dones):
        ref_adv, ref_ret = sb3_gae(buffer, last_values, dones)
        compute(buffer, last_values, dones)
        records.append(SimpleNamespace(
            advantages=buffer.advantages.copy(), returns=buffer.returns.copy(),
            ref_advantages=ref_adv, ref_returns=ref_ret, cuts=int(buffer.episode_starts[1:].sum() + np.sum(dones)),
        ))

    monkeypatch.setattr(adapter, "_compute_returns_and_advantage", recording)
    return records


def assert_exact(records, n_rollouts):
    assert len(records) == n_rollouts
    for r in records:
        assert same_bits(r.advantages, r.ref_advantages)
        assert same_bits(r.returns, r.ref_returns)
    assert sum(r.cuts for r in records) > 0, "no episode ended inside a rollout: the cuts went untested"


def assert_close(records, n_rollouts):
    assert len(records) == n_rollouts
    for r in records:
        np.testing.assert_allclose(r.advantages, r.ref_advantages, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(r.returns, r.ref_returns, rtol=1e-5, atol=1e-5)


def cartpole(n_envs=2, **kwargs):
    return make_vec_env("CartPole-v1", n_envs=n_envs, seed=0, **kwargs)


class DictCartPole(gym.ObservationWrapper):
    """CartPole with a Dict observation: positions and velocities apart."""

    def __init__(self, env):
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = spaces.Dict({
            "position": spaces.Box(low[::2], high[::2], dtype=np.float32),
            "velocity": spaces.Box(low[1::2], high[1::2], dtype=np.float32),
        })

    def observation(self, obs):
        return {"position": obs[::2], "velocity": obs[1::2]}


def dict_cartpole(n_envs=2):
    return cartpole(n_envs, wrapper_class=DictCartPole)


def masked_env(n_envs=2):
    """A discrete env whose invalid actions are masked (MaskablePPO)."""

    def make():
        return sb3_contrib.common.envs.InvalidActionEnvDiscrete(dim=4, ep_length=10, n_invalid_actions=2)

    return make_vec_env(make, n_envs=n_envs, seed=0)


def parameters(model):
    return dict(model.policy.named_parameters())


def assert_same_parameters(a, b):
    pa, pb = parameters(a), parameters(b)
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name


@contextlib.contextmanager
def fast_kernels(monkeypatch):
    """Where fast mode's Triton kernels can run: yields the model device."""
    if interpreting():
        with rlscan.use_backend("triton"):
            yield "cpu"
    elif torch.cuda.is_available():
        monkeypatch.setattr(adapter, "GPU_MIN_ELEMENTS", 0)
        yield "cuda"
    else:
        pytest.skip("needs TRITON_INTERPRET=1 or a GPU")


# ----------------------------------------------------------------------------- the computation itself


def random_buffer(cls, T, N, gamma, lmbda, seed, **kwargs):
    rng = np.random.default_rng(seed)
    buffer = cls(T, spaces.Box(-1, 1, (3,)), spaces.Discrete(2), device="cpu", gamma=gamma, gae_lambda=lmbda,
                 n_envs=N, **kwargs)
    buffer.rewards[:] = rng.normal(size=(T, N))
    buffer.values[:] = rng.normal(scale=10.0, size=(T, N))
    buffer.episode_starts[:] = rng.random((T, N)) < 0.25
    buffer.episode_starts[0, 0] = 1.0
    buffer.episode_starts[-1, -1] = 1.0
    dones = np.arange(N) % 2 == 0
    last_values = torch.from_numpy(rng.normal(scale=10.0, size=(N, 1)).astype(np.float32))
    return buffer, last_values, dones


SHAPES = [(1, 3), (2, 1), (37, 4)]
COEFS = [(0.99, 0.95), (0.97, 1.0), (1.0, 1.0), (0.9, 0.0), (0.0, 0.7)]


@pytest.mark.parametrize("backend", ["cpu", "triton"])
@pytest.mark.parametrize("gamma,lmbda", COEFS)
@pytest.mark.parametrize("T,N", SHAPES)
def test_exact_gae_is_sb3_bit_for_bit(T, N, gamma, lmbda, backend):
    if backend == "triton" and not interpreting():
        pytest.skip("Triton on CPU arrays needs TRITON_INTERPRET=1")
    buffer, last_values, dones = random_buffer(RLScanRolloutBuffer, T, N, gamma, lmbda, seed=T * N, exact=True)
    ref_adv, ref_ret = sb3_gae(buffer, last_values, dones)
    with rlscan.use_backend(backend):
        buffer.compute_returns_and_advantage(last_values, dones)
    assert same_bits(buffer.advantages, ref_adv)
    assert same_bits(buffer.returns, ref_ret)


@pytest.mark.parametrize("gamma,lmbda", COEFS)
def test_fast_gae_on_triton_kernels(gamma, lmbda, monkeypatch):
    buffer, last_values, dones = random_buffer(RLScanRolloutBuffer, 37, 4, gamma, lmbda, seed=1)
    ref_adv, ref_ret = sb3_gae(buffer, last_values, dones)
    with fast_kernels(monkeypatch):
        buffer.compute_returns_and_advantage(last_values, dones)
    np.testing.assert_allclose(buffer.advantages, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buffer.returns, ref_ret, rtol=1e-5, atol=1e-5)


def test_advantages_are_filled_in_place():
    buffer, last_values, dones = random_buffer(RLScanRolloutBuffer, 5, 2, 0.99, 0.95, seed=2)
    advantages = buffer.advantages
    buffer.compute_returns_and_advantage(last_values, dones)
    assert buffer.advantages is advantages
    assert same_bits(buffer.returns, buffer.advantages + buffer.values)


def test_gpu_only_for_large_fast_rollouts_on_cuda(monkeypatch):
    def buffer(device, n, exact=False):
        return SimpleNamespace(device=torch.device(device), advantages=np.zeros(n), rlscan_exact=exact)

    monkeypatch.setattr(adapter, "GPU_MIN_ELEMENTS", 1 << 12)
    big, small = adapter.GPU_MIN_ELEMENTS, adapter.GPU_MIN_ELEMENTS - 1
    with rlscan.use_backend("auto"):
        assert adapter._gpu_for(buffer("cuda", big)) == torch.device("cuda")
        assert adapter._gpu_for(buffer("cuda", small)) is None
        assert adapter._gpu_for(buffer("cuda", big, exact=True)) is None
        assert adapter._gpu_for(buffer("cpu", big)) is None
    with rlscan.use_backend("cpu"):
        assert adapter._gpu_for(buffer("cuda", big)) is None
    with rlscan.use_backend("triton"):  # asked for the kernels: every rollout of a CUDA model
        assert adapter._gpu_for(buffer("cuda", small, exact=True)) == torch.device("cuda")
        assert adapter._gpu_for(buffer("cpu", big)) is None


def test_device_path_copies_back(monkeypatch):
    """The path that moves the buffer to the model's device (CUDA in real use) and back."""
    buffer, last_values, dones = random_buffer(RLScanRolloutBuffer, 37, 4, 0.99, 0.95, seed=3)
    ref_adv, ref_ret = sb3_gae(buffer, last_values, dones)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    monkeypatch.setattr(adapter, "_gpu_for", lambda buffer: torch.device(device))
    buffer.compute_returns_and_advantage(last_values.to(device), dones)
    np.testing.assert_allclose(buffer.advantages, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buffer.returns, ref_ret, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- training runs


ALGOS = {
    "PPO": (PPO, dict(n_steps=64, batch_size=64, n_epochs=2), 3),
    "A2C": (A2C, dict(n_steps=8), 6),
}


def train(algo, exact, env=cartpole, policy="MlpPolicy", device="cpu"):
    cls, kwargs, n_rollouts = ALGOS[algo]
    model = cls(policy, env(), seed=0, device=device, **kwargs)
    if exact is not None:
        adapter.enable(model, exact=exact)
    model.learn(n_rollouts * model.n_steps * model.n_envs)
    return model


@pytest.mark.parametrize("algo", ALGOS)
def test_exact_training_is_bit_identical(algo, rollouts):
    plain = train(algo, exact=None)
    switched = train(algo, exact=True)
    assert type(switched.rollout_buffer) is RLScanRolloutBuffer
    assert_exact(rollouts, ALGOS[algo][2])
    assert_same_parameters(plain, switched)


@pytest.mark.parametrize("algo", ALGOS)
def test_fast_training_matches_sb3(algo, rollouts, monkeypatch):
    with fast_kernels(monkeypatch) as device:
        train(algo, exact=False, device=device)
    assert_close(rollouts, ALGOS[algo][2])


def test_dict_observations(rollouts):
    plain = train("PPO", exact=None, env=dict_cartpole, policy="MultiInputPolicy")
    switched = train("PPO", exact=True, env=dict_cartpole, policy="MultiInputPolicy")
    assert type(switched.rollout_buffer) is RLScanDictRolloutBuffer
    assert isinstance(switched.rollout_buffer, DictRolloutBuffer)
    assert_exact(rollouts, ALGOS["PPO"][2])
    assert_same_parameters(plain, switched)


# ----------------------------------------------------------------------------- sb3-contrib


@needs_contrib
@pytest.mark.parametrize("policy,env,base", [
    ("MlpLstmPolicy", cartpole, "RecurrentRolloutBuffer"),
    ("MultiInputLstmPolicy", dict_cartpole, "RecurrentDictRolloutBuffer"),
])
def test_recurrent_ppo(policy, env, base, rollouts):
    base = getattr(sb3_contrib.common.recurrent.buffers, base)
    model = sb3_contrib.RecurrentPPO(policy, env(), n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu",
                         policy_kwargs=dict(lstm_hidden_size=16, net_arch=[16]))
    adapter.enable(model, exact=True)
    assert isinstance(model.rollout_buffer, base) and type(model.rollout_buffer) is rlscan_buffer_class(base)
    model.learn(64)  # RecurrentPPO asserts its buffer's type before each rollout
    assert_exact(rollouts, 1)


@needs_contrib
def test_maskable_ppo(rollouts):
    model = sb3_contrib.MaskablePPO("MlpPolicy", masked_env(), n_steps=32, batch_size=64, n_epochs=1, seed=0,
                                    device="cpu")
    adapter.enable(model, exact=True)
    assert isinstance(model.rollout_buffer, sb3_contrib.common.maskable.buffers.MaskableRolloutBuffer)
    model.learn(64)
    assert_exact(rollouts, 1)


@needs_contrib
def test_trpo(rollouts):
    model = sb3_contrib.TRPO("MlpPolicy", cartpole(), n_steps=32, batch_size=64, seed=0, device="cpu")
    adapter.enable(model, exact=True)
    model.learn(64)
    assert_exact(rollouts, 1)


@needs_contrib
def test_subclasses_are_made_once():
    first = sb3_contrib.RecurrentPPO("MlpLstmPolicy", cartpole(), n_steps=8, batch_size=16, device="cpu")
    second = sb3_contrib.RecurrentPPO("MlpLstmPolicy", cartpole(), n_steps=8, batch_size=16, device="cpu")
    adapter.enable(first, exact=True)
    adapter.enable(second)
    assert type(first.rollout_buffer) is type(second.rollout_buffer) is adapter.RLScanRecurrentRolloutBuffer
    adapter.enable(first)  # again: only the mode changes
    assert type(first.rollout_buffer) is adapter.RLScanRecurrentRolloutBuffer
    assert first.rollout_buffer.rlscan_exact is False
    assert rlscan_buffer_class(RolloutBuffer) is RLScanRolloutBuffer
    assert rlscan_buffer_class(RLScanRolloutBuffer) is RLScanRolloutBuffer
    assert pickle.loads(pickle.dumps(adapter.RLScanMaskableRolloutBuffer)) is adapter.RLScanMaskableRolloutBuffer
    # a model saved with an older name of the class loads it
    assert pickle.loads(b"crlscan.adapters.sb3\nTritonMaskableRolloutBuffer\n.") is adapter.RLScanMaskableRolloutBuffer


# ----------------------------------------------------------------------------- save and load


def test_switch_is_not_saved_and_is_reapplied_after_load(tmp_path, rollouts):
    model = adapter.enable(PPO("MlpPolicy", cartpole(), n_steps=32, batch_size=64, seed=0, device="cpu"), exact=True)
    model.learn(64)
    path = tmp_path / "ppo.zip"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        assert b"rlscan" not in archive.read("data"), "the saved model must load without rlscan"

    plain = PPO.load(path, env=cartpole(), device="cpu")
    assert type(plain.rollout_buffer) is RolloutBuffer
    plain.learn(64)
    reapplied = adapter.enable(PPO.load(path, env=cartpole(), device="cpu"), exact=True)
    reapplied.learn(64)
    assert_exact(rollouts, 2)
    assert_same_parameters(plain, reapplied)


def check_buffer_class_is_saved(algo, buffer_class, env, path, rollouts):
    model = algo("MlpPolicy", env(), n_steps=32, batch_size=64, seed=0, device="cpu",
                 rollout_buffer_class=buffer_class, rollout_buffer_kwargs={"exact": True})
    assert model.rollout_buffer.rlscan_exact is True
    model.save(path)
    loaded = algo.load(path, env=env(), device="cpu")
    assert type(loaded.rollout_buffer) is buffer_class
    assert loaded.rollout_buffer.rlscan_exact is True
    loaded.learn(64)
    assert_exact(rollouts, 1)
    # Where rlscan is not installed, custom_objects drops the class: SB3 then picks its own.
    without = algo.load(path, env=env(), device="cpu",
                        custom_objects={"rollout_buffer_class": None, "rollout_buffer_kwargs": {}})
    assert type(without.rollout_buffer) is buffer_class._rlscan_base


def _stress_models():
    """Every supported model: (class, env factory, policy, extra constructor arguments)."""
    models = {
        "PPO": (PPO, cartpole, "MlpPolicy", dict(batch_size=64, n_epochs=1)),
        "A2C": (A2C, cartpole, "MlpPolicy", {}),
    }
    if sb3_contrib is not None:
        models.update({
            "MaskablePPO": (sb3_contrib.MaskablePPO, masked_env, "MlpPolicy", dict(batch_size=64, n_epochs=1)),
            "TRPO": (sb3_contrib.TRPO, cartpole, "MlpPolicy", dict(batch_size=64)),
            "RecurrentPPO": (sb3_contrib.RecurrentPPO, cartpole, "MlpLstmPolicy",
                             dict(batch_size=64, n_epochs=1, policy_kwargs=dict(lstm_hidden_size=16, net_arch=[16]))),
        })
    return models


@pytest.mark.parametrize("algo", list(_stress_models()))
def test_save_load_new_n_envs_and_resumed_learn_leave_no_stale_state(algo, tmp_path, rollouts):
    """Train with 2 envs, save, load with 4, switch on again, resume learning twice: every
    rollout's GAE is SB3's, bit for bit, on a buffer of the new shape."""
    cls, env, policy, extra = _stress_models()[algo]
    model = adapter.enable(cls(policy, env(2), n_steps=32, seed=0, device="cpu", **extra), exact=True)
    model.learn(64)
    path = tmp_path / f"{algo}.zip"
    model.save(path)
    loaded = adapter.enable(cls.load(path, env=env(4), device="cpu"), exact=True)
    assert loaded.rollout_buffer.advantages.shape == (32, 4)
    loaded.learn(128, reset_num_timesteps=False)
    loaded.learn(128, reset_num_timesteps=False)
    assert [r.advantages.shape for r in rollouts] == [(32, 2)] + [(32, 4)] * 2
    assert_exact(rollouts, 3)


def test_buffer_class_argument_is_saved(tmp_path, rollouts):
    check_buffer_class_is_saved(PPO, RLScanRolloutBuffer, cartpole, tmp_path / "ppo.zip", rollouts)


@needs_contrib
def test_maskable_buffer_class_argument_is_saved(tmp_path, rollouts):
    buffer_class = adapter.RLScanMaskableRolloutBuffer
    check_buffer_class_is_saved(sb3_contrib.MaskablePPO, buffer_class, masked_env, tmp_path / "mppo.zip", rollouts)


# ----------------------------------------------------------------------------- switching off, wrong models


def test_disable_buffer_built_with_rlscan_class():
    model = PPO("MlpPolicy", cartpole(), n_steps=32, device="cpu", rollout_buffer_class=RLScanRolloutBuffer)
    adapter.disable(model)
    assert type(model.rollout_buffer) is RolloutBuffer


def test_disable_refuses_foreign_subclasses():
    class Custom(RLScanRolloutBuffer):
        pass

    model = PPO("MlpPolicy", cartpole(), n_steps=32, device="cpu", rollout_buffer_class=Custom)
    with pytest.raises(TypeError, match="Custom"):
        adapter.disable(model)


@pytest.mark.parametrize("make", [
    lambda: DQN("MlpPolicy", "CartPole-v1", buffer_size=100, device="cpu"),
    lambda: SAC("MlpPolicy", "Pendulum-v1", buffer_size=100, device="cpu"),
])
def test_off_policy_models_are_refused(make):
    model = make()
    with pytest.raises(TypeError, match=f"{type(model).__name__} is off-policy"):
        adapter.enable(model)
    with pytest.raises(TypeError, match="RolloutBuffer"):
        adapter.disable(model)


def test_bad_arguments():
    with pytest.raises(TypeError, match="no rollout_buffer"):
        adapter.enable(object())
    model = PPO("MlpPolicy", cartpole(), n_steps=8, batch_size=16, device="cpu")
    with pytest.raises(TypeError, match="exact must be a bool"):
        adapter.enable(model, exact=1)
    assert type(model.rollout_buffer) is RolloutBuffer

    class OwnGAE(RolloutBuffer):
        def compute_returns_and_advantage(self, last_values, dones):
            pass

    with pytest.raises(TypeError, match="OwnGAE overrides compute_returns_and_advantage"):
        rlscan_buffer_class(OwnGAE)
    with pytest.raises(TypeError, match="RolloutBuffer"):
        rlscan_buffer_class(dict)
