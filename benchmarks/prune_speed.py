"""Generation speed of physically pruned models vs the same models with masked heads.

    python benchmarks/prune_speed.py --path CHECKPOINT --data DATA_BIN --src en --tgt de \
        --profile --out benchmarks/out/prune_speed.json

For each fraction kept (default 1/2 and 1/4 of the heads of every layer, in all three attention
types; the first heads of each layer, since speed does not depend on which), the checkpoint is
pruned with `fairseq_heads.pruning`; the masked variant is the original checkpoint with the
same `--head-mask`. Both produce identical translations (checked). Two measurements, each with
the variants interleaved round by round so that machine noise hits all of them alike:

* `fairseq-generate` (beam 5, batch 64, CPU, OMP_NUM_THREADS=1) over the whole --subset:
  its own tokens/s figure (wall clock, generation only). Best round per variant.
* CPU time: the same generation in-process (fairseq's task and SequenceGenerator,
  `pruning.curve.translate`'s loop) on the first --cpu-sentences sentences, timed with
  `time.process_time()`: on a shared machine, CPU seconds are far less disturbed by other
  processes than wall-clock seconds. Median over rounds.

Next to each measured speed-up is the one predicted by FLOPs (fairseq_heads/pruning/flops.py:
every matmul of the workload) for the masked model (which computes every head) and the pruned
one. Mean source and hypothesis length come from the data and the generated token count of that
fraction. Where the measured speed-up falls short of the prediction, `--profile` (cProfile of
the in-process generation) shows where the time goes.
"""
import argparse
import cProfile
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import torch  # noqa: E402
from fairseq import checkpoint_utils  # noqa: E402

import fairseq_heads  # noqa: E402
from fairseq_heads.checkpoints import load_checkpoint  # noqa: E402
from fairseq_heads.files import write_text_atomic as write_atomic  # noqa: E402
from fairseq_heads.gating.head_masks import apply_head_mask, head_mask_to_json  # noqa: E402
from fairseq_heads.heads import heads_per_layer  # noqa: E402
from fairseq_heads.checkpoints import model_options as checkpoint_model_options  # noqa: E402
from fairseq_heads.pruning.checkpoint import prune_checkpoint  # noqa: E402
from fairseq_heads.pruning.mask_policy import GivenMask  # noqa: E402
from fairseq_heads.pruning.curve import batches  # noqa: E402
from fairseq_heads.pruning.flops import attention_widths, generation_flops  # noqa: E402

USER_DIR = os.path.dirname(os.path.abspath(fairseq_heads.__file__))
BIN_DIR = os.path.dirname(sys.executable)
TRANSLATED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
                        r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)")
# Own-time groups of the profile: where generation time goes.
PROFILE_GROUPS = {
    "matmul (linear, bmm, einsum)": ("torch._C._nn.linear", "torch.bmm", "torch.einsum", "torch.matmul"),
    "cache reordering (index_select)": ("index_select",),
    "softmax, log_softmax, layer_norm": ("softmax", "layer_norm"),
    "beam search (topk, sequence_generator, search)": ("torch.topk", "sequence_generator.py", "search.py"),
}


def uniform_mask(heads_per_type, fraction):
    """Keep the first round(H × fraction) heads of every layer."""
    return {t: torch.tensor([[h < round(n * fraction) for h in range(n)] for n in layers])
            for t, layers in heads_per_type.items()}


