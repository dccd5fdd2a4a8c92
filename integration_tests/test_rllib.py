"""rlscan.adapters.rllib against Ray RLlib's own GAE connector and V-trace.

Unit tests (no Ray cluster) call RLlib's ``GeneralAdvantageEstimation`` and rlscan's
``RLScanGAE`` on the same random batches of episodes, laid out as RLlib's learner
pipeline lays them out (each episode lengthened by its bootstrap step, terminated and
truncated ends, flat and zero-padded ``[rows, max_seq_len]`` batches), and RLlib's
``vtrace_torch`` against rlscan's on random time-major batches.

Integration tests start a local Ray (two CPUs, no dashboard) and build real algorithms
on CartPole after ``patch()``: PPO (its learner's connector outputs against the stock
connector's on the same sampled episodes, an LSTM PPO for the padded layout, and
training), APPO with a local learner (the V-trace inside its loss against stock on the
same batch), and IMPALA with a remote learner actor (the patched learner class reaches
it, and training runs).

Tolerances: exact mode is bit for bit; fast mode and V-trace agree within 1e-6 relative
to the reference's magnitude (at least 1). The "triton" backend runs the real kernels
through Triton's interpreter on CPU tensors.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")

from ray.rllib.algorithms.appo import APPOConfig  # noqa: E402
from ray.rllib.algorithms.impala import IMPALAConfig  # noqa: E402
from ray.rllib.algorithms.impala.torch import vtrace_torch_v2  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner  # noqa: E402
from ray.rllib.connectors.learner import GeneralAdvantageEstimation  # noqa: E402
from ray.rllib.core.columns import Columns  # noqa: E402
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI  # noqa: E402
from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from ray.rllib.utils.postprocessing.zero_padding import split_and_zero_pad_n_episodes  # noqa: E402

import rlscan  # noqa: E402
from rlscan.adapters import rllib as adapter  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from rllib_timing import MODULE, OneModule  # noqa: E402  (the stand-in MultiRLModule the timing shares)

KEYS = ("advantages", "value_targets")


def close(ours: torch.Tensor, reference: torch.Tensor, tol: float = 1e-6) -> bool:
    assert ours.shape == reference.shape and ours.dtype == reference.dtype
    scale = max(1.0, reference.abs().max().item())
    return (ours - reference).abs().max().item() <= tol * scale


def same_bits(ours: torch.Tensor, reference: torch.Tensor) -> bool:
    return ours.dtype == reference.dtype and ours.shape == reference.shape and torch.equal(
        ours.view(torch.int32), reference.view(torch.int32))


# ----------------------------------------------------------------------------- random batches


class _ValueModule(ValueFunctionAPI):
    """The part of an RLModule that the GAE connectors call: values read from the batch."""

    def __init__(self, max_seq_len=None):
        self.max_seq_len = max_seq_len
        self.model_config = {"max_seq_len": max_seq_len}

    def is_stateful(self):
        return self.max_seq_len is not None

    def compute_values(self, batch, embeddings=None):
        return batch[Columns.VF_PREDS].clone()


@pytest.fixture(autouse=True)
def _torch_algorithms_as_before():
    """RLlib's seeding (``update_global_seed_if_necessary``) turns
    ``torch.use_deterministic_algorithms`` on in CPU-only torch and leaves it on; put it back
    so the tests after these see the process as they would alone."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _episodes(lengths):
    """Episodes of the given lengths (bootstrap step included), as the GAE connectors see them."""
    return [SingleAgentEpisode(observations=[0] * (n + 1), actions=[0] * n, rewards=[0.0] * n, len_lookback_buffer=0)
            for n in lengths]


def _batch(lengths, ends, seed, max_seq_len=None, scale=10.0):
    """A learner batch over episodes of ``lengths`` steps (each with its bootstrap step last).

    ``ends[i]`` is "terminated" or "truncated": the flag set at episode i's last real step,
    as ``AddOneTsToEpisodesAndTruncate`` sets it; the bootstrap step has neither. "neither"
    leaves the episode's end unflagged (a pipeline without that piece)."""
    g = np.random.default_rng(seed)
    total = sum(lengths)
    values = (scale * g.standard_normal(total)).astype(np.float32)
    rewards = g.standard_normal(total).astype(np.float32)
    terminateds, truncateds = np.zeros(total, bool), np.zeros(total, bool)
    start = 0
    for n, end in zip(lengths, ends):
        rewards[start + n - 1] = 0.0  # the bootstrap step's reward
        if end != "neither":
            (terminateds if end == "terminated" else truncateds)[start + n - 2] = True
        start += n
    columns = {Columns.VF_PREDS: values, Columns.REWARDS: rewards,
               Columns.TERMINATEDS: terminateds, Columns.TRUNCATEDS: truncateds}
    if max_seq_len is not None:
        columns = {k: np.stack(split_and_zero_pad_n_episodes(v, lengths, max_seq_len)) for k, v in columns.items()}
    return {MODULE: {k: torch.from_numpy(v) for k, v in columns.items()}}


