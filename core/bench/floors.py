"""Floors measured in the same run: no call can beat them.

* launch floor: on a GPU, the full-call time of an empty Triton kernel, launched both
  through Triton's own path and through rlscan's direct launch; the faster counts. On
  the CPU, the call of an empty numba function.
* copy bandwidth: the device-to-device copy rate, ``2 × bytes / time``, of a plain
  Triton copy kernel and of ``Tensor.copy_`` over ~1 GB (the faster counts); on the
  CPU, ``Tensor.copy_`` over 256 MB.

An op's floor is ``max(launch floor, moved bytes / copy bandwidth)``, where the moved
bytes count each input read once and each output written once.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from . import timing


class Floors(NamedTuple):
    launch_s: Optional[float]
    bandwidth: float  # bytes per second
    detail: dict

    def of(self, nbytes: int) -> float:
        """The floor of a call that moves ``nbytes``."""
        return max(self.launch_s or 0.0, nbytes / self.bandwidth)


def measure(device: torch.device, quick: bool) -> Floors:
    if device.type == "cuda":
        return _cuda(device, quick)
    return _cpu(quick)


def _cpu(quick: bool) -> Floors:
    n = (64 if quick else 256) * 2**20 // 4
    src = torch.rand(n)
    dst = torch.empty_like(src)
    copy = lambda: dst.copy_(src)  # noqa: E731
    sync = timing.synchronizer(torch.device("cpu"))
    _, once = timing.timed_once(copy, sync)
    t = timing.full_call(copy, sync, one_call_s=once, target_s=0.05, repeat=5)
    bandwidth = 2 * src.numel() * 4 / t.seconds
    launch = _numba_call_floor()
    detail = {"copy_bytes": src.numel() * 4, "torch_copy_GBps": bandwidth / 1e9,
              "launch": "the call of an empty numba function on one array (the CPU path's floor)",
              "numba_call_us": None if launch is None else launch * 1e6}
    return Floors(launch, bandwidth, detail)


def _numba_call_floor():
    """Seconds per call of an empty compiled numba function that takes one array."""
    try:
        from numba import njit
    except ImportError:
        return None
    import numpy as np

    @njit
    def empty(x):
        pass

    x = np.zeros(1)
    empty(x)
    sync = timing.synchronizer(torch.device("cpu"))
    _, once = timing.timed_once(lambda: empty(x), sync)
    return timing.full_call(lambda: empty(x), sync, one_call_s=once, target_s=0.01, repeat=5).seconds


def _cuda(device: torch.device, quick: bool) -> Floors:
    from . import kernels

    launch, launch_detail = _launch_floor(device, kernels.empty_kernel)
    bandwidth, bw_detail = _copy_bandwidth(device, kernels.copy_kernel, (256 if quick else 1024) * 2**20)
    return Floors(launch, bandwidth, {**launch_detail, **bw_detail})


def _launch_floor(device: torch.device, empty_kernel):
    x = torch.empty(1, device=device)
    sync = timing.synchronizer(device)
    ways = {"triton_launch_us": lambda: empty_kernel[(1,)](x)}
    direct = _direct_launch(empty_kernel, x)
    if direct is not None:
        ways["direct_launch_us"] = direct
    detail = {}
    for name, fn in ways.items():
        for _ in range(50):
            fn()
        _, once = timing.timed_once(fn, sync)
        detail[name] = timing.full_call(fn, sync, one_call_s=once, target_s=0.02, repeat=7).seconds * 1e6
    return min(detail.values()) * 1e-6, detail


def _copy_bandwidth(device: torch.device, copy_kernel, nbytes: int):
    src = torch.rand(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    n = src.numel()
    block = 4096
    grid = ((n + block - 1) // block,)
    ways = {
        "torch_copy_GBps": lambda: dst.copy_(src),
        "triton_copy_GBps": lambda: copy_kernel[grid](src, dst, n, BLOCK=block),
    }
    for _ in range(100):  # let the clocks rise before measuring
        dst.copy_(src)
    detail = {"copy_bytes": nbytes}
    for name, fn in ways.items():
        fn()
        _, once = timing.timed_once(fn, timing.synchronizer(device))
        t = timing.device_time(fn, one_call_s=once, target_s=0.05, repeat=5)
        detail[name] = 2 * nbytes / t.seconds / 1e9
    del src, dst
    torch.cuda.empty_cache()
    return max(detail["torch_copy_GBps"], detail["triton_copy_GBps"]) * 1e9, detail


def _direct_launch(empty_kernel, x: torch.Tensor):
    """The empty kernel through rlscan's direct launch path (the compiled kernel's own
    launcher, as ``LaunchPlan`` calls it), or None where this Triton does not allow it."""
    try:
        from .._triton import launch as L

        kernel = empty_kernel[(1,)](x)
        compiled = L.launcher_of(empty_kernel, kernel, 1, {})
        launch = lambda: L.direct_launch(compiled, (1, 1, 1), x.device.index, (x,))  # noqa: E731
        launch()
        torch.cuda.synchronize()
        return launch
    except Exception:  # noqa: BLE001 - the direct path is an optimisation; Triton's own path still counts
        timing._recover()
        return None
