"""rsl_rl's ``PPO.compute_returns`` against rlscan's adapter, on a CUDA machine.

Isaac Lab trains 4096 environments x 24 steps (and longer windows); this times the part
of ``compute_returns`` after the critic's bootstrap call (the same on both sides): rsl_rl
5.5's Python loop over time, its ``returns − values`` and its normalisation of the
advantages, against ``rlscan.adapters._rsl_rl_gae.returns_and_advantages`` (the adapter's
own computation, exact and fast modes) and ``rlscan.gae`` alone.

Where rsl_rl is installed, the loop timed is rsl_rl's ``PPO.compute_returns`` itself and the
adapter's is ``rlscan.adapters.rsl_rl``'s, both called on a storage-like object whose
critic returns fixed values; otherwise a copy of rsl_rl 5.5's loop written here (the
same torch operations in the same order) stands in, and is checked against rsl_rl when
it can be. Before timing: exact mode must equal the loop bit for bit, fast mode within
1e-5, and the loop must agree with rlscan's float64 reference within 1e-4.

Two timings per variant, measured side by side in one run: wall clock per call of
back-to-back calls with one synchronize (what a training step pays, host time included),
and device time (the summed durations of the kernels one call runs, from the profiler).
Prints a table last.

    python scripts/h200_rsl_rl.py [T ...]        (default: 24 96; N = 4096)
"""
from __future__ import annotations

import sys
import types

import torch

import rlscan
import rlscan.reference
from rlscan.adapters._rsl_rl_gae import returns_and_advantages

from h200_checks import kernel_time, wall_time  # noqa: E402 - this folder is on sys.path

N = 4096
GAMMA, LAM = 0.99, 0.95  # Isaac Lab's defaults

try:
    from rsl_rl.algorithms import PPO

    from rlscan.adapters import rsl_rl as adapter

    HAVE_RSL_RL = True
except ImportError:
    HAVE_RSL_RL = False


def rsl_rl_loop(rewards, values, dones, last_values, gamma, lam, normalize=True):
    """rsl_rl 5.5's recurrence after the critic call, operation for operation."""
    T = rewards.shape[0]
    returns = torch.empty_like(values)
    advantage = 0
    for step in reversed(range(T)):
        next_values = last_values if step == T - 1 else values[step + 1]
        not_terminal = 1.0 - dones[step].float()
        delta = rewards[step] + not_terminal * gamma * next_values - values[step]
        advantage = delta + not_terminal * gamma * lam * advantage
        returns[step] = advantage + values[step]
    advantages = returns - values
    if normalize:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return returns, advantages


class _Critic:
    """Returns fixed bootstrap values; keeps rsl_rl's hidden-state calls working."""

    def __init__(self, last_values):
        self.last_values = last_values

    def __call__(self, obs):
        return self.last_values

    def get_hidden_state(self):
        return None

    def reset(self, dones=None, hidden_state=None):
        pass


def fake_alg(d, exact=False):
    """What ``PPO.compute_returns`` reads of ``self``, around the rollout ``d``."""
    T = d["rewards"].shape[0]
    storage = types.SimpleNamespace(
        num_transitions_per_env=T, rewards=d["rewards"], values=d["values"], dones=d["dones"],
        returns=torch.empty_like(d["values"]), advantages=torch.empty_like(d["values"]),
    )
    return types.SimpleNamespace(storage=storage, critic=_Critic(d["last_values"]), gamma=GAMMA, lam=LAM,
                                 normalize_advantage_per_mini_batch=False, rlscan_exact=exact)