def _both(lengths, ends, seed, exact, max_seq_len=None, gamma=0.99, lambda_=0.95):
    """``(stock, ours)`` outputs of the two connectors on the same batch."""
    modules = OneModule(_ValueModule(max_seq_len))
    outs = []
    for piece in (GeneralAdvantageEstimation(gamma=gamma, lambda_=lambda_),
                  adapter.RLScanGAE(gamma=gamma, lambda_=lambda_, exact=exact)):
        batch = _batch(lengths, ends, seed, max_seq_len)
        outs.append(piece(rl_module=modules, episodes=_episodes(lengths), batch=batch)[MODULE])
    return outs


LAYOUTS = [
    ([2], ["terminated"]),
    ([7], ["truncated"]),
    ([5, 12, 2, 30, 9], ["terminated", "truncated", "truncated", "terminated", "terminated"]),
    ([64, 3, 41], ["truncated", "terminated", "truncated"]),
]


@pytest.mark.parametrize("lengths,ends", LAYOUTS)
@pytest.mark.parametrize("lambda_", [0.95, 1.0])
def test_connector_exact_is_rllib_bit_for_bit(lengths, ends, lambda_):
    stock, ours = _both(lengths, ends, seed=len(lengths), exact=True, lambda_=lambda_)
    for key in KEYS:
        assert same_bits(ours[key], stock[key]), key


@pytest.mark.parametrize("exact", [True, False])
def test_connector_episode_end_without_a_flag(exact):
    lengths, ends = [6, 9, 4], ["truncated", "neither", "terminated"]
    stock, ours = _both(lengths, ends, seed=11, exact=exact)
    for key in KEYS:
        assert same_bits(ours[key], stock[key]) if exact else close(ours[key], stock[key]), key


@pytest.mark.parametrize("lengths,ends", LAYOUTS)
def test_connector_fast(lengths, ends):
    stock, ours = _both(lengths, ends, seed=7, exact=False)
    for key in KEYS:
        assert close(ours[key], stock[key]), key


@pytest.mark.parametrize("max_seq_len", [4, 16])
def test_connector_zero_padded_batches(max_seq_len):
    lengths, ends = LAYOUTS[2]
    stock, ours = _both(lengths, ends, seed=3, exact=True, max_seq_len=max_seq_len)
    for key in KEYS:
        assert same_bits(ours[key], stock[key]), key


@pytest.mark.parametrize("exact", [True, False])
def test_connector_triton_kernels(exact):
    lengths, ends = [9, 4, 13], ["truncated", "terminated", "truncated"]
    with rlscan.use_backend("triton"):
        stock, ours = _both(lengths, ends, seed=5, exact=exact)
    for key in KEYS:
        assert same_bits(ours[key], stock[key]) if exact else close(ours[key], stock[key]), key


def test_connector_refuses_a_batch_that_is_not_its_episodes():
    modules = OneModule(_ValueModule())
    batch = _batch([5, 6], ["terminated", "truncated"], seed=0)
    with pytest.raises(ValueError, match="value predictions"):
        adapter.RLScanGAE(gamma=0.99, lambda_=0.95)(rl_module=modules, episodes=_episodes([5, 7]), batch=batch)
    with pytest.raises(TypeError, match="exact"):
        adapter.RLScanGAE(gamma=0.99, lambda_=0.95, exact=1)


def _vtrace_inputs(T, B, seed, gamma=0.99):
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(T, B, generator=g) < 0.1
    mask = torch.rand(T, B, generator=g) > 0.05  # RLlib's loss mask zeroes the bootstrap steps' discounts
    return dict(
        target_action_log_probs=-torch.rand(T, B, generator=g) * 2,
        behaviour_action_log_probs=-torch.rand(T, B, generator=g) * 2,
        discounts=(1.0 - terminated.float()) * gamma * mask.float(),
        rewards=torch.randn(T, B, generator=g),
        values=torch.randn(T, B, generator=g) * 5,
        bootstrap_values=torch.randn(B, generator=g) * 5,
    )


