"""Identities between the ops (docs/semantics.md), on both paths: each op is checked
against another op's output rather than against its own reference."""
import pytest
import torch

import rlscan
from rlscan_testing import FORWARD_OPS, VALUE_OPS, assert_close, make_problem

F64 = torch.float64


def _inputs(device, T=12, N=3, seed=0, **flags):
    p = make_problem("gae", (T, N), dtype=F64, seed=seed, device=device, **flags)
    rewards, values = p.args
    return rewards, values, p.kwargs


def test_gae_lambda_one_is_return_minus_value(path):
    """λ = 1 without next_values: Â_t = G_t − V_t, G the discounted return with bootstrap."""
    r, v, kw = _inputs(path.device)
    adv = rlscan.gae(r, v, bootstrap_value=kw["bootstrap_value"], terminated=kw["terminated"], gamma=0.97,
                     lmbda=1.0).advantages
    ret = rlscan.discounted_returns(r, bootstrap_value=kw["bootstrap_value"], terminated=kw["terminated"],
                                    gamma=0.97)
    assert_close(adv, ret - v, F64)


def test_gae_lambda_zero_is_td_error(path):
    """λ = 0: Â_t = δ_t = r_t + γ ν_t V'_t − V_t."""
    r, v, kw = _inputs(path.device)
    term = kw["terminated"]
    adv = rlscan.gae(r, v, bootstrap_value=kw["bootstrap_value"], terminated=term, gamma=0.9, lmbda=0.0)
    v_next = torch.cat([v[1:], kw["bootstrap_value"][None]])
    nu = (~term).to(F64)
    assert_close(adv.advantages, r + 0.9 * nu * v_next - v, F64)


@pytest.mark.parametrize("values", ["bootstrap", "next"])
def test_td_lambda_one_is_discounted_return(path, values):
    """TD(λ = 1) is the Monte Carlo return, bootstrapped at truncations and the window's edge."""
    p = make_problem("td_lambda", (12, 3), dtype=F64, values=values, truncated="random" if values == "next" else None,
                     lmbda=1.0, device=path.device)
    kw = {k: v for k, v in p.kwargs.items() if k != "lmbda"}
    assert_close(p.run()[0], rlscan.discounted_returns(p.args[0], **kw), F64)


def test_td_lambda_is_gae_plus_value(path):
    """Without next_values, G^λ_t = Â_t + V_t, for any γ and λ (tensors too)."""
    p = make_problem("gae", (12, 3), dtype=F64, gamma="tensor", lmbda="tensor", device=path.device)
    adv, returns = p.run()
    assert_close(rlscan.td_lambda(*p.args, **p.kwargs), adv + p.args[1], F64)
    assert_close(returns, adv + p.args[1], F64)


@pytest.mark.parametrize("values", ["bootstrap", "next"])
def test_vtrace_on_policy_is_td_lambda_one(path, values):
    """log ρ = 0, clips ≥ 1, λ = 1: vs is the TD(λ = 1) return and pg the one-step advantage
    r_t + γ ν_t v̂_t − V_t with v̂_t = vs_{t+1} inside an episode, V'_t where it is cut.
    (With next_values the identity needs them consistent: V'_t = V_{t+1} inside episodes.)"""
    p = make_problem("vtrace", (12, 3), dtype=F64, values=values, lmbda=1.0, clips=(1.0, 2.0, 1.0),
                     truncated="random" if values == "next" else None, device=path.device)
    r, v, log_rhos = p.args
    term = p.kwargs["terminated"]
    done = term | (p.kwargs["truncated"] if p.kwargs.get("truncated") is not None else False)
    inside = ~done
    inside[-1] = False
    if values == "next":  # consistent values: V'_t = V_{t+1} inside an episode
        p.kwargs["next_values"][:-1][inside[:-1]] = v[1:][inside[:-1]]
    p = p.replace(log_rhos=torch.zeros_like(log_rhos))
    vs, pg = p.run()
    td_kw = {k: x for k, x in p.kwargs.items() if k not in ("rho_clip", "c_clip", "pg_rho_clip")}
    assert_close(vs, rlscan.td_lambda(r, v, **td_kw), F64)

    v_after = p.kwargs["next_values"] if values == "next" else torch.cat([v[1:], p.kwargs["bootstrap_value"][None]])
    v_hat = torch.where(inside, torch.cat([vs[1:], vs[-1:]]), v_after)
    assert_close(pg, r + p.kwargs["gamma"] * (~term).to(F64) * v_hat - v, F64)


