"""Compile a GPU grid's Triton kernels in parallel processes before the grid runs.

Triton compiles a kernel at its first launch, on one CPU thread, and keeps the binary in its
on-disk cache. A grid launches a few kernels per cell (rlscan's, the exact kernel's, the
whole-row stand-in's, the float64 truth's), so a run's first pass over the cells spends most
of its time compiling, one kernel after another. Here a pool of processes runs each cell's
Triton implementations once, on the cell's own inputs (the launch settings and the
compiler's specialisations depend on the shape), and the grid then loads every kernel from
the cache. Only the Triton implementations run; ``torch.compile`` keeps its own budget.
"""
from __future__ import annotations

import multiprocessing
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

TRITON_IMPLS = ("rlscan", "exact", "whole_row")


def default_jobs() -> int:
    """Processes that compile kernels ahead (``rlscan bench`` on a GPU, ``rlscan tune``): half the
    CPUs, at most 8, as each holds a CUDA context and a call's inputs."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def _warm_cell(op: str, N: int, T: int, layout: str, dtype_name: str, keys: tuple, seed: int,
               device: str = "cuda") -> int:
    """In a worker process: run the Triton implementations ``keys`` of one cell once, and its
    truth; how many ran (a failure is the grid's to report)."""
    import torch

    from . import alternatives, check
    from .cases import CASES, make_inputs

    case, dtype = CASES[op], getattr(torch, dtype_name)
    inputs = make_inputs(case, T, N, dtype, layout, torch.device(device), seed=seed)
    by_key = {i.key: i for i in (alternatives.RLSCAN,) + alternatives.ALTERNATIVES}
    ran = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key in keys:
            try:
                runner = by_key[key].build(case, dtype)
                runner.run(runner.prepare(inputs))
                ran += 1
            except Exception:  # noqa: BLE001 - the grid runs it again and reports the failure
                pass
        try:
            check.truth(case, inputs, T, N)
        except Exception:  # noqa: BLE001
            pass
    if device == "cuda":
        torch.cuda.synchronize()
    return ran


def warm(cells: list, layout: str, dtype, seed: int, jobs: int) -> tuple:
    """``(kernels run, seconds)``: ``cells`` as ``(op, N, T, impl keys)``, each run in a pool of
    ``jobs`` processes, largest cells first (they take longest)."""
    start = time.monotonic()
    tasks = sorted(cells, key=lambda c: -c[1] * c[2])
    args = [(op, N, T, layout, str(dtype).replace("torch.", ""), tuple(keys), seed) for op, N, T, keys in tasks]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        ran = sum(pool.map(_warm_cell, *zip(*args)))
    return ran, time.monotonic() - start