@pytest.mark.parametrize("clips", [(1.0, 1.0), (2.0, 0.5), (None, None)])
@pytest.mark.parametrize("exact", [True, False])
def test_vtrace_is_rllib(clips, exact):
    inputs = _vtrace_inputs(50, 6, seed=1)
    kw = dict(clip_rho_threshold=clips[0], clip_pg_rho_threshold=clips[1])
    stock = vtrace_torch_v2.vtrace_torch(**inputs, **kw)
    ours = adapter.vtrace_torch(**inputs, **kw, exact=exact)
    for a, b in zip(ours, stock):
        assert close(a, b)


def test_vtrace_triton_kernels():
    inputs = _vtrace_inputs(12, 3, seed=2)
    with rlscan.use_backend("triton"):
        ours = adapter.vtrace_torch(**inputs)
    for a, b in zip(ours, vtrace_torch_v2.vtrace_torch(**inputs)):
        assert close(a, b)


def test_learner_class():
    cls = adapter.learner_class(PPOTorchLearner, exact=True)
    assert issubclass(cls, PPOTorchLearner) and cls.rlscan_exact
    assert adapter.learner_class(cls, exact=True) is cls
    assert adapter.learner_class(cls, exact=False)._rlscan_base is PPOTorchLearner
    with pytest.raises(TypeError, match="PPO, IMPALA or APPO"):
        adapter.learner_class(dict)


def test_patch_chooses_the_learner_class():
    """What the patched configs hand out (the contract's round trip, unpatch() included, is
    test_adapter_contract.py's)."""
    try:
        adapter.patch()
        assert PPOConfig().learner_class is adapter.learner_class(PPOTorchLearner)
        assert IMPALAConfig().learner_class.__name__ == "RLScanIMPALATorchLearner"
        adapter.patch(exact=True)
        assert APPOConfig().learner_class.__name__ == "RLScanAPPOTorchLearnerExact"
        chosen = PPOConfig().learners(learner_class=adapter.learner_class(PPOTorchLearner))
        assert chosen.learner_class is adapter.learner_class(PPOTorchLearner)  # the user's choice, and its mode
    finally:
        adapter.unpatch()


# ----------------------------------------------------------------------------- a real local Ray


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture
def patched():
    adapter.patch(exact=True)
    try:
        yield
    finally:
        adapter.unpatch()


def _ppo(model_config=None):
    config = (PPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0, rollout_fragment_length=200)
              .training(train_batch_size_per_learner=400, minibatch_size=200, num_epochs=1, lambda_=0.95)
              .debugging(seed=0))
    if model_config:
        config = config.rl_module(model_config=model_config)
    return config.build_algo()


def _learner_batch(algo, num_timesteps):
    """The learner pipeline's batch for freshly sampled episodes, stopped before its GAE piece."""
    learner = algo.learner_group._learner
    episodes = algo.env_runner.sample(num_timesteps=num_timesteps, explore=True)
    pieces = learner._learner_connector.connectors
    assert isinstance(pieces[-1], adapter.RLScanGAE) and pieces[-1].exact
    batch, shared = {}, {}
    for piece in pieces[:-1]:
        batch = piece(rl_module=learner.module, batch=batch, episodes=episodes, explore=False, shared_data=shared)
    return learner, episodes, batch


def _gae_outputs(piece, learner, episodes, batch):
    copy = {mid: dict(columns) for mid, columns in batch.items()}
    return piece(rl_module=learner.module, episodes=episodes, batch=copy)[MODULE]


def test_ppo_cartpole(local_ray, patched):
    algo = _ppo()
    try:
        assert isinstance(algo.learner_group._learner, adapter.learner_class(PPOTorchLearner, exact=True))
        for _ in range(2):
            result = algo.train()
            assert np.isfinite(result["learners"][MODULE]["total_loss"])
        learner, episodes, batch = _learner_batch(algo, 400)
        assert any(e.is_terminated for e in episodes) and any(not e.is_terminated for e in episodes)
        stock = _gae_outputs(GeneralAdvantageEstimation(gamma=0.99, lambda_=0.95), learner, episodes, batch)
        ours = _gae_outputs(learner._learner_connector.connectors[-1], learner, episodes, batch)
        fast = _gae_outputs(adapter.RLScanGAE(gamma=0.99, lambda_=0.95), learner, episodes, batch)
        for key in KEYS:
            assert same_bits(ours[key], stock[key]), key
            assert close(fast[key], stock[key]), key
    finally:
        algo.stop()


