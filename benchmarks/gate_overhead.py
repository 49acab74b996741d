"""Training throughput of `gated_transformer` (all three attention types gated) relative to
fairseq's plain `transformer`: same sizes, same batches, interleaved rounds in one process.

    python benchmarks/gate_overhead.py DATA_BIN --out benchmarks/out/gate_overhead.json

DATA_BIN: a fairseq data-bin with a train split (`fairseq-heads prepare --synthetic` makes one).
Goal: gated/plain tokens per second >= 0.95.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from fairseq import options, tasks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import fairseq_heads  # noqa: E402,F401
from fairseq_heads.head_masks import write_atomic  # noqa: E402

SIZES = ["--encoder-layers", "6", "--decoder-layers", "6", "--encoder-embed-dim", "128",
         "--decoder-embed-dim", "128", "--encoder-ffn-embed-dim", "512", "--decoder-ffn-embed-dim",
         "512", "--encoder-attention-heads", "8", "--decoder-attention-heads", "8"]


def build(data_bin, src, tgt, arch, extra, max_tokens):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        data_bin, "--task", "translation_heads", "-s", src, "-t", tgt, "--arch", arch,
        "--cpu", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", str(max_tokens), "--dropout", "0.1", *SIZES, *extra])
    task = tasks.setup_task(args)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    return task, model, criterion, args


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--src", default="src")
    parser.add_argument("--tgt", default="tgt")
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps-per-round", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/out/gate_overhead.json")
    opts = parser.parse_args(argv)

    torch.manual_seed(1)
    task, plain, criterion, args = build(opts.data_bin, opts.src, opts.tgt, "transformer", [], opts.max_tokens)
    _, gated, _, _ = build(opts.data_bin, opts.src, opts.tgt, "gated_transformer",
                           ["--gated-attention", "enc-self,dec-self,enc-dec"], opts.max_tokens)
    gated.load_state_dict(plain.state_dict())
    task.load_dataset("train")
    batches = list(task.get_batch_iterator(task.dataset("train"), max_tokens=opts.max_tokens,
                                           seed=1).next_epoch_itr(shuffle=True))
    models = {"plain": plain.train(), "gated": gated.train()}
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=1e-4) for name, m in models.items()}
    tokens = {name: 0 for name in models}
    seconds = {name: 0.0 for name in models}
    per_round = {name: [] for name in models}

    def step(name, batch):
        optimizers[name].zero_grad()
        loss, _, _ = criterion(models[name], batch)
        loss.backward()
        optimizers[name].step()
        return batch["ntokens"]

    step("plain", batches[0]), step("gated", batches[0])  # warm-up
    cursor = 1
    for round_index in range(opts.rounds):
        chunk = [batches[(cursor + i) % len(batches)] for i in range(opts.steps_per_round)]
        cursor += opts.steps_per_round
        order = ("plain", "gated") if round_index % 2 == 0 else ("gated", "plain")
        for name in order:  # same batches for both, alternating who goes first
            start = time.perf_counter()
            n = sum(step(name, batch) for batch in chunk)
            elapsed = time.perf_counter() - start
            tokens[name] += n
            seconds[name] += elapsed
            per_round[name].append(n / elapsed)
    result = {
        "benchmark": "gate_overhead",
        "data_bin": os.path.abspath(opts.data_bin),
        "model_sizes": " ".join(SIZES),
        "max_tokens": opts.max_tokens, "rounds": opts.rounds, "steps_per_round": opts.steps_per_round,
        "tokens_per_second": {name: tokens[name] / seconds[name] for name in models},
        "ratio_gated_over_plain": (tokens["gated"] / seconds["gated"]) / (tokens["plain"] / seconds["plain"]),
        "per_round_ratio_median": statistics.median(g / p for g, p in zip(per_round["gated"], per_round["plain"])),
        "goal": ">= 0.95",
        "machine": machine_info(),
    }
    write_atomic(opts.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("tokens_per_second", "ratio_gated_over_plain", "per_round_ratio_median")}, indent=2))


if __name__ == "__main__":
    main()
