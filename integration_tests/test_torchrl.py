"""rlscan.adapters.torchrl against TorchRL's own estimators.

Unit tests feed random rollouts (terminations, truncations and both at once, batch
shapes ``[*B, T, 1]``, time first, float32 and float64, per-step γ, ``shifted=True``) to
rlscan's drop-ins and compare them with TorchRL's loop functions
(``generalized_advantage_estimate``, ``td_lambda_return_estimate``, ``td1_return_estimate``,
and ``vtrace_advantage_estimate`` through the stock ``VTrace``), gradients included.
Integration tests run ``ClipPPOLoss`` on CartPole rollouts with the estimator put in both
ways (an instance given to ``make_value_estimator``, and ``patch()``) and compare loss
values and parameter gradients with stock TorchRL.

Tolerances: 1e-6 (float32) and 1e-12 (float64), relative to the largest magnitude of
the reference. The "triton" backend runs the real kernels through Triton's interpreter
on CPU tensors.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torchrl")

from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402
from torch.distributions import Categorical  # noqa: E402
from torchrl.envs import GymEnv, StepCounter, TransformedEnv  # noqa: E402
from torchrl.modules import MLP, OneHotCategorical, ProbabilisticActor, ValueOperator  # noqa: E402
from torchrl.objectives import ClipPPOLoss, ValueEstimators  # noqa: E402
from torchrl.objectives import value as stock  # noqa: E402
from torchrl.objectives.value.functional import (  # noqa: E402
    generalized_advantage_estimate,
    td1_return_estimate,
    td_lambda_return_estimate,
)

import rlscan  # noqa: E402
from rlscan._backend import interpreting  # noqa: E402
from rlscan.adapters import torchrl as adapter  # noqa: E402

KINDS = ("gae", "td_lambda", "td1", "vtrace")
OURS = {
    "gae": adapter.GAE, "td_lambda": adapter.TDLambdaEstimator, "td1": adapter.TD1Estimator, "vtrace": adapter.VTrace,
}
STOCK = {"gae": stock.GAE, "td_lambda": stock.TDLambdaEstimator, "td1": stock.TD1Estimator, "vtrace": stock.VTrace}
OBS, ACTIONS = 3, 4

BACKENDS = [
    "cpu",
    pytest.param("triton", marks=pytest.mark.skipif(not interpreting(), reason="needs TRITON_INTERPRET=1 on CPU")),
]


# ----------------------------------------------------------------------------- helpers


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    assert actual.shape == expected.shape, what
    assert actual.dtype == expected.dtype, what
    tol = 1e-12 if expected.dtype == torch.float64 else 1e-6
    scale = expected.detach().abs().max().clamp_min(1.0)
    err = ((actual.detach() - expected.detach()).abs().max() / scale).item()
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:g}"


def rollout(batch=(3,), T=16, dtype=torch.float64, *, seed=0, time_first=False, steps_to_next_obs=False):
    """A random TorchRL-style rollout tensordict, shape ``[*batch, T]`` (or ``[T, *batch]``),
    values already in it, with terminations, truncations and both at once."""
    g = torch.Generator().manual_seed(seed)
    bshape = (T, *batch) if time_first else (*batch, T)
    shape = (*bshape, 1)
    terminated = torch.rand(shape, generator=g) < 0.15
    truncated = torch.rand(shape, generator=g) < 0.15
    t_axis = 0 if time_first else len(batch)
    step = lambda t: (slice(None),) * t_axis + (t,)  # noqa: E731
    terminated[step(1)], truncated[step(T // 2)] = True, True
    terminated[step(T - 3)], truncated[step(T - 3)] = True, True
    done = terminated | truncated
    randn = lambda *s: torch.randn(s, generator=g, dtype=dtype)  # noqa: E731
    td = TensorDict(
        {
            "observation": randn(*bshape, OBS),
            "state_value": randn(*shape),
            "action_log_prob": randn(*bshape) - 1.0,
            "next": {
                "observation": randn(*bshape, OBS),
                "state_value": randn(*shape),
                "reward": randn(*shape),
                "done": done,
                "terminated": terminated,
                "truncated": truncated & ~terminated,
            },
        },
        batch_size=bshape,
    )
    if steps_to_next_obs:
        td["steps_to_next_obs"] = torch.randint(1, 4, shape, generator=g)
    return td


def actor(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    logits = TensorDictModule(nn.Linear(OBS, ACTIONS), in_keys=["observation"], out_keys=["logits"])
    net = ProbabilisticActor(logits, in_keys=["logits"], distribution_class=Categorical, return_log_prob=True)
    return net.to(dtype)


def estimator_args(kind: str, dtype, **extra) -> dict:
    args = {"gamma": 0.97, "value_network": None, **extra}
    if kind in ("gae", "td_lambda"):
        args["lmbda"] = 0.9
    if kind == "vtrace":
        args.update(actor_network=actor(dtype), rho_thresh=1.2, c_thresh=0.9)
    return args


def build(cls, dtype, args):
    est = cls(**args)
    return est.double() if dtype == torch.float64 else est


def discounts(est, td):
    """γ_t as TorchRL's estimators form it."""
    steps = td.get("steps_to_next_obs", None)
    return est.gamma if steps is None else est.gamma ** steps


