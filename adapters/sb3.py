"""Stable-Baselines3: rlscan's GAE inside SB3's on-policy rollout buffers.

One line turns it on for PPO, A2C and sb3-contrib's RecurrentPPO, MaskablePPO and TRPO::

    import rlscan.adapters.sb3 as rlscan_sb3
    model = rlscan_sb3.enable(PPO("MlpPolicy", env), exact=True)

The adapter changes one object (the contract of :mod:`rlscan.adapters`): ``enable(model)``,
``disable(model)``, ``is_enabled(model)``. It swaps the class of ``model.rollout_buffer``
for a subclass (made once per buffer class) whose ``compute_returns_and_advantage`` calls
:func:`rlscan.gae`; every ``isinstance`` check on the buffer still passes. The buffer
classes can also be given at construction: ``PPO(..., rollout_buffer_class=RLScanRolloutBuffer)``.
Which path :func:`rlscan.gae` takes is rlscan's choice: its CPU loop for SB3's host arrays
unless fast mode sends a large rollout to the GPU (:data:`GPU_MIN_ELEMENTS`).

SB3's loop and rlscan's flags say the same thing: SB3 cuts the trace after step ``t``
where ``episode_starts[t+1]`` is set (``dones`` after the last step), and never
bootstraps there, because ``collect_rollouts`` has already added
``γ · V(final observation)`` to the reward of each time-limit truncation. So::

    terminated[t] = episode_starts[t+1]      (t < T-1)
    terminated[T-1] = dones
    bootstrap_value = last_values

Older names, kept as aliases: ``enable_triton_gae``, ``disable_triton_gae``,
``triton_buffer_class``, ``TritonRolloutBuffer``, ``TritonDictRolloutBuffer`` and the
``Triton*`` sb3-contrib buffers. See docs/adapters/sb3.md.
"""
from __future__ import annotations

import importlib
from typing import Optional

import numpy as np
import torch

import rlscan

from ._common import check_bool

try:
    from stable_baselines3.common.buffers import DictRolloutBuffer, RolloutBuffer
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rlscan.adapters.sb3 needs stable-baselines3: pip install 'rlscan[sb3]'"
    ) from error

__all__ = [
    "enable",
    "disable",
    "is_enabled",
    "rlscan_buffer_class",
    "RLScanRolloutBuffer",
    "RLScanDictRolloutBuffer",
    "GPU_MIN_ELEMENTS",
    # older names of the above
    "enable_triton_gae",
    "disable_triton_gae",
    "triton_buffer_class",
    "TritonRolloutBuffer",
    "TritonDictRolloutBuffer",
]

#: Fast mode computes on the GPU when the model lives on a CUDA device and the rollout
#: holds at least this many ``n_steps × n_envs`` entries; smaller rollouts stay on the
#: CPU loop. SB3 keeps its rollout in host numpy arrays, so the GPU pays for copying it
#: over and the advantages back, which costs more than the CPU loop itself for rollouts of
#: every usual size: by default the GPU is never used. Lower it where your machine's
#: host-device copies are cheaper (docs/adapters/sb3.md has the measurements).
GPU_MIN_ELEMENTS = 1 << 62


def _compute_returns_and_advantage(buffer: RolloutBuffer, last_values: torch.Tensor, dones: np.ndarray) -> None:
    """SB3's GAE, computed by :func:`rlscan.gae`::

        δ_t = r_t + γ V_{t+1} (1 − terminated_t) − V_t
        Â_t = δ_t + γλ (1 − terminated_t) Â_{t+1}           (Â_T = 0)
        returns = Â + V

    with ``V_T = last_values``, ``terminated[t] = episode_starts[t+1]`` and
    ``terminated[T-1] = dones``. Fills ``buffer.advantages`` in place.
    """
    terminated = _terminated(buffer.episode_starts, dones)
    if _gpu_for(buffer) is None:
        # On the CPU: returns = Â + V in float32, as SB3. Without out= a repeat call skips the
        # checks its signature passed on the first call; with out= they run on every call, which
        # costs more than copying into the buffer's own advantages array (filled in place).
        advantages, returns = rlscan.gae(
            buffer.rewards, buffer.values, bootstrap_value=_host_values(last_values, buffer.values.dtype),
            terminated=terminated, gamma=buffer.gamma, lmbda=buffer.gae_lambda, exact=buffer.rlscan_exact,
        )
        buffer.advantages[...] = advantages
        buffer.returns = returns
        return
    buffer.advantages[...] = _advantages(buffer, last_values, terminated)
    buffer.returns = buffer.advantages + buffer.values


