"""The C allocator under this CPU's training step, side by side: glibc as it comes, torch's huge pages,
glibc keeping freed memory, both, and mimalloc with huge pages (fairseq_heads/cpu_memory.py).

    python benchmarks/cpu_allocator.py --data-bin RESULTS/data/bin [--src en --tgt it]
        [--updates 40] [--rounds 2] [--threads 2] [--autocast auto]
        [--out benchmarks/results/cpu_allocator_europarl.json]

Why: a CPU training step of the Europarl model allocates and frees tensors of hundreds of MB each
update (the 4,096-token batch's logits over 16,000 pieces: 262 MB in fp32, and their gradients).
glibc serves every request above its mmap threshold (at most 32 MiB) with a fresh mmap and gives it
back at free, so every update faults those pages in again and the kernel zeroes them: on the AMX
Xeon of 2026-12-07 a `perf record` of the bf16 baseline put 26% of its samples in the kernel's
`clear_page_erms` under those faults, and 10% in `_int_malloc`. `fairseq_heads.cpu_memory` sets
glibc's tunables (GLIBC_TUNABLES) so that freed memory stays in the process for the next update, or
preloads mimalloc told the same (where the cmeel-mimalloc wheel is installed; else that variant is
left out); torch's THP_MEM_ALLOC_ENABLE puts its large blocks on huge pages (fewer faults, each
clearing 2 MiB).

The workload is the `europarl_en_it --scale cpu` recipe's baseline (6+6 layers pre-norm, d=256,
8 heads of 32, 4,096-token batches, Adam) trained by fairseq-train for --updates updates from the
same seed, once per variant and round, the variants alternating (A B, B A, ...) so that load from
other processes falls on all alike; each run its own process (an allocator is chosen at process
start). Measured per variant: target tokens/s of each logged interval of 5 updates after the
first two intervals (median over rounds and intervals), the process's peak resident memory, its
page faults (the start-up's included) and its user and system CPU seconds (getrusage of the
child), and the train loss at the last update (the variants must agree: an allocator changes no
arithmetic).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import fairseq_heads  # noqa: E402
from fairseq_heads.cpu_memory import ALLOCATORS, allocator_env, cpu_recipe_allocator, mimalloc_library  # noqa: E402
from fairseq_heads.files import write_text_atomic  # noqa: E402

USER_DIR = os.path.dirname(os.path.abspath(fairseq_heads.__file__))
SIZE = ["--encoder-normalize-before", "--decoder-normalize-before",
        "--encoder-layers", 6, "--decoder-layers", 6, "--encoder-embed-dim", 256, "--decoder-embed-dim", 256,
        "--encoder-ffn-embed-dim", 1024, "--decoder-ffn-embed-dim", 1024, "--encoder-attention-heads", 8,
        "--decoder-attention-heads", 8, "--share-all-embeddings"]
LOG_INTERVAL = 5
# fairseq-train, and at its exit the process's peak resident memory (an allocator that keeps freed
# memory holds more of it)
TRAIN_REPORTING_PEAK = """
import atexit, runpy, sys
atexit.register(lambda: print("PEAK_RSS_KB", open("/proc/self/status").read().split("VmHWM:")[1].split()[0],
                              file=sys.stderr, flush=True))