def fairseq_generate(args, path, extra=()):
    command = [os.path.join(BIN_DIR, "fairseq-generate"), args.data, "--path", path, "--user-dir", USER_DIR,
               "-s", args.src, "-t", args.tgt, "--gen-subset", args.subset, "--beam", str(args.beam),
               "--batch-size", str(args.batch_size), "--cpu", "--remove-bpe", "sentencepiece",
               "--scoring", "sacrebleu", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    process = subprocess.run(command, capture_output=True, text=True, env=env)
    if process.returncode != 0:
        raise RuntimeError(process.stderr[-3000:])
    output = process.stdout + process.stderr
    sentences, tokens, seconds, _, tokens_per_s = TRANSLATED.search(output).groups()
    hypotheses = sorted(line.split("\t")[0] + "\t" + line.split("\t")[2]  # id and text, no score
                        for line in process.stdout.splitlines() if line.startswith("H-"))
    return {"sentences": int(sentences.replace(",", "")), "tokens": int(tokens.replace(",", "")),
            "seconds": float(seconds), "tokens_per_s": float(tokens_per_s),
            "bleu": next((l.strip() for l in output.splitlines() if "BLEU" in l and "Generate" in l), ""),
            "hypotheses": hypotheses}


def load_variant(args, path, mask=None):
    [model], _, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": args.data, "source_lang": args.src, "target_lang": args.tgt})
    if mask is not None:
        apply_head_mask(model, mask)
    return model.eval(), task


def generate_in_process(model, task, args):
    """(generated tokens, CPU seconds, hypotheses) of the first --cpu-sentences sentences."""
    generator = task.build_generator([model], argparse.Namespace(beam=args.beam))
    tokens, hypotheses = 0, {}
    start = time.process_time()
    with torch.no_grad():
        for sample in batches(task, args.subset, model, args.batch_size, args.cpu_sentences):
            for i, hypos in zip(sample["id"].tolist(), task.inference_step(generator, [model], sample)):
                tokens += hypos[0]["tokens"].numel()
                hypotheses[i] = hypos[0]["tokens"].tolist()
    return tokens, time.process_time() - start, hypotheses


def profile(model, task, args):
    profiler = cProfile.Profile()
    profiler.enable()
    generate_in_process(model, task, argparse.Namespace(**dict(vars(args), cpu_sentences=args.profile_sentences)))
    profiler.disable()
    rows = [{"function": f"{os.path.basename(filename)}:{name}", "calls": calls, "own_s": own,
             "cumulative_s": cumulative}
            for (filename, _, name), (_, calls, own, cumulative, _) in pstats.Stats(profiler).stats.items()]
    total = sum(r["own_s"] for r in rows)
    groups = {label: sum(r["own_s"] for r in rows if any(k in r["function"] for k in keys))
              for label, keys in PROFILE_GROUPS.items()}
    groups["everything else (Python: modules, views, hooks, ...)"] = total - sum(groups.values())
    rows.sort(key=lambda r: -r["own_s"])
    return {"total_own_s": round(total, 2), "sentences": args.profile_sentences,
            "share_of_time": {k: round(v / total, 3) for k, v in groups.items()},
            "seconds": {k: round(v, 2) for k, v in groups.items()},
            "top_own_time": [dict(r, own_s=round(r["own_s"], 3), cumulative_s=round(r["cumulative_s"], 3))
                             for r in rows[:12]]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True, help="checkpoint (transformer or gated_transformer)")
    parser.add_argument("--data", required=True, help="data-bin with the --subset split")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--fractions", default="0.5,0.25")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="fairseq-generate rounds (default %(default)s)")
    parser.add_argument("--cpu-rounds", type=int, default=3, help="in-process CPU-time rounds (default %(default)s)")
    parser.add_argument("--cpu-sentences", type=int, default=300)
    parser.add_argument("--profile", action="store_true", help="cProfile the variants of the smallest fraction")
    parser.add_argument("--profile-sentences", type=int, default=64)
    parser.add_argument("--out", default="benchmarks/out/prune_speed.json")
    parser.add_argument("--work-dir", default=None, help="pruned checkpoints and masks (default: a temp dir)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    fractions = [float(x) for x in args.fractions.split(",")]
    work = args.work_dir or tempfile.mkdtemp(prefix="prune_speed-")
    os.makedirs(work, exist_ok=True)

    state = load_checkpoint(args.path)
    options = checkpoint_model_options(state)
    original, task = load_variant(args, args.path)
    heads = heads_per_layer(original)
    variants = {}  # name -> (checkpoint, fairseq-generate extra args, mask for in-process)
    for fraction in fractions:
        mask = uniform_mask(heads, fraction)
        mask_path = os.path.join(work, f"mask_{fraction}.json")
        write_atomic(mask_path, json.dumps(head_mask_to_json(mask)))
        pruned_path = os.path.join(work, f"pruned_{fraction}.pt")
        prune_checkpoint(args.path, pruned_path, GivenMask(mask))
        variants[f"masked_{fraction}"] = (args.path, ["--task", "translation_heads", "--head-mask", mask_path], mask)
        variants[f"pruned_{fraction}"] = (pruned_path, [], None)

    # 1. CPU time in-process, interleaved.
    loaded = {name: load_variant(args, path, mask) for name, (path, _, mask) in variants.items()}
    cpu = {name: [] for name in variants}
    for round_index in range(args.cpu_rounds):
        for name in (list(variants) if round_index % 2 == 0 else list(reversed(variants))):
            tokens, seconds, hypotheses = generate_in_process(*loaded[name], args)
            cpu[name].append({"tokens": tokens, "cpu_seconds": seconds, "hypotheses": hypotheses})
            print(f"cpu round {round_index} {name:>14}: {tokens / seconds:8.1f} tokens/CPU-s", flush=True)

    # 2. fairseq-generate, interleaved.
    runs = {name: [] for name in variants}
    for round_index in range(args.rounds):
        for name in (list(variants) if round_index % 2 == 0 else list(reversed(variants))):
            path, extra, _ = variants[name]
            runs[name].append(fairseq_generate(args, path, extra))
            print(f"fairseq-generate round {round_index} {name:>14}: "
                  f"{runs[name][-1]['tokens_per_s']:8.1f} tokens/s ({runs[name][-1]['seconds']:.1f}s)", flush=True)

    from fairseq.data import data_utils
    source = data_utils.load_indexed_dataset(  # keep it referenced: sizes is a view of its memory map
        os.path.join(args.data, f"{args.subset}.{args.src}-{args.tgt}.{args.src}"), None)
    results = []
    for fraction in fractions:
        masked, pruned = f"masked_{fraction}", f"pruned_{fraction}"
        run = runs[masked][0]
        workload = dict(d=options.encoder_embed_dim, f=options.encoder_ffn_embed_dim,
                        vocab=state["model"]["decoder.embed_tokens.weight"].size(0), beam=args.beam,
                        src_len=float(source.sizes.mean()), hyp_len=run["tokens"] / run["sentences"],
                        encoder_layers=options.encoder_layers, decoder_layers=options.decoder_layers)
        flops = {masked: generation_flops(attention_widths(original), **workload),
                 pruned: generation_flops(attention_widths(loaded[pruned][0]), **workload)}
        predicted = flops[masked] / flops[pruned]
        cpu_tps = {n: statistics.median(r["tokens"] / r["cpu_seconds"] for r in cpu[n]) for n in (masked, pruned)}
        wall_tps = {n: max(r["tokens_per_s"] for r in runs[n]) for n in (masked, pruned)}
        cpu_speedup = cpu_tps[pruned] / cpu_tps[masked]
        wall_speedup = wall_tps[pruned] / wall_tps[masked]
        results.append({
            "fraction_kept": fraction,
            "heads_kept": sum(sum(round(n * fraction) for n in layers) for layers in heads.values()),
            "predicted_speedup_flops": round(predicted, 3),
            "cpu_time": {"tokens_per_cpu_s": {n: [round(r["tokens"] / r["cpu_seconds"], 1) for r in cpu[n]]
                                              for n in (masked, pruned)},
                         "speedup_median": round(cpu_speedup, 3),
                         "measured_over_predicted": round(cpu_speedup / predicted, 3)},
            "fairseq_generate": {"tokens_per_s": {n: [r["tokens_per_s"] for r in runs[n]] for n in (masked, pruned)},
                                 "seconds": {n: [r["seconds"] for r in runs[n]] for n in (masked, pruned)},
                                 "speedup_best_rounds": round(wall_speedup, 3),
                                 "measured_over_predicted": round(wall_speedup / predicted, 3)},
            "flops_per_sentence": flops,
            "workload": workload,
            "same_translations": (runs[masked][0]["hypotheses"] == runs[pruned][0]["hypotheses"]
                                  and cpu[masked][0]["hypotheses"] == cpu[pruned][0]["hypotheses"]),
            "bleu": {n: runs[n][0]["bleu"] for n in (masked, pruned)},
        })
        print(f"kept {fraction}: CPU-time speed-up {cpu_speedup:.2f}x, fairseq-generate {wall_speedup:.2f}x, "
              f"FLOP-predicted {predicted:.2f}x, same translations: {results[-1]['same_translations']}")

    report = {"checkpoint": args.path, "data": args.data, "subset": args.subset,
              "fairseq_generate_sentences": runs[next(iter(runs))][0]["sentences"],
              "cpu_time_sentences": args.cpu_sentences, "beam": args.beam, "batch_size": args.batch_size,
              "threads": 1, "rounds": args.rounds, "cpu_rounds": args.cpu_rounds, "results": results,
              "machine": dict(machine_info(), torch_threads=torch.get_num_threads(),
                              load_average=os.getloadavg())}
    if args.profile:
        fraction = fractions[-1]
        report["profile"] = {n: profile(*loaded[n], args) for n in (f"masked_{fraction}", f"pruned_{fraction}")}
        for name, p in report["profile"].items():
            print(name, json.dumps(p["seconds"]))
    write_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
