"""``rlscan bench``: every op timed against what a user would otherwise run.

Method
------
*What is timed.* For each op and each shape (``N`` environments × ``T`` steps, inputs
``[T, N]``, terminations with probability 1% per step as bool flags, a bootstrap value
after the window), rlscan's call and the alternatives a user would pick:

* ``loop_torch``: a Python loop over time with torch ops on the device, the CleanRL /
  Stable-Baselines3 pattern (:mod:`rlscan.bench.loops`);
* ``loop_numpy``: the same loop with numpy on the CPU;
* ``compile``: ``torch.compile`` of a vectorised log-depth doubling scan
  (Hillis–Steele on the ``(α, β)`` pairs; :mod:`rlscan.bench.doubling`), the
  baseline of earlier Triton work; GPU only;
* ``torchrl_loop`` / ``torchrl_vec``: TorchRL's functional GAE and TD(λ), loop and
  vectorised, when torchrl is installed; ``sb3``: Stable-Baselines3's
  ``RolloutBuffer.compute_returns_and_advantage`` for GAE, when it is installed
  (both through :mod:`rlscan.bench.baselines`, which imports them only when called);
* ``exact``: rlscan's ``exact=True`` on CUDA, a sequential-in-time kernel with one
  thread per environment (the PufferLib pattern).

Without a GPU the run says so at the top and times rlscan's CPU path (the compiled
numba loop) against the numpy and torch loops (and TorchRL, SB3) on the CPU.

*Checked before timed.* Every implementation's first call is compared with the truth:
the float64 reference loop (``rlscan.reference``) for ``T·N ≤ 2·10⁶`` and ``T ≤ 16384``,
otherwise rlscan's sequential ``exact=True`` evaluation in float64. A result whose
relative L2 error exceeds the dtype's tolerance (float32: 1e-4) is reported WRONG and
never timed; each cell records the check used and the error.

*Two clocks.* The full-call time is what a training loop pays: the wall clock of
back-to-back calls with one synchronize after the last, divided by the number of
calls (median of ``--repeat`` rounds). The device time is the GPU's own: ``n`` calls
captured in a CUDA graph, replayed and timed with CUDA events, divided by ``n``; where
capture fails, CUDA events around eager calls, and the JSON says which.

*Long calls.* A sequential alternative first runs on a prefix of the window; when the
extrapolated call exceeds the cap (``--cap``, 2 s by default) the cell shows
``skip ~X s`` with the estimate. A checked call that already took about a quarter of a
second (``long_call_s`` in the JSON's settings) is itself the measurement. The default
grid runs the Python loops only at a few ``N`` and ``torch.compile`` only at a few
``T`` (``--all-cells`` runs everything), and ``torch.compile`` has a per-op budget of
compile seconds (``--compile-budget``).

*Floors, measured in the same run.* The launch floor is the full-call time of an empty
Triton kernel; the bandwidth floor is the bytes the op must move (each input read
once, each output written once, bool flags one byte) over the device-to-device copy
bandwidth (the faster of a Triton copy kernel and ``Tensor.copy_`` over ~1 GB). Each
time is also reported as a ratio to ``max(launch floor, bandwidth floor)``.

*End to end* (``--e2e``): the share of a PPO update spent on credit assignment and
the whole-update speedup, for a synthetic PPO update (64×64 and 1024×1024 MLPs at
4096 envs × 128 steps on a GPU) and Stable-Baselines3's default PPO on the CPU.

*Output.* A table printed as the run goes (rich when importable), a summary of
speedups per op and alternative, ``bench.json`` (every number, the device, versions,
date, settings and method) and ``bench.png`` (rlscan's speedup against ``T``, one line
per ``N``: against the Python loop, and against ``torch.compile`` on a GPU or the torch
loop on a CPU) in ``--out``.
"""
from .runner import Options, run

__all__ = ["Options", "run"]
