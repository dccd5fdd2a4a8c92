"""Packed sequences on a GPU: the Triton kernels of ``rlscan._triton.packed`` checked against
their definition, the padded masked op, and timed against it, side by side::

    python tools/packed_gpu.py              # on CUDA: correctness, then timing (under 3 minutes on an H100)
    python tools/packed_gpu.py --check      # correctness only
    TRITON_INTERPRET=1 python tools/packed_gpu.py --small   # the same checks on tiny batches, no GPU

(1) Correctness, for each op (gae, td_lambda, discounted_returns, kept_returns): the packed
result against the padded op on ``[S, max_len]`` rows built per the definition (row ``s``
holds sequence ``s``, masked inside and 0 past its end, bootstrapped from ``0 if
terminated[s] else bootstrap_value[s]``), on a few random batches: long sequences (8 x 50k),
many short ones, long-tailed lengths with empty sequences, per-sequence γ and per-token λ;
in tiles with one program per sequence and with long sequences in chunks of 4096 tokens.
Bit for bit in exact mode (the kept return's whitened advantages: close, the whitening adds
in another order), close otherwise (the error relative to the largest magnitude). One
``PASS`` or ``FAIL`` line per check; the exit status is 1 on any failure.

(2) Timing (``triton.testing.do_bench``, the median, in microseconds): packed against
padded at equal lengths (256 x 4096, 64 x 32768: the padded op on its own rows, no copies),
and long-tailed lengths (lognormal, median 1024, at most 32768, 256 sequences) against
pad-to-longest: the padded op alone, and with the copies that padding the inputs and
unpadding the outputs cost. A sweep of the packed settings (tile length, chunk length,
pipeline stages) at each shape. The markdown table is printed last.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch

import rlscan
from rlscan._triton import packed
from rlscan.ops.discounted_returns import kept_returns

KINDS = ("gae", "td_lambda", "discounted_returns", "kept_returns")


# ----------------------------------------------------------------------------- batches

def lengths_lognormal(S: int, median: float, most: int, g: torch.Generator, zeros: float = 0.0) -> list:
    x = torch.exp(math.log(median) + 1.0 * torch.randn(S, generator=g)).round().clamp(1, most).long()
    if zeros:
        x[torch.rand(S, generator=g) < zeros] = 0
    return x.tolist()


def make_batch(lengths, device, seed=0, coefs="floats", masked=True, keep=0.85) -> dict:
    """A packed batch: float32 rewards, bf16 values, a bool mask (runs of kept tokens and of
    skipped ones, and padding after EOS), terminated flags and bootstrap values."""
    g = torch.Generator().manual_seed(seed)
    S = len(lengths)
    cu = torch.zeros(S + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths, dtype=torch.int64).cumsum(0)
    N = int(cu[-1])
    r = torch.randn(N, generator=g) * (torch.rand(N, generator=g) < 0.2)
    v = torch.randn(N, generator=g).to(torch.bfloat16)
    # skipped spans: a token starts a span with probability 1/32, spans of ~32 / keep tokens
    mask = None
    if masked:
        flips = torch.rand(N, generator=g) < torch.where(torch.rand(N, generator=g) < keep, 1 / (32 / (1 - keep)), 1 / 32)
        mask = (flips.long().cumsum(0) % 2 == 0)
        ends = cu[1:].long() - 1
        tail = (torch.rand(S, generator=g) * 0.2 * torch.tensor(lengths, dtype=torch.float)).long()
        for s in torch.nonzero(tail > 0).flatten().tolist()[:64]:  # padding after EOS in some sequences
            mask[int(ends[s]) - int(tail[s]) + 1 : int(ends[s]) + 1] = False
    b = dict(cu=cu, rewards=r, values=v, mask=mask, terminated=torch.rand(S, generator=g) < 0.5,
             bootstrap_value=torch.randn(S, generator=g), gamma=0.99, lmbda=0.95)
    if coefs == "tensors":
        b.update(gamma=0.95 + 0.05 * torch.rand(S, generator=g), lmbda=0.8 + 0.2 * torch.rand(N, generator=g))
    return {k: x.to(device) if isinstance(x, torch.Tensor) else x for k, x in b.items()}


class Padding:
    """Where each sequence's tokens go in ``[S, max_len]`` rows, and back (gathers: no sync)."""

    def __init__(self, cu: torch.Tensor):
        cu = cu.long()
        lens = cu.diff()
        self.S, self.L = lens.numel(), max(1, int(lens.max()) if lens.numel() else 1)
        col = torch.arange(self.L, device=cu.device)
        self.valid = col[None, :] < lens[:, None]
        n = int(cu[-1])
        self.index = (cu[:-1, None] + col[None, :]).clamp(max=max(n - 1, 0))
        self.flat = torch.nonzero(self.valid.flatten()).flatten()

    def pad(self, x, fill=0):
        return torch.where(self.valid, x[self.index], fill)

    def unpad(self, x):
        return x.flatten().index_select(0, self.flat)