def rollout(T, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    randn = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    dones = (torch.rand(T, N, 1, device="cuda", generator=g) < 1 / 200).to(torch.uint8)
    return dict(rewards=randn(T, N, 1), values=randn(T, N, 1), dones=dones, last_values=randn(N, 1))


def variants(d):
    args = (d["rewards"], d["values"], d["dones"], d["last_values"], GAMMA, LAM)
    out = {"loop (copy of rsl_rl's)": lambda: rsl_rl_loop(*args)}
    if HAVE_RSL_RL:
        stock, ours_exact, ours_fast = fake_alg(d), fake_alg(d, True), fake_alg(d, False)

        def run(alg, fn):
            fn(alg, None)
            return alg.storage.returns, alg.storage.advantages

        out["rsl_rl PPO.compute_returns"] = lambda: run(stock, PPO.compute_returns)
        out["adapter exact (rsl_rl module)"] = lambda: run(ours_exact, adapter._compute_returns)
        out["adapter fast (rsl_rl module)"] = lambda: run(ours_fast, adapter._compute_returns)
    out["rlscan exact"] = lambda: returns_and_advantages(*args, exact=True, normalize=True)
    out["rlscan fast"] = lambda: returns_and_advantages(*args, exact=False, normalize=True)
    out["rlscan.gae alone (fast)"] = lambda: rlscan.gae(
        d["rewards"], d["values"], bootstrap_value=d["last_values"], terminated=d["dones"], gamma=GAMMA, lmbda=LAM)
    out["normalisation alone"] = lambda: (lambda a: (a - a.mean()) / (a.std() + 1e-8))(d["returns_minus_values"])
    return out


def check(T, d, rows):
    """Correctness before timing; appends (what, ok, detail) rows."""
    loop_ret, loop_adv = rsl_rl_loop(d["rewards"], d["values"], d["dones"], d["last_values"], GAMMA, LAM)
    ref = rlscan.reference.gae(*(x.double().cpu() for x in (d["rewards"], d["values"])),
                               bootstrap_value=d["last_values"].double().cpu(), terminated=d["dones"].cpu(),
                               gamma=GAMMA, lmbda=LAM).returns
    err = ((loop_ret.double().cpu() - ref).abs().max() / ref.abs().max()).item()
    rows.append((f"T={T} loop vs float64 reference", err <= 1e-4, f"rel {err:.2e}"))
    candidates = {"rlscan exact": returns_and_advantages(*_args(d), exact=True, normalize=True),
                  "rlscan fast": returns_and_advantages(*_args(d), exact=False, normalize=True)}
    if HAVE_RSL_RL:
        stock = fake_alg(d)
        PPO.compute_returns(stock, None)
        same = torch.equal(stock.storage.returns, loop_ret) and torch.equal(stock.storage.advantages, loop_adv)
        rows.append((f"T={T} copied loop == rsl_rl's", same, "bit for bit" if same else "DIFFERS"))
        for exact in (True, False):
            alg = fake_alg(d, exact)
            adapter._compute_returns(alg, None)
            candidates[f"adapter {'exact' if exact else 'fast'}"] = (alg.storage.returns, alg.storage.advantages)
    for name, (ret, adv) in candidates.items():
        if "exact" in name:
            ok = torch.equal(ret, loop_ret) and torch.equal(adv, loop_adv)
            detail = "bit for bit" if ok else f"max diff {(ret - loop_ret).abs().max().item():.2e}"
        else:
            diff = max((ret - loop_ret).abs().max().item(), (adv - loop_adv).abs().max().item())
            ok, detail = diff <= 1e-5, f"max diff {diff:.2e}"
        rows.append((f"T={T} {name} vs loop", ok, detail))
    d["returns_minus_values"] = loop_ret - d["values"]


def _args(d):
    return d["rewards"], d["values"], d["dones"], d["last_values"], GAMMA, LAM


def main():
    Ts = [int(a) for a in sys.argv[1:]] or [24, 96]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, rsl_rl installed: {HAVE_RSL_RL}")
    checks, table = [], []
    for T in Ts:
        d = rollout(T)
        check(T, d, checks)
        timed = variants(d)
        base = "rsl_rl PPO.compute_returns" if HAVE_RSL_RL else "loop (copy of rsl_rl's)"
        walls = {name: wall_time(fn, n=50) for name, fn in timed.items()}
        kernels = {name: kernel_time(fn) for name, fn in timed.items()}
        for name in timed:
            table.append((f"{T} x {N}", name, walls[name], kernels[name],
                          walls[base] / walls[name], kernels[base] / kernels[name]))
    print()
    for what, ok, detail in checks:
        print(f"{'ok ' if ok else 'BAD'} {what:48s} {detail}")
    print()
    print(f"{'T x N':>10} {'variant':32s} {'wall us':>9} {'device us':>10} {'wall x':>7} {'device x':>9}")
    for shape, name, wall, kernel, wx, kx in table:
        print(f"{shape:>10} {name:32s} {wall:9.1f} {kernel:10.1f} {wx:7.2f} {kx:9.2f}")
    print("(x: the loop's time over the variant's; the loop is rsl_rl's own where it is installed)")
    if not all(ok for _, ok, _ in checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
