"""An encoder-only L0 training step (--freeze-decoder) with the output projection's input made
contiguous (GatedTransformerDecoder.output_layer) against without (as before), side by side in
one process, beside the same model with a trainable decoder.

    python benchmarks/frozen_decoder_step.py [--out benchmarks/results/frozen_decoder_step_cpu.json]
                                             [--threads 2] [--rounds 5] [--autocast bf16]

The model is the Europarl CPU recipe's (EUROPARL_CPU: 6+6 layers x 8 heads, d 256, FFN 1,024,
shared embeddings of 16,000 pieces, pre-norm), encoder self-attention gated; one step is a
forward and backward of the label-smoothed loss on a synthetic batch of 110 sentence pairs of 35
tokens (about the recipe's 4,096-token batches), train mode, under --autocast as the task runs it.
Variants run in interleaved rounds whose order rotates; the speed-up is the ratio of summed times.

Why: with the decoder frozen, the shared embedding (the output projection's weight) takes no
gradient, and torch's matmul then folds fairseq's transposed (B, T, C) decoder output into one mm
only if it is contiguous; otherwise it broadcasts the vocabulary-sized weight into a bmm.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import torch
from fairseq import options, tasks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import fairseq_heads  # noqa: E402,F401
from fairseq_heads.files import write_text_atomic  # noqa: E402
from fairseq_heads.precision import autocast  # noqa: E402

VOCAB, BATCH, LENGTH = 16000, 110, 35
SIZES = ["--encoder-layers", "6", "--decoder-layers", "6", "--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
         "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "8",
         "--decoder-attention-heads", "8", "--share-all-embeddings", "--encoder-normalize-before",
         "--decoder-normalize-before", "--dropout", "0.1"]


def build(data_dir: str, freeze: bool):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        data_dir, "--task", "translation_heads", "--arch", "gated_transformer", "-s", "src", "-t", "tgt",
        "--user-dir", os.path.dirname(fairseq_heads.__file__), "--cpu", "--gated-attention", "enc-self",
        *SIZES, *(["--freeze-decoder"] if freeze else [])])
    return tasks.setup_task(args).build_model(args).train()


def transposed_output_layer(decoder):
    """The output layer as it was: the projection of fairseq's transposed features."""
    def output_layer(features):
        return decoder.output_projection(features)
    return output_layer


def step(model, batch, precision: str) -> float:
    src, lengths, prev, target = batch
    start = time.perf_counter()
    with autocast(precision, "cpu", backward=True):
        logits, _ = model(src, lengths, prev)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, VOCAB), target.view(-1), label_smoothing=0.1)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/frozen_decoder_step_cpu.json")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--autocast", default="bf16", choices=("none", "bf16"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as data_dir:
        for lang in ("src", "tgt"):
            with open(os.path.join(data_dir, f"dict.{lang}.txt"), "w") as f:
                f.writelines(f"w{i} {VOCAB - i}\n" for i in range(VOCAB - 4))
        torch.manual_seed(0)
        models = {"frozen_contiguous": build(data_dir, True), "frozen_transposed": build(data_dir, True),
                  "trainable_decoder": build(data_dir, False)}
    models["frozen_transposed"].decoder.output_layer = transposed_output_layer(models["frozen_transposed"].decoder)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, VOCAB, (BATCH, LENGTH), generator=g)
    prev = torch.randint(4, VOCAB, (BATCH, LENGTH), generator=g)
    batch = (src, torch.full((BATCH,), LENGTH), prev, torch.randint(4, VOCAB, (BATCH, LENGTH), generator=g))
    for model in models.values():
        step(model, batch, args.autocast)  # warm-up
    names, times = list(models), {name: [] for name in models}
    for round_index in range(args.rounds):
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        for name in order:
            times[name].append(step(models[name], batch, args.autocast))
    total = {name: sum(t) for name, t in times.items()}
    report = {
        "benchmark": "frozen_decoder_step", "machine": machine_info(), "threads": args.threads,
        "autocast": args.autocast, "rounds": args.rounds, "batch": {"sentences": BATCH, "tokens_each": LENGTH},
        "seconds_per_step": {name: round(total[name] / args.rounds, 4) for name in names},
        "per_round": {name: [round(t, 4) for t in ts] for name, ts in times.items()},
        "speedup_contiguous_over_transposed": round(total["frozen_transposed"] / total["frozen_contiguous"], 3),
        "frozen_contiguous_over_trainable_decoder": round(total["trainable_decoder"] / total["frozen_contiguous"], 3),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: report[k] for k in ("seconds_per_step", "speedup_contiguous_over_transposed",
                                             "frozen_contiguous_over_trainable_decoder")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
