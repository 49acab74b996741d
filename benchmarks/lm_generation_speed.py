"""Incremental generation speed of physically pruned language models at a long context.

    python benchmarks/lm_generation_speed.py DATA_BIN --path CHECKPOINT --scores HEADS.csv \
        --keep 12,6 --context 512 --out benchmarks/results/lm_generation_speed_cpu.json

The checkpoint (a plain or gated `transformer_lm`) is pruned with `fairseq-heads prune
--from-importance HEADS.csv --keep K` for each K (so layers keep different numbers of heads, as
real pruning does); the reference is the same checkpoint pruned with K = every head, which runs
through the same gated classes (and, beside it, the unpruned checkpoint as fairseq builds it).

Workload: a batch of --batch-size prompts of --context tokens cut from the --subset split is run
through the decoder once (filling fairseq's incremental state), then --steps greedy tokens are
generated one at a time with `model.decoder(tokens, incremental_state=...)`: exactly the
per-token work of `fairseq-interactive`/`SequenceGenerator` without the beam bookkeeping. Only the
--steps incremental steps are timed, with `time.process_time()` (CPU seconds: on a shared machine
far less disturbed by other processes than wall-clock), one thread, variants interleaved round by
round; the median over rounds is reported.

The FLOP prediction counts every matmul of one incremental step at context t, per sequence:
    per layer l: q/k/v/out projections 4·d·a_l + scores and context 2·t·a_l + FFN 2·d·f
    output projection d·V
with a_l = kept heads × head dim of layer l, d model dim, f FFN dim, V vocabulary; ×2 FLOPs per
multiply-add, summed over the --steps positions. Layer norms, softmax, embeddings and Python
overhead are not matmuls and are not counted. Two ratios are reported: measured speed-up /
predicted speed-up, and the realised share of the predicted saving,
(1 - 1/measured) / (1 - 1/predicted), which is the stricter reading when the prediction is small.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import torch  # noqa: E402
from fairseq import checkpoint_utils  # noqa: E402
from fairseq.data import Dictionary, data_utils  # noqa: E402

import fairseq_heads  # noqa: E402,F401  (registers the gated architectures)
from fairseq_heads.files import write_text_atomic  # noqa: E402

BIN = os.path.dirname(sys.executable)


def load(path, data_bin):
    [model], _, _ = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_bin})
    return model.eval()


def attention_widths(model):
    """Kept heads × head dim of each decoder layer (0 for a layer left without heads)."""
    widths = []
    for layer in model.decoder.layers:
        attention = layer.self_attn
        widths.append(attention.num_heads * attention.head_dim)
    return widths


def step_flops(widths, d, f, vocab, context, steps):
    """Matmul FLOPs of `steps` incremental steps starting at `context` (module docstring)."""
    total = 0
    for t in range(context + 1, context + steps + 1):
        total += sum(4 * d * a + 2 * t * a + 2 * d * f for a in widths) + d * vocab
    return 2 * total


def prompts(data_bin, subset, batch_size, context):
    """batch_size × context token ids: consecutive blocks of the subset's token stream."""
    dictionary = Dictionary.load(os.path.join(data_bin, "dict.txt"))
    dataset = data_utils.load_indexed_dataset(os.path.join(data_bin, subset), dictionary)
    stream, needed = [], batch_size * context
    for i in range(len(dataset)):
        stream.extend(dataset[i].tolist())
        if len(stream) >= needed:
            break
    if len(stream) < needed:
        raise SystemExit(f"{subset}: {len(stream)} tokens, fewer than batch size × context = {needed}")
    return torch.tensor(stream[:needed]).view(batch_size, context)


def generate(model, prompt, steps):
    """(CPU seconds of the incremental steps, generated tokens) for greedy decoding."""
    state = {}
    with torch.no_grad():
        logits, _ = model.decoder(prompt, incremental_state=state)
        tokens = torch.cat([prompt, logits[:, -1:].argmax(-1)], 1)
        start = time.process_time()
        for _ in range(steps - 1):
            logits, _ = model.decoder(tokens, incremental_state=state)
            tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], 1)
        seconds = time.process_time() - start
    return seconds, tokens[:, prompt.size(1):]