def loop_reference(kind: str, est, td, axis: int):
    """(advantage, value_target) from TorchRL's loop functions (VTrace: the stock module,
    which calls ``vtrace_advantage_estimate``)."""
    if kind == "vtrace":
        out = est(td)
        return out["advantage"], out["value_target"]
    gamma = discounts(est, td)
    v, nv = td["state_value"], td["next", "state_value"]
    r, done, term = td["next", "reward"], td["next", "done"], td["next", "terminated"]
    if kind == "gae":
        return generalized_advantage_estimate(gamma, est.lmbda, v, nv, r, done, term, time_dim=axis)
    if kind == "td_lambda":
        target = td_lambda_return_estimate(gamma, est.lmbda, nv, r, done, term, time_dim=axis)
    else:
        target = td1_return_estimate(gamma, nv, r, done, term, time_dim=axis)
    return target - v, target


def compare_with_loops(kind, dtype, td, axis, **extra):
    args = estimator_args(kind, dtype, **extra)
    ours = build(OURS[kind], dtype, args)
    reference = build(STOCK[kind], dtype, args)
    out = ours(td.clone())
    adv, target = loop_reference(kind, reference, td.clone(), axis)
    assert_close(out["advantage"], adv, f"{kind} advantage")
    assert_close(out["value_target"], target, f"{kind} value_target")


# ----------------------------------------------------------------------------- unit tests


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_matches_torchrl_loops(kind, dtype, backend):
    """Terminations, truncations and both, [*B, T, 1] with B = (2, 3)."""
    td = rollout((2, 3), T=12, dtype=dtype, seed=1)
    with rlscan.use_backend(backend):
        compare_with_loops(kind, dtype, td, axis=2)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip_and_new_batch_size(kind):
    """An estimator saved and loaded into a fresh one, then run on another batch size
    (another number of environments): no state is left over from the first shape."""
    import io

    args = estimator_args(kind, torch.float64)
    first = build(OURS[kind], torch.float64, args)
    first(rollout((2,), T=10, seed=4).clone())
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    loaded = build(OURS[kind], torch.float64, estimator_args(kind, torch.float64))
    loaded.load_state_dict(torch.load(buffer))
    td = rollout((5,), T=14, seed=5)
    out = loaded(td.clone())
    adv, target = loop_reference(kind, build(STOCK[kind], torch.float64, args), td.clone(), axis=1)
    assert_close(out["advantage"], adv, f"{kind} advantage after load")
    assert_close(out["value_target"], target, f"{kind} value_target after load")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", [(), (4,)])
