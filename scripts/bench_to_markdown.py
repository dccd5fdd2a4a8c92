"""Turn a `rlscan bench` JSON into the markdown tables of docs/benchmarks.md.

    python scripts/bench_to_markdown.py docs/data/h200-2026-11-29-bench.json
"""
import json
import sys

NAMES = {"exact": "sequential kernel", "compile": "compiled doubling scan", "loop_torch": "torch loop (GPU)",
         "loop_numpy": "numpy loop (CPU)", "torchrl_loop": "TorchRL loop", "torchrl_vec": "TorchRL vectorised",
         "sb3": "SB3 buffer"}


def us(x):
    return "—" if x is None else (f"{x / 1000:.2f} ms" if x >= 1000 else f"{x:.1f} µs")


def main(path):
    doc = json.load(open(path))
    fl = doc["floors"]
    print(f"Card: {doc['device']['name']}; torch {doc['versions']['torch']}, Triton {doc['versions']['triton']}; "
          f"{doc['date'][:10]}. Launch floor {fl['launch_us']:.1f} µs (direct) / {fl['triton_launch_us']:.1f} µs "
          f"(JITFunction.run); copy bandwidth {fl['copy_bandwidth_GBps'] / 1000:.2f} TB/s.\n")
    by_op = {}
    for cell in doc["cells"]:
        by_op.setdefault(cell["op"], []).append(cell)
    for op, cells in by_op.items():
        print(f"### {op}\n")
        print("| N × T | rlscan full call | rlscan device | device / bandwidth floor | full / launch floor "
              "| sequential kernel device | fastest alternative (full call) | rlscan speedup over it |")
        print("|---|---|---|---|---|---|---|---|")
        for c in cells:
            r = c["impls"]["rlscan"]
            alts = [(k, v) for k, v in c["impls"].items() if k != "rlscan" and v.get("status") == "ok"]
            best = min(alts, key=lambda kv: kv[1]["full_us"], default=None)
            seq = c["impls"].get("exact", {})
            best_txt = "—" if best is None else f"{NAMES.get(best[0], best[0])}: {us(best[1]['full_us'])}"
            speed = "—" if best is None else f"×{best[1]['full_us'] / r['full_us']:.2f}"
            print(f"| {c['N']} × {c['T']} | {us(r['full_us'])} | {us(r.get('device_us'))} | "
                  f"{r.get('device_over_bandwidth_floor', float('nan')):.2f} | {r['full_us'] / fl['launch_us']:.2f} | "
                  f"{us(seq.get('device_us'))} | {best_txt} | {speed} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
