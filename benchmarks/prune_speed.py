"""Generation speed of physically pruned models vs the same models with masked heads.

    python benchmarks/prune_speed.py --path CHECKPOINT --data DATA_BIN --src en --tgt de \
        --out benchmarks/out/prune_speed.json

For each fraction kept (default 1/2 and 1/4 of the heads of every layer, in all three attention
types; the first heads of each layer, since speed does not depend on which), the checkpoint is
pruned with `fairseq_heads.pruning` and both variants are timed with `fairseq-generate`
(beam 5, batched, CPU, one thread), runs interleaved round by round so that machine noise hits
all variants alike. tokens/s is fairseq-generate's own figure (generation only, no loading).

Next to each measured speed-up is the one predicted by FLOPs: every matmul of the workload,
counted for the masked model (which computes every head) and the pruned one:
  encoder, per source token:  q/k/v/out projections 4·d·a, scores and context 2·S·a, FFN 2·d·f
  decoder, per step and hypothesis (incremental): self-attention 4·d·a + 2·t·a,
      encoder-decoder attention 2·d·a (q, out) + 2·S·a (+ its k/v, 2·d·a per source token,
      once per hypothesis), FFN 2·d·f, output projection d·V
with a = kept heads × head dim (0 for a layer without heads), d model dim, f FFN dim, V vocab,
S source length, t target position; ×2 FLOPs per multiply-add. Mean S and hypothesis length T
come from the data and the generated token count. Softmax, layer norms, embeddings and beam
bookkeeping are not matmuls and are not counted: where the measured speed-up falls short of the
prediction, `--profile` shows where the time goes.
"""
import argparse
import cProfile
import json
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import torch  # noqa: E402

import fairseq_heads  # noqa: E402
from fairseq_heads.head_masks import head_mask_to_json, model_head_shape, write_atomic  # noqa: E402
from fairseq_heads.modules.gated_attention import iter_attention  # noqa: E402
from fairseq_heads.pruning.checkpoint import (  # noqa: E402
    build_model_from_state,
    checkpoint_model_options,
    prune_checkpoint,
)
from fairseq_heads.compat import load_checkpoint  # noqa: E402

USER_DIR = os.path.dirname(os.path.abspath(fairseq_heads.__file__))
BIN_DIR = os.path.dirname(sys.executable)
TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
                        r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")


def uniform_mask(heads_per_type, fraction):
    """Keep the first round(H × fraction) heads of every layer."""
    return {t: torch.tensor([[h < round(n * fraction) for h in range(n)] for n in layers])
            for t, layers in heads_per_type.items()}