def run_packed(kind, b, exact=False, whiten=False):
    return packed.scan(kind, b["cu"], rewards=b["rewards"], values=b["values"], mask=b["mask"],
                       terminated=b["terminated"], bootstrap_value=b["bootstrap_value"], gamma=b["gamma"],
                       lmbda=b["lmbda"], exact=exact, whiten=whiten, compute_dtype=torch.float32)


def padded_inputs(b, p: Padding) -> dict:
    """The padded op's inputs per the definition."""
    S = p.S
    mask = b["mask"] if b["mask"] is not None else torch.ones_like(b["rewards"], dtype=torch.bool)
    out = dict(rewards=p.pad(b["rewards"]), values=p.pad(b["values"]), mask=p.pad(mask, False),
               bootstrap_value=torch.where(b["terminated"], 0, b["bootstrap_value"]))
    for name in ("gamma", "lmbda"):
        c = b[name]
        if isinstance(c, torch.Tensor):
            c = c[:, None] if c.numel() == S else p.pad(c, 0.5)
        out[name] = c
    return out


def run_padded_rows(kind, x, exact=False, whiten=False):
    """The padded op on ``[S, max_len]`` rows (outputs in float32)."""
    f32 = torch.float32
    if kind == "gae":
        return tuple(rlscan.gae(x["rewards"], x["values"], mask=x["mask"], bootstrap_value=x["bootstrap_value"],
                                gamma=x["gamma"], lmbda=x["lmbda"], time_dim=1, exact=exact, whiten=whiten,
                                out_dtype=f32))
    if kind == "td_lambda":
        return (rlscan.td_lambda(x["rewards"], x["values"], mask=x["mask"], bootstrap_value=x["bootstrap_value"],
                                 gamma=x["gamma"], lmbda=x["lmbda"], time_dim=1, exact=exact, out_dtype=f32),)
    if kind == "discounted_returns":
        return (rlscan.discounted_returns(x["rewards"], mask=x["mask"], bootstrap_value=x["bootstrap_value"],
                                          gamma=x["gamma"], time_dim=1, exact=exact, out_dtype=f32),)
    return tuple(kept_returns.returns_and_advantages(x["rewards"], x["mask"], x["gamma"], time_dim=1, exact=exact))


def run_padded(kind, b, p: Padding, exact=False, whiten=False):
    return tuple(p.unpad(o) for o in run_padded_rows(kind, padded_inputs(b, p), exact, whiten))


# ----------------------------------------------------------------------------- correctness

FAILED = []


