"""``rlscan.gae(..., sequence_sharded=True)`` on CUDA tensors (the torch-operations path and
the Triton scans), one NCCL rank per GPU of this machine (``torchrun``-free: spawned here)::

    python tools/sharded_gpu_check.py        # 64 x 4096 per rank, masked and not, exact or not
    python tools/sharded_gpu_check.py 2 --cpu   # the same on 2 gloo ranks and CPU tensors

Checks each rank's chunk against the unsplit call on the whole batch (every rank builds it)
and prints the largest difference, and whether it is bit for bit (``exact=True``).
"""
from __future__ import annotations

import os
import socket
import sys

import torch
import torch.multiprocessing as mp

B, T_RANK = 64, 4096


def _rank(rank: int, world: int, port: int, cpu: bool) -> None:
    import datetime

    import torch.distributed as dist

    import rlscan

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cpu") if cpu else torch.device("cuda", rank)
    if cpu:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120))
    else:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120),
                                device_id=device)
    g = torch.Generator().manual_seed(0)
    T = T_RANK * world
    r, v = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    mask = torch.rand(B, T, generator=g) < 0.8
    term = torch.rand(B, T, generator=g) < 1e-3
    boot = torch.randn(B, generator=g)
    r, v, mask, term, boot = (x.to(device) for x in (r, v, mask, term, boot))
    lo, hi = rank * T_RANK, (rank + 1) * T_RANK
    for masked in (True, False):
        for exact in (False, True):
            kw = dict(terminated=term, bootstrap_value=boot, exact=exact, time_dim=-1)
            if masked:
                kw["mask"] = mask
            want = rlscan.gae(r, v, **kw)
            kw.update(terminated=term[:, lo:hi], mask=mask[:, lo:hi] if masked else None)
            got = rlscan.gae(r[:, lo:hi], v[:, lo:hi], group=dist.group.WORLD, sequence_sharded=True, **kw)
            for name, a, b in zip(("advantages", "returns"), got, want):
                b = b[:, lo:hi]
                print(f"rank {rank}/{world} masked={masked} exact={exact} {name}: max |diff| "
                      f"{(a - b).abs().max().item():.3g}, bitwise {torch.equal(a, b)}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    cpu = "--cpu" in sys.argv
    counts = [a for a in sys.argv[1:] if a.isdigit()]
    world = int(counts[0]) if counts else torch.cuda.device_count()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_rank, args=(world, port, cpu), nprocs=world, start_method="spawn")


if __name__ == "__main__":
    main()