def test_layouts(kind, batch):
    """No batch dimension, and time first (``time_dim=0`` given to the constructor)."""
    compare_with_loops(kind, torch.float64, rollout(batch, T=20, seed=2), axis=len(batch))
    td = rollout(batch, T=20, seed=3, time_first=True)
    compare_with_loops(kind, torch.float64, td, axis=0, time_dim=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_per_step_gamma(kind, backend):
    """``steps_to_next_obs`` makes γ a tensor, ``gamma ** steps``."""
    td = rollout((3,), T=10, seed=4, steps_to_next_obs=True)
    with rlscan.use_backend(backend):
        compare_with_loops(kind, torch.float64, td, axis=1)


def test_named_time_dim():
    """A tensordict whose time dimension is named ``"time"``, not last."""
    td = rollout((3,), T=14, seed=5, time_first=True)
    td.refine_names("time", None)
    for kind in KINDS:
        compare_with_loops(kind, torch.float64, td, axis=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_torchrl(kind, backend):
    """differentiable=True: gradients reach rewards, values, next values (and the stored
    log-probabilities for V-trace) exactly as through TorchRL's loops."""
    dtype = torch.float64
    args = estimator_args(kind, dtype, differentiable=True)
    ours = build(OURS[kind], dtype, args)
    reference = build(STOCK[kind], dtype, {**args, "vectorized": False} if kind in ("gae", "td_lambda") else args)
    leaves = [("next", "reward"), "state_value", ("next", "state_value")]
    leaves += ["action_log_prob"] if kind == "vtrace" else []
    base = rollout((2,), T=12, seed=6)
    weights = torch.randn(2, 2, 12, 1, dtype=dtype, generator=torch.Generator().manual_seed(7))
    grads = []
    for est in (ours, reference):
        td = base.clone()
        for key in leaves:
            td[key] = td[key].clone().requires_grad_(True)
        inputs = [td[key] for key in leaves]
        with rlscan.use_backend(backend):
            out = est(td)
            objective = (weights[0] * out["advantage"] + weights[1] * out["value_target"]).sum()
            grads.append(torch.autograd.grad(objective, inputs))
    for key, g_ours, g_ref in zip(leaves, *grads):
        assert_close(g_ours, g_ref, f"{kind} d/d{key}")


def outputs_and_gradients(kind, est, td, backend, *, loops: bool):
    """``(advantage, value_target, gradients)`` of a weighted sum of both outputs with respect
    to rewards, values and next values, from the module (``loops=False``) or TorchRL's
    loop functions run with the module's buffers (``loops=True``)."""
    td = td.clone()
    leaves = [("next", "reward"), "state_value", ("next", "state_value")]
    for key in leaves:
        td[key] = td[key].clone().requires_grad_(True)
    with rlscan.use_backend(backend):
        if loops:
            advantage, target = loop_reference(kind, est, td, axis=td.batch_dims - 1)
        else:
            out = est(td)
            advantage, target = out["advantage"], out["value_target"]
    weights = torch.randn(2, *advantage.shape, dtype=advantage.dtype, generator=torch.Generator().manual_seed(7))
    objective = (weights[0] * advantage + weights[1] * target).sum()
    return advantage, target, torch.autograd.grad(objective, [td[key] for key in leaves], allow_unused=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "kind, lmbda, steps_to_next_obs",
    [("gae", 0.93, False), ("gae", 0.41, True), ("td_lambda", 0.93, True), ("td_lambda", 0.41, False),
     ("td1", None, True), ("vtrace", None, False)],
)
def test_float32_hyperparameters_on_float64_rollouts(kind, lmbda, steps_to_next_obs, backend):
    """An estimator left in float32 (TorchRL's default buffers) on a float64 rollout:
    TorchRL's loops round γ·λ (GAE) and 1 − λ (TD(λ), when λ < 0.5 has its last bit set,
    as 0.41 does) to float32 before they meet the data. rlscan reproduces them to 1e-12,
    gradients included, with γ = 0.97 and λ not exact in binary."""
    args = estimator_args(kind, torch.float64, differentiable=True, gamma=0.97)
    if lmbda is not None:
        args["lmbda"] = lmbda
    ours, reference = OURS[kind](**args), STOCK[kind](**args)
    assert ours.gamma.dtype == reference.gamma.dtype == torch.float32
    td = rollout((2,), T=12, dtype=torch.float64, seed=14, steps_to_next_obs=steps_to_next_obs)
    *got, got_grads = outputs_and_gradients(kind, ours, td, backend, loops=False)
    *expected, expected_grads = outputs_and_gradients(kind, reference, td, "cpu", loops=kind != "vtrace")
    for name, a, b in zip(("advantage", "value_target"), got, expected):
        assert_close(a, b, f"{kind} {name}")
    for name, a, b in zip(("reward", "state_value", "next state_value"), got_grads, expected_grads):
        if b is None:
            assert a is None or not a.any(), f"{kind} d/d{name}"
        else:
            assert_close(a, b, f"{kind} d/d{name}")
    if kind in ("gae", "td_lambda"):
        # the float32 rounding is real: float64 buffers give TorchRL results farther away than 1e-12
        wide = build(STOCK[kind], torch.float64, args)
        advantage64, *_ = outputs_and_gradients(kind, wide, td, "cpu", loops=True)
        gap = ((advantage64 - expected[0]).abs().max() / expected[0].abs().max()).item()
        assert gap > 1e-10, f"{kind}: float32 and float64 buffers differ by only {gap:.3g}"


@pytest.mark.parametrize("kind", ["gae", "vtrace"])
def test_gradcheck(kind):
    """Finite differences of the module's outputs against autograd, through rlscan."""
    args = estimator_args(kind, torch.float64, differentiable=True)
    est = build(OURS[kind], torch.float64, args)
    base = rollout((2,), T=6, seed=8)

    def outputs(reward, next_value):
        td = base.clone()
        td["next", "reward"], td["next", "state_value"] = reward, next_value
        out = est(td)
        return out["advantage"], out["value_target"]

    inputs = (base["next", "reward"].clone().requires_grad_(), base["next", "state_value"].clone().requires_grad_())
    assert torch.autograd.gradcheck(outputs, inputs)


def test_not_differentiable_by_default():
    """differentiable=False (the constructor's default) computes without a graph."""
    td = rollout((2,), T=8, seed=9)
    td["next", "reward"] = td["next", "reward"].requires_grad_()
    out = adapter.GAE(gamma=0.9, lmbda=0.9, value_network=None).double()(td)
    assert not out["advantage"].requires_grad


def value_net(dtype, seed=0):
    torch.manual_seed(seed)
    return TensorDictModule(nn.Linear(OBS, 1), in_keys=["observation"], out_keys=["state_value"]).to(dtype)


def consistent_rollout(batch, T, seed):
    """A rollout whose ``("next", "observation")[t]`` is ``observation[t+1]`` except where
    done, as ``shifted=True`` requires."""
    td = rollout(batch, T=T, seed=seed)
    obs, nxt = td["observation"], td["next", "observation"]
    done = td["next", "done"].squeeze(-1)
    follow = torch.cat([obs[..., 1:, :], nxt[..., -1:, :]], dim=-2)
    td["next", "observation"] = torch.where(done.unsqueeze(-1), nxt, follow)
    for key in ("state_value", ("next", "state_value")):
        del td[key]
    return td


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shifted", [False, True])
def test_with_value_network(kind, shifted):
    """The value network called by TorchRL's own code (twice, or once over T+1 slots with
    ``shifted=True``); rlscan's modules must then equal the stock ones, masks included."""
    dtype = torch.float64
    td = consistent_rollout((3,), T=15, seed=10)
    args = estimator_args(kind, dtype, value_network=value_net(dtype), shifted=shifted, shifted_budget=2)
    ours = build(OURS[kind], dtype, args)
    loops = {"vectorized": False} if kind in ("gae", "td_lambda") else {}
    reference = build(STOCK[kind], dtype, {**args, **loops})
    out, ref = ours(td.clone()), reference(td.clone())
    for key in ("advantage", "value_target", "state_value", ("next", "state_value")):
        assert_close(out[key], ref[key], f"{kind} {key}")
    if shifted:
        assert torch.equal(out["shifted_valid"], ref["shifted_valid"])


@pytest.mark.parametrize(
    "kind, options",
    [
        ("gae", {"average_gae": True}),
        ("gae", {"average_gae": True, "group_key": "task"}),
        ("gae", {"auto_reset_env": True}),
        ("vtrace", {"average_adv": True}),
        ("td_lambda", {"average_rewards": True}),
        ("td1", {"average_rewards": True, "group_key": "task"}),
    ],
)
def test_options(kind, options):
    """Standardised advantages or rewards (over the batch or within groups) and GAE's
    ``auto_reset_env``, as TorchRL's estimators do them."""
    dtype = torch.float64
    args = estimator_args(kind, dtype, **options)
    ours = build(OURS[kind], dtype, args)
    reference = build(STOCK[kind], dtype, {**args, "vectorized": False} if kind in ("gae", "td_lambda") else args)
    td = rollout((4,), T=12, seed=11)
    td["task"] = torch.tensor([0, 1, 0, 1]).unsqueeze(-1).expand(4, 12)
    out, ref = ours(td.clone()), reference(td.clone())
    for key in ("advantage", "value_target", ("next", "reward")):
        assert_close(out[key], ref[key], f"{kind} {options} {key}")


def test_vtrace_in_keys_are_torchrl_s():
    """VTrace lists its in_keys itself (see there); they must stay TorchRL's."""
    for extra in ({}, {"value_network": value_net(torch.float32)}, {"group_key": "task"}):
        args = estimator_args("vtrace", torch.float32, **extra)
        assert adapter.VTrace(**args).in_keys == stock.VTrace(**args).in_keys


def test_vtrace_threshold_checks():
    with pytest.raises(ValueError, match="rho_thresh"):
        adapter.VTrace(gamma=0.9, value_network=None, actor_network=actor(), rho_thresh=torch.ones(3))
    est = adapter.VTrace(gamma=0.9, value_network=None, actor_network=actor(), rho_thresh=2.0)
    state = est.state_dict()
    state["rho_thresh"] = torch.tensor(0.5)
    est.load_state_dict(state)
    assert est._rho_clip == 0.5


# ----------------------------------------------------------------------------- compile


@pytest.mark.parametrize("differentiable", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_compiles_without_graph_break(kind, differentiable):
    """Without a value network each module traces whole (``fullgraph=True``: no host sync,
    no data-dependent branch) and gives eager's results and gradients."""
    torch._dynamo.reset()
    dtype = torch.float32
    est = build(OURS[kind], dtype, estimator_args(kind, dtype, differentiable=differentiable))
    base = rollout((2,), T=8, dtype=dtype, seed=12, steps_to_next_obs=True)

    def run(fn):
        td = base.clone()
        td["next", "reward"] = td["next", "reward"].clone().requires_grad_(differentiable)
        advantage = fn(td)
        grad = torch.autograd.grad(advantage.sum(), td["next", "reward"])[0] if differentiable else None
        return advantage, grad

    expected, expected_grad = run(lambda td: est(td)["advantage"])
    out, grad = run(torch.compile(lambda td: est(td)["advantage"], fullgraph=True))
    assert out.requires_grad == differentiable
    assert_close(out, expected, kind)
    if differentiable:
        assert_close(grad, expected_grad, f"{kind} gradient")


@pytest.mark.parametrize("kind", ["gae", "vtrace"])
def test_torch_compile(kind):
    """The modules under ``torch.compile(fullgraph=False)`` on the CPU, with a value
    network (TorchRL's value-network call has graph breaks of its own)."""
    torch._dynamo.reset()
    dtype = torch.float32
    est = build(OURS[kind], dtype, estimator_args(kind, dtype, value_network=value_net(dtype)))
    td = consistent_rollout((2,), T=8, seed=13).float()
    expected = est(td.clone())
    compiled = torch.compile(est, fullgraph=False)
    out = compiled(td.clone())
    for key in ("advantage", "value_target"):
        assert_close(out[key], expected[key], f"{kind} {key}")


# ----------------------------------------------------------------------------- PPO on CartPole


@pytest.fixture(scope="module")
def cartpole():
    """Two short CartPole rollouts, ``[2, 48]``, truncated after 10 steps (and terminated
    where the pole falls), collected with a fixed random policy."""
    env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=10))
    torch.manual_seed(0)
    policy = ppo_networks()[0]
    runs = []
    for seed in (1, 2):
        env.set_seed(seed)
        with torch.no_grad():
            runs.append(env.rollout(48, policy=policy, break_when_any_done=False))
    env.close()
    data = torch.stack(runs, 0)
    assert data["next", "terminated"].any() and data["next", "truncated"].any()
    return data


def ppo_networks(seed=0):
    torch.manual_seed(seed)
    logits_net = MLP(in_features=4, out_features=2, num_cells=[16])
    logits = TensorDictModule(logits_net, in_keys=["observation"], out_keys=["logits"])
    policy = ProbabilisticActor(logits, in_keys=["logits"], distribution_class=OneHotCategorical, return_log_prob=True)
    critic = ValueOperator(MLP(in_features=4, out_features=1, num_cells=[16]), in_keys=["observation"])
    return policy, critic


def ppo_loss():
    policy, critic = ppo_networks(seed=3)
    return ClipPPOLoss(policy, critic, entropy_coeff=0.01)


def ppo_step(loss, data, reward_scale=None):
    """Loss values and parameter gradients of one PPO step; with ``reward_scale`` the
    rewards carry a gradient, so it flows through the estimator (differentiable=True)."""
    data = data.clone()
    if reward_scale is not None:
        data["next", "reward"] = data["next", "reward"] * reward_scale
    out = loss(data)
    total = sum(v for k, v in out.items() if k.startswith("loss_"))
    total.backward()
    grads = {name: p.grad.clone() for name, p in loss.named_parameters() if p.grad is not None}
    return out, grads


def assert_same_step(step_a, step_b):
    (out_a, grads_a), (out_b, grads_b) = step_a, step_b
    for key in ("loss_objective", "loss_critic", "loss_entropy"):
        assert_close(out_a[key], out_b[key], key)
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        assert_close(grads_a[name], grads_b[name], name)


def test_ppo_gae_instance(cartpole):
    """``loss.make_value_estimator(adapter.GAE(...))`` gives stock PPO's losses and
    gradients, the gradient through the rewards (differentiable=True) included."""
    stock_loss, our_loss = ppo_loss(), ppo_loss()
    stock_loss.make_value_estimator(ValueEstimators.GAE, gamma=0.98, lmbda=0.9)
    our_loss.make_value_estimator(
        adapter.GAE(gamma=0.98, lmbda=0.9, value_network=our_loss.critic_network, differentiable=True)
    )
    assert type(our_loss.value_estimator) is adapter.GAE and type(stock_loss.value_estimator) is stock.GAE
    assert_same_step(ppo_step(stock_loss, cartpole), ppo_step(our_loss, cartpole))
    scales = [torch.tensor(1.5, requires_grad=True) for _ in range(2)]
    assert_same_step(ppo_step(stock_loss, cartpole, scales[0]), ppo_step(our_loss, cartpole, scales[1]))
    assert scales[0].grad is not None and scales[0].grad != 0
    assert_close(scales[1].grad, scales[0].grad, "d loss / d reward scale")


@pytest.mark.parametrize("kind", KINDS)
def test_ppo_patch(cartpole, kind):
    """After ``patch()`` every loss builds rlscan's estimator (its default one and
    ``make_value_estimator(ValueEstimators.X)``), with stock results, in float64."""
    value_type = {"gae": ValueEstimators.GAE, "td_lambda": ValueEstimators.TDLambda,
                  "td1": ValueEstimators.TD1, "vtrace": ValueEstimators.VTrace}[kind]
    loops = {"vectorized": False} if kind in ("gae", "td_lambda") else {}
    stock_loss = ppo_loss()
    stock_loss.make_value_estimator(value_type, gamma=0.98, **loops)
    adapter.patch()
    try:
        assert adapter.is_patched()
        our_loss = ppo_loss()
        if kind == "gae":
            assert type(our_loss.value_estimator) is adapter.GAE  # the default estimator
        our_loss.make_value_estimator(value_type, gamma=0.98, **loops)
        assert type(our_loss.value_estimator) is OURS[kind]
    finally:
        adapter.unpatch()
    assert not adapter.is_patched() and type(ppo_loss().value_estimator) is stock.GAE
    # float64 throughout, the estimators' γ and λ buffers included
    data = cartpole.apply(lambda x: x.double() if x.is_floating_point() else x)
    stock_loss.double(), our_loss.double()
    scales = [torch.tensor(0.7, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    assert_same_step(ppo_step(stock_loss, data, scales[0]), ppo_step(our_loss, data, scales[1]))
    assert_close(scales[1].grad, scales[0].grad, "d loss / d reward scale")
