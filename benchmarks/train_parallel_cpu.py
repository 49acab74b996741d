"""Seconds per update of the recipes' L0 fine-tune on CPU: one process against data-parallel workers.

    python benchmarks/train_parallel_cpu.py --data-bin RESULTS/data/bin \
        --checkpoint ../shared/models/multi30k_en_de_6x8/checkpoint.pt \
        [--updates 40] [--rounds 2] [--out benchmarks/results/train_parallel_cpu.json]
    python benchmarks/train_parallel_cpu.py --model europarl --data-bin EUROPARL/data/bin -t it \
        --checkpoint EUROPARL/models/baseline_s2.partial/checkpoint_2_5500.pt \
        --variants 1proc-2threads,2chains-1thread --out benchmarks/results/train_parallel_cpu_europarl.json

The workload is the converged protocol's L0 phase, all three attention types gated, 4,096 tokens
per update, gate_adam, started from a trained baseline and trained by `fairseq-train` as the recipe
runs it: on Multi30k (`--model multi30k`, the multi30k_en_de recipe, then recipes/multi30k_en_de/run.sh:
6+6 layers x 8 heads, d=128, fp32), or on Europarl (`--model europarl`, the europarl_en_it --scale
cpu recipe: d=256 pre-norm, `--autocast auto`, under the CPU recipes' allocator,
fairseq_heads/cpu_memory.py). Variants:

  1proc-1thread   one process, OMP_NUM_THREADS=1 (what each of two side-by-side chains runs)
  1proc-Nthreads  one process, OMP_NUM_THREADS=N (N = the cores)
  Nproc-1thread   N gloo workers of one thread each (torchrun, legacy_ddp), each --max-tokens
                  4096/N, so that an update still sees ~4,096 tokens
  Nchains-1thread N independent 1-thread runs side by side (recipes/multi30k_en_de/converged_plan.sh
                  CHAIN=A and CHAIN=B): the seconds per update of each, and their aggregate

Speed is read from fairseq's own log: the `wall` seconds of the train_inner lines between
update 10 and the last, so start-up (imports, loading the checkpoint) is not counted. Variants
run in interleaved rounds whose order rotates; each variant's figure is its fastest round.
On a 2-core machine the question is whether 2 workers halve the time of one model (and so fit
one L0 + fixed-mask model into a 3-hour session), as two 1-thread chains halve the time of two.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import fairseq_heads  # noqa: E402
from fairseq_heads.cpu_memory import allocator_env, cpu_recipe_allocator  # noqa: E402
from fairseq_heads.files import write_text_atomic  # noqa: E402

USER_DIR = os.path.dirname(os.path.abspath(fairseq_heads.__file__))
TOKENS_PER_UPDATE = 4096
# each model's size and the options that differ (the recipes': pipeline/recipes.py)
MODELS = {
    "multi30k": ("--encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 128 --decoder-embed-dim 128 "
                 "--encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512 "
                 "--encoder-attention-heads 8 --decoder-attention-heads 8 --dropout 0.2").split(),
    "europarl": ("--encoder-layers 6 --decoder-layers 6 --encoder-embed-dim 256 --decoder-embed-dim 256 "
                 "--encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 "
                 "--encoder-attention-heads 8 --decoder-attention-heads 8 --dropout 0.1 "
                 "--encoder-normalize-before --decoder-normalize-before --autocast auto").split(),
}
WORKLOADS = {"multi30k": "L0 fine-tune, all types gated, 6+6 x 8 heads d=128, 4096 tokens/update, Multi30k en-de",
             "europarl": "L0 fine-tune, all types gated, 6+6 x 8 heads d=256 pre-norm, bf16 autocast where fast, "
                         "4096 tokens/update, Europarl en-it, the CPU recipes' allocator"}
WALL = re.compile(r"num_updates=(\d+),.*\bwall=(\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_command(args, save_dir: str, workers: int) -> list:
    return ["fairseq-train", args.data_bin, "--user-dir", USER_DIR, "--task", "translation_heads",
            "-s", args.src, "-t", args.tgt, "--cpu", "--num-workers", "0", "--seed", "1",
            "--arch", "gated_transformer", *MODELS[args.model], "--share-all-embeddings",
            "--gated-attention", "enc-self,dec-self,enc-dec", "--finetune-from-model", args.checkpoint,
            "--criterion", "label_smoothed_cross_entropy_l0", "--label-smoothing", "0.1",
            "--l0-lambda", "0.02", "--optimizer", "gate_adam", "--adam-betas", "(0.9,0.98)",
            "--lr", "1e-4", "--gate-lr-scale", "1000", "--lr-scheduler", "fixed",
            "--max-tokens", str(TOKENS_PER_UPDATE // workers), "--max-update", str(args.updates),
            "--log-format", "simple", "--log-interval", "10", "--no-progress-bar",
            "--no-save", "--disable-validation", "--save-dir", save_dir]


def start_variant(args, processes: int, threads: int):
    save_dir = tempfile.mkdtemp(prefix="train_parallel_")
    command = train_command(args, save_dir, processes)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if args.model == "europarl":  # as the CPU recipe runs its trainings
        env.update(allocator_env(cpu_recipe_allocator(), env))
    if processes > 1:
        quoted = " ".join(f"'{a}'" for a in command)
        command = ["torchrun", "--nproc_per_node", str(processes), "--master_port", str(free_port()),
                   "--no-python", "bash", "-c",
                   f"{quoted} --distributed-world-size {processes} --distributed-rank $RANK "
                   "--distributed-init-method env:// --distributed-no-spawn "
                   "--distributed-backend gloo --ddp-backend legacy_ddp"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return process, save_dir, time.time()


def finish_variant(started) -> dict:
    process, save_dir, start = started
    output = process.communicate()[0]
    elapsed = time.time() - start
    shutil.rmtree(save_dir, ignore_errors=True)
    if process.returncode != 0:
        sys.exit(f"train_parallel_cpu.py: fairseq-train failed:\n{output[-3000:]}")
    walls = [(int(u), int(w)) for u, w in WALL.findall(output)]
    (u0, w0), (u1, w1) = walls[0], walls[-1]
    return {"seconds_per_update": (w1 - w0) / (u1 - u0), "updates_timed": u1 - u0,
            "process_wall_seconds": elapsed}


def run_variant(args, processes: int, threads: int, side_by_side: int = 1) -> dict:
    """One round of a variant; with side_by_side > 1, that many copies at once: the mean of their
    seconds per update and the aggregate (seconds per update of the machine)."""
    runs = [finish_variant(s) for s in [start_variant(args, processes, threads) for _ in range(side_by_side)]]
    if side_by_side == 1:
        return runs[0]
    mean = sum(r["seconds_per_update"] for r in runs) / side_by_side
    return {"seconds_per_update": mean, "aggregate_seconds_per_update": mean / side_by_side, "runs": runs}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-bin", required=True)
    parser.add_argument("--checkpoint", required=True, help="a plain transformer of the recipe's size")
    parser.add_argument("--model", choices=sorted(MODELS), default="multi30k")
    parser.add_argument("--variants", help="a comma-separated subset of the variants (default: all)")
    parser.add_argument("-s", "--src", default="en")
    parser.add_argument("-t", "--tgt", default="de")
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count())
    parser.add_argument("--out", default="benchmarks/out/train_parallel_cpu.json")
    args = parser.parse_args()
    if args.updates < 30:
        parser.error("--updates must be at least 30 (updates 10 to the last are timed)")
    n = args.cores
    variants = {"1proc-1thread": (1, 1, 1), f"1proc-{n}threads": (1, n, 1), f"{n}proc-1thread": (n, 1, 1),
                f"{n}chains-1thread": (1, 1, n)}
    if args.variants:
        unknown = set(args.variants.split(",")) - set(variants)
        if unknown:
            parser.error(f"--variants: {', '.join(sorted(unknown))} not among {', '.join(variants)}")
        variants = {name: variants[name] for name in args.variants.split(",")}
    rounds = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            rounds[name].append(run_variant(args, *variants[name]))
            print(name, rounds[name][-1], flush=True)
    best = {name: min(x["seconds_per_update"] for x in rs) for name, rs in rounds.items()}
    aggregate = {name: min(x.get("aggregate_seconds_per_update", x["seconds_per_update"]) for x in rs)
                 for name, rs in rounds.items()}
    reference = next(iter(variants))  # the speed-ups' unit: 1proc-1thread unless --variants leaves it out
    unit = reference.replace("-", "_")  # the keys as the earlier JSON spells them (speedup_over_1proc_1thread)
    single = best[reference]
    result = {
        "benchmark": "train_parallel_cpu",
        "workload": WORKLOADS[args.model] + f", from {args.checkpoint}",
        "updates": args.updates, "rounds": args.rounds, "machine": machine_info(),
        "seconds_per_update_best_round": best,
        f"speedup_over_{unit}": {name: single / s for name, s in best.items()},
        "machine_seconds_per_update_best_round": aggregate,
        f"throughput_over_{unit}": {name: single / s for name, s in aggregate.items()},
        "rounds_detail": rounds,
    }
    write_text_atomic(args.out, json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["seconds_per_update_best_round"]), json.dumps(result[f"throughput_over_{unit}"]))


if __name__ == "__main__":
    main()