@pytest.mark.parametrize("op", VALUE_OPS)
@pytest.mark.parametrize("cut", ["terminated", "truncated"])
def test_split_at_episode_end_reverse(path, op, cut):
    """Splitting the window after an episode end gives the same as computing both halves
    apart: the first half needs nothing from the second (after a termination its
    bootstrap is ignored; after a truncation it comes from next_values)."""
    T, k = 12, 5
    values = "next" if cut == "truncated" else "bootstrap"
    p = make_problem(op, (T, 3), dtype=F64, values=values, terminated="random", device=path.device, seed=31,
                     truncated="random" if cut == "truncated" else None)
    p.kwargs[cut][k - 1] = True
    first = _window(p, 0, k, bootstrap=torch.full_like(p.args[0][0], 123.0))
    second = _window(p, k, T, bootstrap=p.kwargs.get("bootstrap_value"))
    for whole, a, b in zip(p.run(), first.run(), second.run()):
        assert_close(whole, torch.cat([a, b]), F64)


@pytest.mark.parametrize("op", FORWARD_OPS)
def test_split_at_episode_end_forward(path, op):
    """The forward ops restart after a done: the second half with ``initial = 0`` (the
    linear scan: after β = 0) matches the whole window."""
    T, k = 12, 5
    p = make_problem(op, (T, 3), dtype=F64, device=path.device, seed=32)
    if op == "linear_scan":
        p.kwargs["beta"][k] = 0.0
    else:
        p.kwargs["dones"][k - 1] = True
    first = _window(p, 0, k)
    second = _window(p, k, T, initial=torch.zeros_like(p.args[0][0]))
    for whole, a, b in zip(p.run(), first.run(), second.run()):
        assert_close(whole, torch.cat([a, b]), F64)


def _window(p, start, stop, bootstrap=None, initial=None):
    """Steps ``start:stop`` of a time-first problem, with a new bootstrap or initial state."""
    cut = lambda x: x[start:stop] if isinstance(x, torch.Tensor) and x.dim() == p.args[0].dim() else x  # noqa: E731
    kwargs = {k: cut(x) for k, x in p.kwargs.items()}
    if "bootstrap_value" in kwargs:
        kwargs["bootstrap_value"] = bootstrap
    if "initial" in kwargs:
        kwargs["initial"] = initial if initial is not None else kwargs["initial"]
    return type(p)(p.op, tuple(cut(a) for a in p.args), kwargs)


def test_eligibility_traces_are_the_adjoint(path):
    """Σ_t e_t y_t = Σ_t x_t G_t, with e the forward trace of x and G = linear_scan(y, b,
    reverse=True), b_t = γ_t λ_t (1 − dones_t)."""
    p = make_problem("eligibility_traces", (12, 3), dtype=F64, gamma="tensor", lmbda="tensor", initial=False,
                     device=path.device)
    x = p.args[0]
    y = torch.randn_like(x)
    gamma, lmbda, dones = p.kwargs["gamma"], p.kwargs["lmbda"], p.kwargs["dones"]
    e = p.run()[0]
    G = rlscan.linear_scan(y, gamma * lmbda * (~dones).to(F64), reverse=True)
    assert_close((e * y).sum(0), (x * G).sum(0), F64)


def test_episodic_cumsum_counts_and_sums_episodes(path):
    """With x = 1 the sum at a done step is the episode's length; with x = r, its return."""
    dones = torch.tensor([0, 1, 0, 0, 1, 1, 0], dtype=torch.bool, device=path.device)[:, None]
    ones = torch.ones(7, 1, dtype=F64, device=path.device)
    lengths = rlscan.episodic_cumsum(ones, dones=dones)
    assert lengths[dones].tolist() == [2.0, 3.0, 1.0]
    r = torch.arange(1.0, 8.0, dtype=F64, device=path.device)[:, None]
    assert rlscan.episodic_cumsum(r, dones=dones)[dones].tolist() == [3.0, 12.0, 6.0]


def test_retrace_on_policy_greedy_is_td_lambda(path):
    """With c̄ ≥ 1, log ρ = 0 and q_t = E_t (a deterministic target policy), Retrace is TD(λ) on E."""
    p = make_problem("retrace", (12, 3), dtype=F64, values="bootstrap", device=path.device, seed=33)
    r, q, e, log_rhos = p.args
    kw = {k: x for k, x in p.kwargs.items() if k != "c_clip"}
    q_ret, adv = rlscan.retrace(r, e, e, torch.zeros_like(log_rhos), **kw, c_clip=1.0)
    assert_close(q_ret, rlscan.td_lambda(r, e, **kw), F64)
    assert_close(adv, q_ret - e, F64)


def test_ops_are_linear_scans(path):
    """Every value op is linear in the rewards: op(r1 + r2) − op(r2) = op(r1) − op(0)."""
    for op in ("gae", "td_lambda", "discounted_returns"):
        p = make_problem(op, (10, 2), dtype=F64, device=path.device, seed=34)
        r1 = p.args[0]
        r2 = torch.randn_like(r1)
        f = lambda r: p.replace(rewards=r).run()[0]  # noqa: E731
        assert_close(f(r1 + r2) - f(r2), f(r1) - f(torch.zeros_like(r1)), F64)
