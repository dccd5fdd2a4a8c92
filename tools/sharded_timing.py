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

Beside them, on the same ranks, what context-parallel trainers do today (slime's
``all_gather_with_cp``): every rank all-gathers the chunks of rewards, values and mask into
the whole ``[B, T]`` sequences (O(tokens) bytes per rank), computes GAE over them and keeps
its own chunk: "gather + loop" with a per-token loop over the time axis (the loop form of
OpenRLHF's and slime's GAE), "gather + rlscan" with the unsplit ``rlscan.gae``. The last
column is the most bytes one rank sends in a call.
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
LOOP_CALLS = 3


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
        queue.put((1, "exact" if exact else "default", ms, 0))


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
        sent = _sent_bytes(call)  # every rank: the call's collectives need them all
        queue.put((world, "exact" if exact else "default", ms, sent))
    for mode in ("gather + rlscan", "gather + loop"):
        def gathered():
            whole = []
            for x in (r, v, mask):
                parts = [torch.empty_like(x) for _ in range(world)]
                dist.all_gather(parts, x.contiguous())
                whole.append(torch.cat(parts, dim=1))
            if mode == "gather + rlscan":
                adv, ret = rlscan.gae(whole[0], whole[1], mask=whole[2], bootstrap_value=boot, time_dim=-1)
            else:
                adv, ret = _loop_gae(*whole)
            return adv[:, lo:hi], ret[:, lo:hi]

        def timed_gathered():
            dist.barrier()
            start = time.perf_counter()
            gathered()
            dist.barrier()
            return time.perf_counter() - start

        timed_gathered()
        calls = CALLS if mode == "gather + rlscan" else LOOP_CALLS
        ms = statistics.median(timed_gathered() for _ in range(calls)) * 1e3
        queue.put((world, mode, ms, _sent_bytes(gathered)))
    dist.destroy_process_group()


def _loop_gae(rewards, values, mask, gamma: float = 0.99, lmbda: float = 0.95):
    """GAE as a loop over the time axis, one step of every sequence at a time (the loop form
    of OpenRLHF's and slime's ``get_advantages_and_returns``: masked products, the value
    after the last step 0)."""
    rewards, values = rewards * mask, values * mask
    advantages = torch.empty_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        next_value = values[:, t + 1] if t + 1 < rewards.size(1) else 0.0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = delta + gamma * lmbda * last
        advantages[:, t] = last
    return advantages, advantages + values


def _sent_bytes(fn) -> int:
    """The bytes this rank sends through torch.distributed's collectives in one ``fn()``."""
    import torch.distributed as dist

    sent = [0]
    originals = {name: getattr(dist, name) for name in ("all_gather", "all_gather_into_tensor", "all_reduce",
                                                          "send", "isend")}

    def counting(name):
        def wrapped(*args, **kwargs):
            tensor = args[1] if name in ("all_gather", "all_gather_into_tensor") else args[0]
            sent[0] += tensor.numel() * tensor.element_size()
            return originals[name](*args, **kwargs)
        return wrapped

    for name in originals:
        setattr(dist, name, counting(name))
    try:
        fn()
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
    return sent[0]


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
    cells: dict = {}  # (ranks, mode) -> (the slowest rank's ms, the most bytes a rank sent)
    for _ in range(2 + 4 * sum(WORLDS)):
        world, mode, ms, sent = queue.get()
        old_ms, old_sent = cells.get((world, mode), (0.0, 0))
        cells[world, mode] = (max(old_ms, ms), max(old_sent, sent))
    rows = [(world, mode, ms, sent) for (world, mode), (ms, sent) in cells.items()]
    shutil.rmtree(folder)
    base = {mode: ms for world, mode, ms, _ in rows if world == 1}
    print(f"gae, masked, float32, {B} x {T}, {os.cpu_count()} cores; median of {CALLS} calls "
          f"({LOOP_CALLS} of the loop)\n")
    print("| ranks | mode | ms | vs unsplit | bytes a rank gives the collectives |")
    print("|---:|---|---:|---:|---:|")
    order = ("default", "exact", "gather + rlscan", "gather + loop")
    for world, mode, ms, sent in sorted(rows, key=lambda x: (x[0], order.index(x[1]))):
        print(f"| {world} | {mode} | {ms:.1f} | {ms / base['default']:.2f}x | {sent:,} |")


if __name__ == "__main__":
    main()