def prune(path, scores, metric, keep, out):
    command = [os.path.join(BIN, "fairseq-heads"), "prune", "--path", path, "--out", out,
               "--from-importance", scores, "--metric", metric, "--keep", str(keep)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"prune failed: {result.stderr.strip()[-500:]}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--path", required=True, help="a transformer_lm or gated_transformer_lm checkpoint")
    parser.add_argument("--scores", required=True, help="heads.csv of `fairseq-heads stats` on that model")
    parser.add_argument("--metric", default="lrp")
    parser.add_argument("--keep", default="12,6", help="comma list of head budgets (default %(default)s)")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--batch-sizes", default="1,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    work = tempfile.mkdtemp(prefix="lm_generation_speed.")
    full = load(args.path, args.data_bin)
    total_heads = sum(layer.self_attn.num_heads for layer in full.decoder.layers)
    budgets = [total_heads] + [int(k) for k in args.keep.split(",")]
    variants = {"unpruned (fairseq build)": full}
    for keep in budgets:
        out = os.path.join(work, f"keep{keep}.pt")
        prune(args.path, args.scores, args.metric, keep, out)
        variants[f"pruned keep {keep}"] = load(out, args.data_bin)
    reference = f"pruned keep {total_heads}"
    d = full.decoder.embed_dim
    f = full.decoder.layers[0].fc1.out_features
    vocab = full.decoder.output_projection.out_features

    results = []
    for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
        prompt = prompts(args.data_bin, args.subset, batch_size, args.context)
        seconds = {name: [] for name in variants}
        outputs = {}
        for round_index in range(args.rounds):
            order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
            for name in order:
                cpu, outputs[name] = generate(variants[name], prompt, args.steps)
                seconds[name].append(cpu)
            print(f"batch {batch_size} round {round_index}: " +
                  ", ".join(f"{n} {seconds[n][-1]:.2f}s" for n in variants), flush=True)
        tokens = batch_size * (args.steps - 1)
        median = {name: statistics.median(values) for name, values in seconds.items()}
        flops = {name: batch_size * step_flops(attention_widths(model), d, f, vocab, args.context + 1,
                                               args.steps - 1)
                 for name, model in variants.items()}
        for name, model in variants.items():
            measured = median[reference] / median[name]
            predicted = flops[reference] / flops[name]
            saving = (1 - 1 / measured) / (1 - 1 / predicted) if predicted > 1 else None
            results.append({
                "batch_size": batch_size, "variant": name,
                "heads_kept": sum(layer.self_attn.num_heads for layer in model.decoder.layers),
                "heads_per_layer": [layer.self_attn.num_heads for layer in model.decoder.layers],
                "tokens_per_cpu_s_median": round(tokens / median[name], 1),
                "cpu_seconds_all_rounds": [round(s, 3) for s in seconds[name]],
                "speedup_vs_reference": round(measured, 3),
                "predicted_speedup_flops": round(predicted, 3),
                "measured_over_predicted": round(measured / predicted, 3),
                "share_of_predicted_saving": None if saving is None else round(saving, 3),
                "flops": flops[name],
                "same_continuation_as_reference": None if name == reference
                else bool(torch.equal(outputs[name], outputs[reference])),
            })
            print(f"  {name:>26}: {tokens / median[name]:7.1f} tok/CPU-s, speed-up {measured:.3f} "
                  f"(FLOPs {predicted:.3f})", flush=True)

    report = {"checkpoint": args.path, "data": args.data_bin, "subset": args.subset, "scores": args.scores,
              "metric": args.metric, "context": args.context, "steps": args.steps, "rounds": args.rounds,
              "reference": reference, "model": {"d": d, "ffn": f, "vocab": vocab,
                                                "layers": len(full.decoder.layers), "heads": total_heads},
              "results": results,
              "note": "same_continuation_as_reference is only expected for the unpruned build; pruning "
                      "changes the model, so its greedy tokens may differ",
              "machine": dict(machine_info(), torch_threads=torch.get_num_threads(),
                              load_average=os.getloadavg())}
    write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