sys.argv[0] = "fairseq-train"
runpy.run_module("fairseq_cli.train", run_name="__main__")
"""
SKIPPED_INTERVALS = 2  # start-up: the first batches and the allocator's first growth


def train_once(args, allocator: str, work: str) -> dict:
    """fairseq-train for args.updates updates under `allocator`; its intervals' tokens/s, faults and CPU."""
    argv = [sys.executable, "-c", TRAIN_REPORTING_PEAK, args.data_bin, "--user-dir", USER_DIR,
            "--task", "translation_heads", "-s", args.src, "-t", args.tgt, "--num-workers", 0, "--cpu",
            "--autocast", args.autocast, "--arch", "transformer", *SIZE, "--dropout", 0.1,
            "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", 0.1, "--optimizer", "adam",
            "--adam-betas", "(0.9,0.98)", "--lr", 5e-4, "--lr-scheduler", "inverse_sqrt", "--warmup-updates", 4000,
            "--max-tokens", 4096, "--seed", 1, "--max-update", args.updates, "--no-save", "--disable-validation",
            "--log-format", "json", "--log-interval", LOG_INTERVAL, "--no-progress-bar",
            "--save-dir", os.path.join(work, "unused")]
    base = {k: v for k, v in os.environ.items()
            if k not in ("GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE", "LD_PRELOAD") and not k.startswith("MIMALLOC_")}
    env = dict(base, OMP_NUM_THREADS=str(args.threads), **allocator_env(allocator, base))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([str(a) for a in argv], env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"cpu_allocator: fairseq-train under {allocator} failed:\n{done.stderr[-2000:]}")
    intervals = [json.loads(line.split("| train_inner | ", 1)[1])
                 for line in (done.stdout + done.stderr).splitlines() if "| train_inner | " in line]
    if len(intervals) <= SKIPPED_INTERVALS:
        sys.exit(f"cpu_allocator: {len(intervals)} logged intervals; raise --updates")
    peak = [line.split()[1] for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KB")]
    return {"tokens_per_s": [float(i["wps"]) for i in intervals[SKIPPED_INTERVALS:]],
            "peak_rss_mb": round(int(peak[-1]) / 1024) if peak else None,
            "last_loss": float(intervals[-1]["loss"]),
            "minor_faults": after.ru_minflt - before.ru_minflt,
            "user_s": round(after.ru_utime - before.ru_utime, 2),
            "system_s": round(after.ru_stime - before.ru_stime, 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-bin", required=True)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="it")
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--autocast", default="auto", choices=("none", "bf16", "auto"))
    parser.add_argument("--out", default="benchmarks/results/cpu_allocator_europarl.json")
    args = parser.parse_args()
    if not os.path.isdir(args.data_bin):
        parser.error(f"--data-bin {args.data_bin}: no such folder")
    allocators = tuple(a for a in ALLOCATORS if mimalloc_library() or not a.startswith("mimalloc"))
    runs = {a: [] for a in allocators}
    with tempfile.TemporaryDirectory() as work:
        for round_ in range(args.rounds):
            for allocator in (allocators if round_ % 2 == 0 else tuple(reversed(allocators))):
                runs[allocator].append(train_once(args, allocator, work))
                print(allocator, runs[allocator][-1], flush=True)
    summary = {}
    for allocator, rounds in runs.items():
        summary[allocator] = {
            "target_tokens_per_s_median": round(statistics.median(t for r in rounds for t in r["tokens_per_s"]), 1),
            "minor_faults_per_update_startup_included": round(statistics.mean(r["minor_faults"] for r in rounds) / args.updates),
            "peak_rss_mb": max(r["peak_rss_mb"] or 0 for r in rounds),
            "system_share_of_cpu": round(statistics.mean(r["system_s"] / (r["system_s"] + r["user_s"]) for r in rounds), 3),
            "last_train_loss": [r["last_loss"] for r in rounds],
            "env": allocator_env(allocator, {}),
        }
    speed = {a: summary[a]["target_tokens_per_s_median"] for a in allocators}
    speedups = {a: round(speed[a] / speed["glibc"], 3) for a in allocators}
    chosen = cpu_recipe_allocator()
    # glibc_thp: what the recipes ran under before (THP_MEM_ALLOC_ENABLE alone)
    over_previous = round(speed[chosen] / speed["glibc_thp"], 3)
    result = {"benchmark": "cpu_allocator", "machine": machine_info(),
              "workload": "europarl_en_it --scale cpu baseline: 6+6 x 8 heads, d=256, 4,096-token batches, "
                          f"fairseq-train --autocast {args.autocast}",
              "updates": args.updates, "rounds": args.rounds, "threads": args.threads,
              "variants": summary, "runs": runs, "speedup_over_glibc": speedups,
              "recipe_allocator": chosen, "speedup_recipe_allocator_over_glibc_thp": over_previous,
              "verdict": ("target tokens/s against glibc as it comes: "
                          + ", ".join(f"{a} {speedups[a]:.2f}x" for a in allocators[1:])
                          + f"; the CPU recipes run under {chosen}")}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=1) + "\n")
    print(result["verdict"])


if __name__ == "__main__":
    main()