def _subclass(base: type, name: str) -> type:
    """``base`` with its GAE computed by rlscan.

    The subclass adds methods only (no storage), so an existing buffer of class
    ``base`` can be given it by ``buffer.__class__ = ...``.
    """

    class RLScanBuffer(base):
        _rlscan_base = base  # the SB3 class extended
        rlscan_exact = False  # exact mode (see enable)

        def __init__(self, *args, exact: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self.rlscan_exact = check_bool("exact", exact)

        def compute_returns_and_advantage(self, last_values: torch.Tensor, dones: np.ndarray) -> None:
            _compute_returns_and_advantage(self, last_values, dones)

    RLScanBuffer.__name__ = RLScanBuffer.__qualname__ = name
    RLScanBuffer.__doc__ = (
        f"{base.__qualname__} with rlscan's GAE: ``rollout_buffer_class={name}``, "
        "and ``rollout_buffer_kwargs={'exact': True}`` for exact mode."
    )
    RLScanBuffer.compute_returns_and_advantage.__doc__ = _compute_returns_and_advantage.__doc__
    return RLScanBuffer


def _is_rlscan(cls: type) -> bool:
    return getattr(cls, "_rlscan_base", None) is not None


RLScanRolloutBuffer = _subclass(RolloutBuffer, "RLScanRolloutBuffer")
RLScanDictRolloutBuffer = _subclass(DictRolloutBuffer, "RLScanDictRolloutBuffer")

_SUBCLASSES: dict = {RolloutBuffer: RLScanRolloutBuffer, DictRolloutBuffer: RLScanDictRolloutBuffer}

# sb3-contrib is optional: its buffers' subclasses are made when first named.
_CONTRIB_BASES = {
    "RLScanMaskableRolloutBuffer": ("sb3_contrib.common.maskable.buffers", "MaskableRolloutBuffer"),
    "RLScanMaskableDictRolloutBuffer": ("sb3_contrib.common.maskable.buffers", "MaskableDictRolloutBuffer"),
    "RLScanRecurrentRolloutBuffer": ("sb3_contrib.common.recurrent.buffers", "RecurrentRolloutBuffer"),
    "RLScanRecurrentDictRolloutBuffer": ("sb3_contrib.common.recurrent.buffers", "RecurrentDictRolloutBuffer"),
}
_OLD_PREFIX, _PREFIX = "Triton", "RLScan"  # the classes' older names: TritonRolloutBuffer, ...


def __getattr__(name: str):
    """``RLScanMaskableRolloutBuffer`` and the other sb3-contrib buffers, by name (or by
    their older ``Triton*`` names).

    Naming them here also lets pickle (and so ``model.save``) find them by reference, and a
    model saved under an older name load.
    """
    current = _PREFIX + name[len(_OLD_PREFIX):] if name.startswith(_OLD_PREFIX) else name
    if current not in _CONTRIB_BASES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, base = _CONTRIB_BASES[current]
    return rlscan_buffer_class(getattr(importlib.import_module(module), base))


def _check_base(base) -> None:
    if not (isinstance(base, type) and issubclass(base, RolloutBuffer)):
        raise TypeError(f"base must be a subclass of stable_baselines3's RolloutBuffer, got {base!r}")
    if base.compute_returns_and_advantage is not RolloutBuffer.compute_returns_and_advantage:
        raise TypeError(
            f"{base.__qualname__} overrides compute_returns_and_advantage; rlscan replaces SB3's own GAE "
            "only, and would discard that override"
        )


def rlscan_buffer_class(base: type) -> type:
    """The subclass of the rollout buffer class ``base`` whose GAE runs in rlscan,
    named ``RLScan<base's name>``.

    Made once per ``base`` and cached, so every buffer of one class gets the same
    subclass. Classes that already use rlscan's GAE are returned as they are.
    """
    if isinstance(base, type) and _is_rlscan(base):
        return base
    _check_base(base)
    if base not in _SUBCLASSES:
        _SUBCLASSES[base] = _subclass(base, f"{_PREFIX}{base.__name__}")
    return _SUBCLASSES[base]


# ----------------------------------------------------------------------------- the switch


def _rollout_buffer(model, caller: str) -> RolloutBuffer:
    """``model.rollout_buffer``, or a TypeError that says what was expected."""
    buffer = getattr(model, "rollout_buffer", None)
    if isinstance(buffer, RolloutBuffer):
        return buffer
    expected = (
        f"{caller} expects an on-policy Stable-Baselines3 model whose rollout_buffer is a RolloutBuffer "
        "(PPO, A2C, or sb3-contrib's RecurrentPPO, MaskablePPO, TRPO)"
    )
    if hasattr(model, "replay_buffer"):
        raise TypeError(
            f"{expected}; {type(model).__name__} is off-policy: it learns from a replay buffer and computes no GAE"
        )
    if buffer is None:
        raise TypeError(f"{expected}; got {type(model).__name__}, which has no rollout_buffer")
    raise TypeError(f"{expected}; got {type(model).__name__} whose rollout_buffer is {type(buffer).__name__}")


def enable(model, *, exact: bool = False):
    """Compute ``model``'s GAE with rlscan from now on; returns ``model``.

    Args:
        model: an on-policy SB3 model (PPO, A2C, RecurrentPPO, MaskablePPO, TRPO).
        exact: reproduce SB3's float32 loop bit for bit (on the CPU). When False
            (fast mode), a model on CUDA with at least ``GPU_MIN_ELEMENTS`` entries
            per rollout computes on the GPU, whose scan adds in another order
            (float32 rounding differences); otherwise the same CPU loop runs.
            ``rlscan.set_backend("cpu")`` or ``("triton")`` overrides the choice.

    Calling it again changes the mode. The switch lives on the buffer object:
    ``model.save`` does not store it, and a loaded model needs ``enable`` again (or was
    built with ``rollout_buffer_class=RLScanRolloutBuffer``, which is saved).
    """
    exact = check_bool("exact", exact)
    buffer = _rollout_buffer(model, "rlscan.adapters.sb3.enable")
    buffer.__class__ = rlscan_buffer_class(type(buffer))
    buffer.rlscan_exact = exact
    return model


def disable(model):
    """Give ``model`` back SB3's own GAE loop; returns ``model``. Without effect if it had it."""
    buffer = _rollout_buffer(model, "rlscan.adapters.sb3.disable")
    cls = type(buffer)
    if not _is_rlscan(cls):
        return model
    if _SUBCLASSES.get(cls._rlscan_base) is not cls:
        raise TypeError(
            f"the rollout buffer's class {cls.__qualname__} extends rlscan's "
            f"{_SUBCLASSES[cls._rlscan_base].__qualname__}; "
            "disable can only undo rlscan's own buffer classes"
        )
    buffer.__class__ = cls._rlscan_base
    buffer.__dict__.pop("rlscan_exact", None)
    return model


def is_enabled(model) -> bool:
    """Whether rlscan computes ``model``'s GAE now: its rollout buffer's class is one of
    rlscan's (or a subclass of one). False for anything without a rollout buffer."""
    buffer = getattr(model, "rollout_buffer", None)
    return isinstance(buffer, RolloutBuffer) and _is_rlscan(type(buffer))


# the older names
enable_triton_gae = enable
disable_triton_gae = disable
triton_buffer_class = rlscan_buffer_class
TritonRolloutBuffer = RLScanRolloutBuffer
TritonDictRolloutBuffer = RLScanDictRolloutBuffer


# ----------------------------------------------------------------------------- the computation


def _terminated(episode_starts: np.ndarray, dones: np.ndarray) -> np.ndarray:
    """``terminated[t] = episode_starts[t+1]`` for ``t < T-1`` and ``dones`` for ``t = T-1``."""
    terminated = np.empty(episode_starts.shape, dtype=np.bool_)
    np.not_equal(episode_starts[1:], 0, out=terminated[:-1])
    np.not_equal(np.asarray(dones).reshape(-1), 0, out=terminated[-1])
    return terminated


def _host_values(last_values, dtype: np.dtype) -> np.ndarray:
    """``last_values`` (a tensor of ``n_envs`` values, any shape) as a flat numpy array of ``dtype``."""
    if type(last_values) is torch.Tensor and last_values.is_cpu and not last_values.requires_grad:
        values = last_values.numpy().reshape(-1)
    else:
        values = torch.as_tensor(last_values).detach().reshape(-1).cpu().numpy()
    return values if values.dtype == dtype else values.astype(dtype)


def _gpu_for(buffer: RolloutBuffer) -> Optional[torch.device]:
    """The CUDA device to compute on, or None to compute where the buffer is.

    rlscan's backend decides first ("cpu" never, "triton" always); under "auto",
    fast mode moves rollouts of at least ``GPU_MIN_ELEMENTS`` entries.
    """
    device = buffer.device if type(buffer.device) is torch.device else torch.device(buffer.device)
    backend = rlscan.get_backend()
    if device.type != "cuda" or backend == "cpu":
        return None
    if backend == "triton":
        return device
    if buffer.rlscan_exact or buffer.advantages.size < GPU_MIN_ELEMENTS:
        return None
    return device


def _advantages(buffer: RolloutBuffer, last_values, terminated: np.ndarray):
    """``Â`` as a numpy array of the buffer's ``(n_steps, n_envs)`` shape."""
    device = _gpu_for(buffer)
    last_values = torch.as_tensor(last_values).detach().reshape(-1)
    if device is None:
        rewards, values = buffer.rewards, buffer.values
        bootstrap = _host_values(last_values, values.dtype)
    else:
        rewards, values, terminated = (
            torch.from_numpy(array).to(device) for array in (buffer.rewards, buffer.values, terminated)
        )
        bootstrap = last_values.to(device, values.dtype)
    advantages = rlscan.gae(
        rewards, values, bootstrap_value=bootstrap, terminated=terminated,
        gamma=buffer.gamma, lmbda=buffer.gae_lambda, exact=buffer.rlscan_exact,
    ).advantages
    return advantages if device is None else advantages.cpu().numpy()