def report(ok: bool, what: str, detail: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {what}: {detail}", flush=True)
    if not ok:
        FAILED.append(what)


def relative_error(got, want) -> float:
    if got.numel() == 0:
        return 0.0
    scale = max(1.0, float(want.double().abs().max()))
    return float((got.double() - want.double()).abs().max()) / scale


def check(name: str, b: dict, kinds=KINDS, exact_too: bool = True, tol: float = 2e-5) -> None:
    """Each op on the batch ``b``: in tiles, one program per sequence and in chunks of 4096
    tokens, and in exact mode."""
    p = Padding(b["cu"])
    modes = [("one program per sequence", False, 0), ("chunks", False, 32 if packed.FORCE_BLOCK == 16 else 4096)] + ([("exact", True, None)] if exact_too
                                                                                 else [])
    for kind in kinds:
        if kind == "kept_returns" and isinstance(b["gamma"], torch.Tensor):
            continue  # REINFORCE++ takes a float γ
        for mode, exact, chunk in modes:
            what = f"{kind} {name} {mode}"
            packed.FORCE_CHUNK = chunk
            try:
                got = run_packed(kind, b, exact=exact)
                want = run_padded(kind, b, p, exact=exact)
            except Exception as exc:  # noqa: BLE001 - reported, and the run goes on
                report(False, what, f"{type(exc).__name__}: {str(exc)[:300]}")
                continue
            finally:
                packed.FORCE_CHUNK = None
            errors = [relative_error(g, w) for g, w in zip(got, want)]
            if exact:
                same = [torch.equal(g, w) for g, w in zip(got, want)]
                if kind == "kept_returns":  # the whitening adds in another order
                    ok = same[1] and errors[0] <= tol
                else:
                    ok = all(same)
                report(ok, what, f"bit-equal {same}, relative error {max(errors):.2e}")
            else:
                report(max(errors) <= tol, what, f"relative error {max(errors):.2e} (tolerance {tol:.0e})")
    if "gae" in kinds and b["mask"] is not None:
        what = f"gae {name} whitened"
        try:
            got = run_packed("gae", b, whiten=True)
            want = run_padded("gae", b, p, whiten=True)
        except Exception as exc:  # noqa: BLE001 - reported, and the run goes on
            report(False, what, f"{type(exc).__name__}: {str(exc)[:300]}")
            return
        err = max(relative_error(g, w) for g, w in zip(got, want))
        report(err <= tol * 10, what, f"relative error {err:.2e}")


def correctness(device, small: bool) -> None:
    g = torch.Generator().manual_seed(0)
    if small:
        packed.FORCE_BLOCK = 16
        check("few short", make_batch([5, 0, 17, 70, 1, 33], device, seed=1))
        check("per-seq gamma, per-token lambda", make_batch([9, 40, 0, 23], device, seed=2, coefs="tensors"))
        check("no mask", make_batch([9, 40, 0, 23], device, seed=3, masked=False))
        return
    start = time.perf_counter()
    check("8 x 50k", make_batch([50_000] * 8, device, seed=1))
    check("4096 short", make_batch(lengths_lognormal(4096, 100, 1000, g, zeros=0.05), device, seed=2))
    check("long-tailed 256", make_batch(lengths_lognormal(256, 1024, 32768, g, zeros=0.02), device, seed=3),
          exact_too=False)
    check("per-seq gamma, per-token lambda", make_batch(lengths_lognormal(512, 300, 5000, g), device, seed=4,
                                                        coefs="tensors"), kinds=("gae", "td_lambda"))
    check("no mask", make_batch(lengths_lognormal(512, 300, 5000, g), device, seed=5, masked=False),
          kinds=("gae", "td_lambda", "discounted_returns"))
    print(f"(correctness: {time.perf_counter() - start:.0f} s)", flush=True)


# ----------------------------------------------------------------------------- timing

def bench(fn) -> float:
    """The median time of ``fn`` in microseconds."""
    import triton.testing

    return 1e3 * triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def timing(device) -> list:
    rows = []
    g = torch.Generator().manual_seed(7)
    shapes = [("256 x 4096", [4096] * 256), ("64 x 32768", [32768] * 64),
              ("lognormal 256 (median 1024, max 32768)", lengths_lognormal(256, 1024, 32768, g))]
    for label, lengths in shapes:
        b = make_batch(lengths, device, seed=11)
        p = Padding(b["cu"])
        x = padded_inputs(b, p)
        equal = len(set(lengths)) == 1
        tokens = sum(lengths)
        block, _ = packed._tile(tokens, len(lengths))
        print(f"  {label}: packed tiles of {block}, chunks of {packed._chunk(tokens, len(lengths), block, device)} "
              "(0: one program per sequence)", flush=True)
        for kind in KINDS:
            t_packed = bench(lambda: run_packed(kind, b))
            t_rows = bench(lambda: run_padded_rows(kind, x))
            t_full = None if equal else bench(lambda: [p.unpad(o) for o in run_padded_rows(kind, padded_inputs(b, p))])
            rows.append((label, kind, tokens, p.S * p.L, t_packed, t_rows, t_full))
            print(f"  {label:40s} {kind:20s} packed {t_packed:8.1f} us   padded op {t_rows:8.1f} us"
                  + ("" if t_full is None else f"   pad + op + unpad {t_full:8.1f} us"), flush=True)
        if label == "256 x 4096":
            t_packed = bench(lambda: run_packed("gae", b, exact=True))
            t_rows = bench(lambda: run_padded_rows("gae", x, exact=True))
            rows.append((label, "gae exact", tokens, p.S * p.L, t_packed, t_rows, None))
            print(f"  {label:40s} {'gae exact':20s} packed {t_packed:8.1f} us   padded op {t_rows:8.1f} us", flush=True)
    # the packed settings: tile length, chunk length (0: one program per sequence), pipeline stages
    for label, lengths in shapes:
        b = make_batch(lengths, device, seed=12)
        sweep = []
        for block, chunk, stages in ((1024, 0, None), (2048, 0, None), (2048, 0, 3), (1024, 2048, None),
                                     (1024, 4096, None), (2048, 4096, None), (2048, 8192, None), (2048, 4096, 3)):
            packed.FORCE_BLOCK, packed.FORCE_CHUNK, packed.FORCE_STAGES = block, chunk, stages
            try:
                sweep.append((block, chunk, stages, bench(lambda: run_packed("gae", b))))
            except Exception as exc:  # noqa: BLE001 - a setting this GPU or Triton cannot run
                sweep.append((block, chunk, stages, float("nan")))
                print(f"  tile {block}, chunk {chunk}, stages {stages}: {type(exc).__name__}: {str(exc)[:200]}")
            finally:
                packed.FORCE_BLOCK = packed.FORCE_CHUNK = packed.FORCE_STAGES = None
        print(f"  packed gae at {label} by (tile, chunk, stages): "
              + ", ".join(f"({block}, {chunk}, {stages}): {t:.1f} us" for block, chunk, stages, t in sweep), flush=True)
    return rows


def table(rows, device_name: str) -> None:
    print(f"\n### Packed sequences vs padded rows, {device_name} (median us, do_bench)\n")
    print("| lengths | op | tokens | padded cells | packed | padded op | pad + op + unpad | padded op / packed |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, kind, tokens, cells, t_packed, t_rows, t_full in rows:
        ratio = (t_full if t_full is not None else t_rows) / t_packed
        full = "—" if t_full is None else f"{t_full:.1f}"
        print(f"| {label} | {kind} | {tokens} | {cells} | {t_packed:.1f} | {t_rows:.1f} | {full} | {ratio:.2f}x |")
    print("\nThe last column: the padded path (with its copies where the lengths differ) over the packed one.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="correctness only")
    parser.add_argument("--small", action="store_true", help="tiny batches (for the Triton interpreter on a CPU)")
    opts = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda and not opts.small:
        print("no CUDA device: run with --small under TRITON_INTERPRET=1, or on a GPU")
        return 2
    start = time.perf_counter()
    with rlscan.use_backend("triton"):
        correctness(device, opts.small)
        rows = timing(device) if cuda and not opts.check else []
    print(f"\n{len(FAILED)} failures ({time.perf_counter() - start:.0f} s)")
    if rows:
        table(rows, torch.cuda.get_device_name())
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
