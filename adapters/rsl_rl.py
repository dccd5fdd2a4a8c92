"""rsl_rl (Isaac Lab's PPO): rlscan's GAE inside ``rsl_rl.algorithms.PPO``.

One line after the runner is built turns it on::

    import rlscan.adapters.rsl_rl as rlscan_rsl_rl
    rlscan_rsl_rl.enable(runner.alg)

The adapter changes one object (the contract of :mod:`rlscan.adapters`): ``enable(alg)``,
``disable(alg)``, ``is_enabled(alg)``. From then on ``alg.compute_returns(obs)`` computes
GAE with :func:`rlscan.gae` on the storage's device (a fused Triton scan on the GPU, the
compiled loop on the CPU) instead of rsl_rl's Python loop over time. Everything around
the loop is rsl_rl's, in its order: the critic evaluated on ``obs`` for the bootstrap with
its recurrent hidden state saved and restored, ``advantages = returns − values``, and the
normalisation of the advantages over the whole rollout unless
``normalize_advantage_per_mini_batch``.

rsl_rl's storage and rlscan's flags say the same thing: ``dones[t]`` ends the episode
after step ``t``, and the loop never bootstraps there, because ``process_env_step`` has
already added ``γ · V(s_t)`` to the reward of each time-out. So::

    terminated      = storage.dones                       ([T, N, 1], uint8)
    bootstrap_value = critic(obs)                         ([N, 1])
    gamma, lmbda    = alg.gamma, alg.lam, rounded as rsl_rl rounds them (to float32)

Older names, kept as aliases: ``enable_triton_gae`` and ``disable_triton_gae``. See
docs/adapters/rsl_rl.md.
"""
from __future__ import annotations

import types

import torch

from ._common import check_bool, kind
from ._rsl_rl_gae import returns_and_advantages

try:
    from rsl_rl.algorithms import PPO
    from rsl_rl.storage import RolloutStorage
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("rlscan.adapters.rsl_rl needs rsl_rl: pip install 'rlscan[rsl_rl]'") from error

__all__ = ["enable", "disable", "is_enabled", "enable_triton_gae", "disable_triton_gae"]

_FLOATS = (torch.float32, torch.float64)


def _compute_returns(alg: PPO, obs) -> None:
    """rsl_rl's ``PPO.compute_returns``, its loop over time computed by :func:`rlscan.gae`::

        δ_t = r_t + γ (1 − done_t) V_{t+1} − V_t          (V_T = critic(obs))
        Â_t = δ_t + γλ (1 − done_t) Â_{t+1}               (Â_T = 0)
        returns = Â + V,  advantages = returns − V        (then normalised)
    """
    st = alg.storage
    # The bootstrap must not disturb a recurrent critic's state for the next rollout.
    hidden_state = alg.critic.get_hidden_state()
    last_values = alg.critic(obs).detach()
    alg.critic.reset(hidden_state=hidden_state)
    st.returns, st.advantages = returns_and_advantages(
        st.rewards, st.values, st.dones, last_values, alg.gamma, alg.lam,
        exact=alg.rlscan_exact, normalize=not alg.normalize_advantage_per_mini_batch,
    )


def _check_ppo(alg, caller: str) -> PPO:
    if isinstance(alg, PPO):
        return alg
    hint = ""
    if isinstance(getattr(alg, "alg", None), PPO):
        hint = f": pass the runner's algorithm, {caller}(runner.alg)"
    raise TypeError(f"{caller}: alg must be an rsl_rl.algorithms.PPO, got {kind(alg)}{hint}")


def is_enabled(alg) -> bool:
    """Whether ``alg.compute_returns`` is rlscan's. False for anything else."""
    method = getattr(alg, "__dict__", {}).get("compute_returns")
    return getattr(method, "__func__", None) is _compute_returns


def enable(alg, exact: bool = False):
    """Compute ``alg``'s returns and advantages with rlscan from now on; returns ``alg``.

    Args:
        alg: an rsl_rl ``PPO`` (``OnPolicyRunner(...).alg``).
        exact: reproduce rsl_rl's loop bit for bit: one step at a time in the loop's
            order, on the GPU too (rlscan's sequential exact kernel). When False (fast
            mode), the GPU scan adds in another order and the returns agree with rsl_rl's
            to float32 rounding. On the CPU both modes run the same exact loop.

    Calling it again changes the mode. The switch lives on the object: ``alg.save()``
    stores only the models and optimiser, so a new runner needs the line again.
    """
    exact = check_bool("exact", exact)
    alg = _check_ppo(alg, "rlscan.adapters.rsl_rl.enable")
    if type(alg).compute_returns is not PPO.compute_returns:
        raise TypeError(
            f"{type(alg).__qualname__} overrides compute_returns; rlscan replaces rsl_rl's own GAE "
            "only, and would discard that override"
        )
    if "compute_returns" in vars(alg) and not is_enabled(alg):
        raise TypeError("alg.compute_returns has been replaced by something other than rlscan; not replacing it")
    st = getattr(alg, "storage", None)
    if not isinstance(st, RolloutStorage) or st.training_type != "rl":
        raise TypeError(
            "rlscan.adapters.rsl_rl.enable expects alg.storage to be rsl_rl's RolloutStorage for training_type 'rl'"
        )
    if not hasattr(alg, "critic") or not hasattr(alg.critic, "get_hidden_state"):
        raise TypeError(
            "rlscan.adapters.rsl_rl is written for rsl-rl-lib 5.x, whose PPO has a critic model with "
            "get_hidden_state(); this PPO has none (an older rsl_rl?)"
        )
    for name in ("rewards", "values", "returns"):
        if getattr(st, name).dtype not in _FLOATS:
            raise TypeError(f"storage.{name} must be float32 or float64, got {getattr(st, name).dtype}")
    alg.rlscan_exact = exact
    alg.compute_returns = types.MethodType(_compute_returns, alg)
    return alg


def disable(alg):
    """Give ``alg`` back rsl_rl's own loop; returns ``alg``. Without effect if it had it."""
    alg = _check_ppo(alg, "rlscan.adapters.rsl_rl.disable")
    if is_enabled(alg):
        del alg.compute_returns
        del alg.rlscan_exact
    return alg


# the older names
enable_triton_gae = enable
disable_triton_gae = disable
