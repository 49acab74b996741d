"""bf16 against fp32 matrix products on this CPU, side by side in one run, at the shapes of the
Europarl CPU baseline's training step (d=256, FFN 1,024, 16,000 pieces): whether `--autocast bf16`
can pay here, and what `--autocast auto` (fairseq_heads/precision.py: `fast_bf16`) decides.

    python benchmarks/bf16_gemm_cpu.py [--tokens 512] [--rounds 3] [--threads 1]
        [--out benchmarks/results/bf16_gemm_cpu_<cpu>.json]

Each product (tokens x K) @ (K x N) runs in fp32 and in bf16 in turn, round after round, so that
load from other processes falls on both alike; each figure is the fastest round's GFLOP/s. A
CPU without oneDNN's bf16 path (no AVX512 with BW/VL/DQ, no AMX) runs bf16 in torch's reference
kernel: the ratio then says how much slower a bf16 training would be in its matrix products.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

from fairseq_heads.files import write_text_atomic  # noqa: E402
from fairseq_heads.precision import fast_bf16  # noqa: E402

# (name, K, N) of the step's products, per token: attention in-projection (q, k, v), its output,
# the FFN's two layers, the output projection onto the vocabulary
SHAPES = (("in_projection", 256, 768), ("out_projection", 256, 256), ("ffn_in", 256, 1024),
          ("ffn_out", 1024, 256), ("vocabulary", 256, 16000))


def seconds(a: torch.Tensor, b: torch.Tensor) -> float:
    start = time.perf_counter()
    a @ b
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for name, k, n in SHAPES:
        a, b = torch.randn(args.tokens, k), torch.randn(k, n)
        pairs = {"fp32": (a, b), "bf16": (a.bfloat16(), b.bfloat16())}
        for x, y in pairs.values():
            x @ y  # warm-up: kernel selection, first-touch of the output
        best = {dtype: seconds(*pairs[dtype]) for dtype in pairs}
        for _ in range(args.rounds - 1):
            for dtype in pairs:
                best[dtype] = min(best[dtype], seconds(*pairs[dtype]))
        flops = 2.0 * args.tokens * k * n
        rows.append({"product": name, "m": args.tokens, "k": k, "n": n,
                     "gflops_fp32": round(flops / best["fp32"] / 1e9, 2),
                     "gflops_bf16": round(flops / best["bf16"] / 1e9, 2),
                     "bf16_speedup": round(best["fp32"] / best["bf16"], 4)})
        print(rows[-1], flush=True)
    total = {dtype: sum(2.0 * r["m"] * r["k"] * r["n"] / (r[f"gflops_{dtype}"] * 1e9) for r in rows)
             for dtype in ("fp32", "bf16")}
    speedup = total["fp32"] / total["bf16"]
    machine = machine_info()
    result = {"benchmark": "bf16_gemm_cpu", "machine": machine, "threads": args.threads, "rounds": args.rounds,
              "fast_bf16": fast_bf16("cpu"), "autocast_auto_runs": "bf16" if fast_bf16("cpu") else "none",
              "products": rows, "step_products_bf16_speedup": round(speedup, 4),
              "verdict": (f"bf16 matrix products are {speedup:.2f}x fp32's speed at the step's shapes: "
                          + ("bf16 autocast can pay here" if speedup > 1 else
                             "bf16 autocast is slower here; `--autocast auto` runs fp32"))}
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   "bf16_gemm_cpu_" + "".join(c if c.isalnum() else "_" for c in
                                                              machine["cpu_model"].lower()).strip("_") + ".json")
    write_text_atomic(out, json.dumps(result, indent=1) + "\n")
    print(result["verdict"], "->", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
