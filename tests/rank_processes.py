"""Tests on ``torch.distributed``'s gloo backend: ranks as processes on localhost, each run
bounded in time, and the bytes each rank sends counted by wrapping ``torch.distributed``'s
communication functions."""
from __future__ import annotations

import os
import socket
import time
import traceback

import pytest
import torch
import torch.multiprocessing as mp

TIMEOUT_S = 120
SENDING = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce", "all_to_all",
           "reduce_scatter", "gather", "scatter", "send", "recv", "barrier", "isend", "irecv", "batch_isend_irecv")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counting(dist, log: list) -> dict:
    """Wrap ``torch.distributed``'s communication functions to note ``(name, bytes this rank
    sends)`` in ``log``; returns the originals."""
    originals = {}
    for name in SENDING:
        fn = getattr(dist, name, None)
        if fn is None:
            continue
        originals[name] = fn

        def counted(*args, _fn=fn, _name=name, **kwargs):
            sent = args[1] if _name in ("all_gather", "all_gather_into_tensor") else (args[0] if args else None)
            sent = kwargs.get("tensor", sent)
            size = 0 if _name == "recv" or not isinstance(sent, torch.Tensor) else sent.numel() * sent.element_size()
            log.append((_name, size))
            return _fn(*args, **kwargs)

        setattr(dist, name, counted)
    return originals


def _worker(rank: int, world: int, port: int, case, cases: tuple, folder: str) -> None:
    import datetime

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
        for one in cases:
            case(rank, world, one)
        dist.destroy_process_group()
        open(os.path.join(folder, f"rank{rank}"), "w").write("ok")
    except BaseException:
        open(os.path.join(folder, f"rank{rank}"), "w").write(traceback.format_exc())


def run(case, world: int, cases: tuple, tmp_path) -> None:
    """``case(rank, world, one)`` for each of ``cases`` on ``world`` gloo ranks (a module-level
    function, which each process imports); fails the test where a rank raised or the ranks
    did not finish in ``TIMEOUT_S``."""
    context = mp.start_processes(_worker, args=(world, free_port(), case, cases, str(tmp_path)), nprocs=world,
                                 join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for p in context.processes:
                p.kill()
            pytest.fail(f"{world} ranks did not finish {cases} in {TIMEOUT_S} s")
    for rank in range(world):
        text = (tmp_path / f"rank{rank}").read_text()
        assert text == "ok", f"rank {rank} of {world}:\n{text}"