def test_ppo_lstm_zero_padded(local_ray, patched):
    algo = _ppo({"use_lstm": True, "max_seq_len": 16, "lstm_cell_size": 16})
    try:
        learner, episodes, batch = _learner_batch(algo, 200)
        stock = _gae_outputs(GeneralAdvantageEstimation(gamma=0.99, lambda_=0.95), learner, episodes, batch)
        ours = _gae_outputs(learner._learner_connector.connectors[-1], learner, episodes, batch)
        assert stock["advantages"].dim() == 2
        for key in KEYS:
            assert same_bits(ours[key], stock[key]), key
    finally:
        algo.stop()


def _train_until_learned(algo, timeout_s=300.0):
    """The first loss an asynchronous learner (IMPALA, APPO) reports.

    Its first update compiles the CPU loops when numba's cache is cold, which on a loaded machine
    takes longer than any fixed count of fast sampling iterations, so this waits on the clock.
    """
    deadline = time.monotonic() + timeout_s
    iterations = 0
    while time.monotonic() < deadline:
        iterations += 1
        loss = algo.train().get("learners", {}).get(MODULE, {}).get("total_loss")
        if loss is not None:
            return loss
    raise AssertionError("no learner update in %.0f s (%d iterations)" % (timeout_s, iterations))


def _impala_like(config_class, num_learners):
    return (config_class().environment("CartPole-v1")
            .env_runners(num_env_runners=0, rollout_fragment_length=50)
            .learners(num_learners=num_learners)
            .reporting(min_time_s_per_iteration=0)
            .training(train_batch_size_per_learner=200)
            .debugging(seed=0)
            .build_algo())


def test_appo_learner_vtrace(local_ray, patched, monkeypatch):
    algo = _impala_like(APPOConfig, num_learners=0)
    try:
        learner = algo.learner_group._learner
        assert isinstance(learner, adapter.learner_class(type(learner)._rlscan_base, exact=True))
        assert np.isfinite(_train_until_learned(algo))
        learner.shutdown()  # joins the learner's update thread: nothing else updates the module or calls V-trace
        # the same batch through the loss twice: rlscan's learner, then APPO's own method
        calls = []

        def recorded(fn):
            def call(**kwargs):
                out = fn(**kwargs)
                calls.append((fn, out))
                return out
            return call

        monkeypatch.setattr(adapter, "vtrace_torch", recorded(adapter.vtrace_torch))
        monkeypatch.setattr(adapter, "_STOCK_VTRACE", recorded(adapter._STOCK_VTRACE))
        episodes = algo.env_runner.sample(num_timesteps=200, explore=True)
        batch = learner._learner_connector(rl_module=learner.module, batch={}, episodes=episodes, shared_data={})
        fwd_out = learner.module.forward_train(batch)
        kwargs = dict(module_id=MODULE, config=learner.config.get_config_for_module(MODULE),
                      batch=batch[MODULE], fwd_out=fwd_out[MODULE])
        with torch.no_grad():
            ours = learner.compute_loss_for_module(**kwargs)
            stock = type(learner)._rlscan_base.compute_loss_for_module(learner, **kwargs)
        assert len(calls) == 2 and calls[0][0] is not calls[1][0]
        for a, b in zip(calls[0][1], calls[1][1]):
            assert a.shape[0] > 1 and close(a, b)
        assert close(ours, stock)
    finally:
        algo.stop()


def test_impala_remote_learner(local_ray, patched):
    algo = _impala_like(IMPALAConfig, num_learners=1)
    try:
        assert algo.learner_group._learner is None  # the learner is an actor in its own process
        assert np.isfinite(_train_until_learned(algo))

        def probe(learner):
            from ray.rllib.algorithms.impala.torch import impala_torch_learner

            from rlscan.adapters import rllib

            return ([c.__name__ for c in type(learner).__mro__],
                    impala_torch_learner.vtrace_torch is rllib._vtrace_for_learners)

        results = algo.learner_group.foreach_learner(probe)
        (mro, dispatched), = [r.get() for r in results] if not isinstance(results, list) else results
        assert "RLScanIMPALATorchLearnerExact" in mro and dispatched
    finally:
        algo.stop()
