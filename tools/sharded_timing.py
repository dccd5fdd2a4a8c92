"""``rlscan.gae(..., sequence_sharded=True)`` on 2 and 4 gloo ranks of this machine against
the unsplit call, side by side in one run::

    python tools/sharded_timing.py            # 64 x 32768, masked, float32
    python tools/sharded_timing.py --dry      # 8 x 512: checks the script

The unsplit call runs in one process with every core; each sharded run starts ``R``
processes (each with ``cores / R`` threads for torch and numba), rank ``j`` holding the
``j``-th of ``R`` equal chunks of every sequence along time. A cell is the median of
``CALLS`` calls, after one that compiles; a sharded call's time is the slowest rank's,
between two barriers (its collectives included). "exact" is ``exact=True`` (the carries
passed rank to rank). Every sharded result is checked against the unsplit one (bit for bit
with ``exact=True``). The machine's other work moves every figure: compare the rows of one
run.
"""
from __future__ import annotations

import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.multiprocessing as mp

DRY = "--dry" in sys.argv
B, T = (8, 512) if DRY else (64, 32768)
WORLDS = (2, 4)
CALLS = 3 if DRY else 11


def batch():
    g = torch.Generator().manual_seed(0)
    r, v = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    mask = torch.rand(B, T, generator=g) < 0.8
    term = torch.rand(B, T, generator=g) < 1e-3
    boot = torch.randn(B, generator=g)
    return r, v, mask, term, boot


def _threads(n: int) -> None:
    os.environ["NUMBA_NUM_THREADS"] = str(n)
    torch.set_num_threads(n)


def _median_ms(fn, sync=lambda: None) -> float:
    fn()
    times = []
    for _ in range(CALLS):
        sync()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _unsplit(queue, folder: str) -> None:
    _threads(os.cpu_count())
    import rlscan

    r, v, mask, term, boot = batch()
    for exact in (False, True):
        ms = _median_ms(lambda: rlscan.gae(r, v, mask=mask, terminated=term, bootstrap_value=boot, time_dim=-1,
                                          exact=exact))
        want = rlscan.gae(r, v, mask=mask, terminated=term, bootstrap_value=boot, time_dim=-1, exact=exact)
        torch.save(tuple(want), os.path.join(folder, f"unsplit{int(exact)}.pt"))
        queue.put((1, exact, ms))


def _rank(rank: int, world: int, port: int, queue, folder: str) -> None:
    _threads(max(1, (os.cpu_count() or 1) // world))
    import datetime

    import torch.distributed as dist

    import rlscan

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300))
    lo, hi = rank * T // world, (rank + 1) * T // world
    r, v, mask, term, boot = (x[:, lo:hi] if x.dim() == 2 else x for x in batch())
    for exact in (False, True):
        def call():
            return rlscan.gae(r, v, mask=mask, terminated=term, bootstrap_value=boot, time_dim=-1, exact=exact,
                              group=dist.group.WORLD, sequence_sharded=True)

        def timed():
            dist.barrier()
            start = time.perf_counter()
            call()
            dist.barrier()  # the slowest rank's time
            return time.perf_counter() - start

        timed()
        ms = statistics.median(timed() for _ in range(CALLS)) * 1e3
        want = torch.load(os.path.join(folder, f"unsplit{int(exact)}.pt"))
        for got, w in zip(call(), want):
            w = w[:, lo:hi]
            if exact:
                assert torch.equal(got, w), (world, rank)
            else:
                torch.testing.assert_close(got, w, rtol=1e-4, atol=1e-4)
        if rank == 0:
            queue.put((world, exact, ms))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    folder = tempfile.mkdtemp()
    p = ctx.Process(target=_unsplit, args=(queue, folder))
    p.start()
    p.join()
    for world in WORLDS:
        mp.start_processes(_rank, args=(world, _free_port(), queue, folder), nprocs=world, start_method="spawn")
    rows = [queue.get() for _ in range(2 + 2 * len(WORLDS))]
    shutil.rmtree(folder)
    base = {exact: ms for world, exact, ms in rows if world == 1}
    print(f"gae, masked, float32, {B} x {T}, {os.cpu_count()} cores; median of {CALLS} calls")
    print(f"{'ranks':>5} {'mode':>7} {'ms':>9} {'vs unsplit':>10}")
    for world, exact, ms in sorted(rows, key=lambda x: (x[1], x[0])):
        mode = "exact" if exact else "default"
        print(f"{world:>5} {mode:>7} {ms:>9.1f} {ms / base[exact]:>9.2f}x")


if __name__ == "__main__":
    main()