def generate(data, path, src, tgt, subset, shards, beam, batch_size, extra=()):
    command = [os.path.join(BIN_DIR, "fairseq-generate"), data, "--path", path, "--user-dir", USER_DIR,
               "-s", src, "-t", tgt, "--gen-subset", subset, "--beam", str(beam), "--batch-size",
               str(batch_size), "--cpu", "--num-shards", str(shards), "--shard-id", "0",
               "--remove-bpe", "sentencepiece", "--scoring", "sacrebleu", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    process = subprocess.run(command, capture_output=True, text=True, env=env)
    if process.returncode != 0:
        raise RuntimeError(process.stderr[-3000:])
    output = process.stdout + process.stderr
    match = TRANSLATED.search(output)
    sentences, tokens, seconds, _, tokens_per_s = match.groups()
    bleu = next((line for line in output.splitlines() if "BLEU" in line and "Generate" in line), "")
    hypotheses = sorted(line.split("\t")[0] + "\t" + line.split("\t")[2]  # id and text, no score
                        for line in process.stdout.splitlines() if line.startswith("H-"))
    ids = [int(line.split("\t")[0][2:]) for line in process.stdout.splitlines() if line.startswith("S-")]
    return {"ids": ids, "sentences": int(sentences.replace(",", "")), "tokens": int(tokens.replace(",", "")),
            "seconds": float(seconds), "tokens_per_s": float(tokens_per_s), "bleu_line": bleu.strip(),
            "hypotheses": hypotheses}


def layer_dims(model):
    """[(type, kept heads × head dim)] for every attention block."""
    return [(t, attention.num_heads * attention.head_dim) for t, _, attention in iter_attention(model)]


def generation_flops(dims, d, f, vocab, beam, src_len, hyp_len, encoder_layers, decoder_layers):
    """Matmul FLOPs of translating one sentence (see the module docstring)."""
    mult = 2
    enc = sum(4 * d * a + 2 * src_len * a for t, a in dims if t == "enc-self") * src_len
    enc += encoder_layers * 2 * d * f * src_len
    dec = 0.0
    for step in range(1, int(round(hyp_len)) + 1):
        dec += sum(4 * d * a + 2 * step * a for t, a in dims if t == "dec-self")
        dec += sum(2 * d * a + 2 * src_len * a for t, a in dims if t == "enc-dec")
        dec += decoder_layers * 2 * d * f + d * vocab
    dec += sum(2 * d * a * src_len for t, a in dims if t == "enc-dec")  # static k/v, once
    return mult * (enc + beam * dec)


def profile_generation(checkpoint, mask_path, args):
    """cProfile of in-process generation (fairseq's task + SequenceGenerator) of a few batches."""
    from fairseq import checkpoint_utils

    from fairseq_heads.head_masks import apply_head_mask, load_head_mask
    from fairseq_heads.pruning.curve import translate

    torch.set_num_threads(1)
    [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": args.data, "source_lang": args.src, "target_lang": args.tgt})
    if mask_path:
        apply_head_mask(model, load_head_mask(mask_path))
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    translate(model, task, args.subset, beam=args.beam, batch_size=args.batch_size,
              limit=args.profile_sentences)
    profiler.disable()
    total = time.perf_counter() - start
    rows = sorted(({"function": f"{os.path.basename(filename)}:{name}", "calls": calls,
                    "own_s": round(own, 3), "cumulative_s": round(cumulative, 3)}
                   for (filename, _, name), (_, calls, own, cumulative, _) in pstats.Stats(profiler).stats.items()),
                  key=lambda r: -r["own_s"])
    cumulative = {r["function"]: r["cumulative_s"] for r in rows}
    return {"seconds": round(total, 2), "sentences": args.profile_sentences, "top_own_time": rows[:15],
            "cumulative_s": {name: cumulative.get(name) for name in (
                "sequence_generator.py:_generate", "transformer_encoder.py:forward_scriptable",
                "transformer_decoder.py:extract_features_scriptable", "multihead_attention.py:forward",
                "transformer_layer.py:forward", "linear.py:forward", "search.py:step",
                "sequence_generator.py:finalize_hypos", "multihead_attention.py:reorder_incremental_state")}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True, help="checkpoint (transformer or gated_transformer)")
    parser.add_argument("--data", required=True, help="data-bin with the --subset split")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--shards", type=int, default=3,
                        help="translate shard 0 of this many (every n-th batch: ~1/n of the sentences; "
                             "default %(default)s)")
    parser.add_argument("--fractions", default="0.5,0.25")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="also cProfile the pruned and masked models")
    parser.add_argument("--profile-sentences", type=int, default=64)
    parser.add_argument("--out", default="benchmarks/out/prune_speed.json")
    parser.add_argument("--work-dir", default=None, help="where pruned checkpoints and masks go (default: a temp dir)")
    args = parser.parse_args(argv)
    fractions = [float(x) for x in args.fractions.split(",")]
    work = args.work_dir or tempfile.mkdtemp(prefix="prune_speed-")
    os.makedirs(work, exist_ok=True)

    state = load_checkpoint(args.path)
    options = checkpoint_model_options(state)
    model = build_model_from_state(state, options)
    heads = model_head_shape(model)
    variants = {}
    for fraction in fractions:
        mask = uniform_mask(heads, fraction)
        mask_path = os.path.join(work, f"mask_{fraction}.json")
        write_atomic(mask_path, json.dumps(head_mask_to_json(mask)))
        pruned_path = os.path.join(work, f"pruned_{fraction}.pt")
        prune_checkpoint(args.path, pruned_path, lambda _, mask=mask: mask)
        variants[f"masked_{fraction}"] = (args.path, ["--task", "translation_heads", "--head-mask", mask_path])
        variants[f"pruned_{fraction}"] = (pruned_path, [])

    runs = {name: [] for name in variants}
    for round_index in range(args.rounds):
        names = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for name in names:
            path, extra = variants[name]
            result = generate(args.data, path, args.src, args.tgt, args.subset, args.shards,
                              args.beam, args.batch_size, extra)
            runs[name].append(result)
            print(f"round {round_index} {name:>14}: {result['tokens_per_s']:8.1f} tokens/s "
                  f"({result['seconds']:.1f}s)", flush=True)

    # Workload statistics for the FLOP model.
    data_source = runs[next(iter(runs))][0]
    from fairseq.data import data_utils
    src_sizes = data_utils.load_indexed_dataset(
        os.path.join(args.data, f"{args.subset}.{args.src}-{args.tgt}.{args.src}"), None).sizes
    src_len = float(src_sizes[data_source["ids"]].mean())  # fairseq shards batches: use the ids seen
    hyp_len = data_source["tokens"] / data_source["sentences"]
    d = options.encoder_embed_dim
    vocab = state["model"]["decoder.embed_tokens.weight"].size(0)
    sizes = dict(d=d, f=options.encoder_ffn_embed_dim, vocab=vocab, beam=args.beam, src_len=src_len,
                 hyp_len=hyp_len, encoder_layers=options.encoder_layers, decoder_layers=options.decoder_layers)
    full_flops = generation_flops(layer_dims(model), **sizes)

    results = []
    for fraction in fractions:
        masked, pruned = runs[f"masked_{fraction}"], runs[f"pruned_{fraction}"]
        masked_tps = max(r["tokens_per_s"] for r in masked)  # best of rounds: least disturbed
        pruned_tps = max(r["tokens_per_s"] for r in pruned)
        pruned_state = load_checkpoint(variants[f"pruned_{fraction}"][0])
        pruned_model = build_model_from_state(pruned_state, checkpoint_model_options(pruned_state))
        pruned_flops = generation_flops(layer_dims(pruned_model), **sizes)
        measured = pruned_tps / masked_tps
        predicted = full_flops / pruned_flops
        results.append({
            "fraction_kept": fraction,
            "tokens_per_s": {"masked": [r["tokens_per_s"] for r in masked],
                             "pruned": [r["tokens_per_s"] for r in pruned]},
            "seconds": {"masked": [r["seconds"] for r in masked], "pruned": [r["seconds"] for r in pruned]},
            "measured_speedup": round(measured, 3),
            "flops_per_sentence": {"masked": full_flops, "pruned": pruned_flops},
            "predicted_speedup": round(predicted, 3),
            "measured_over_predicted": round(measured / predicted, 3),
            "same_hypotheses": masked[0]["hypotheses"] == pruned[0]["hypotheses"],
            "bleu": {"masked": masked[0]["bleu_line"], "pruned": pruned[0]["bleu_line"]},
        })
        print(f"kept {fraction}: measured {measured:.2f}x, FLOP-predicted {predicted:.2f}x, "
              f"same hypotheses: {results[-1]['same_hypotheses']}")

    report = {"checkpoint": args.path, "data": args.data, "subset": args.subset,
              "sentences": data_source["sentences"], "beam": args.beam, "batch_size": args.batch_size,
              "threads": 1, "rounds": args.rounds, "workload": sizes, "results": results,
              "machine": dict(machine_info(), torch_threads=1)}
    if args.profile:  # the smallest fraction, where the gap to the FLOP prediction is largest
        fraction = fractions[-1]
        report["profile"] = {
            f"masked_{fraction}": profile_generation(args.path, os.path.join(work, f"mask_{fraction}.json"), args),
            f"pruned_{fraction}": profile_generation(variants[f"pruned_{fraction}"][0], None, args)}
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
