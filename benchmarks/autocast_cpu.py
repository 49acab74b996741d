"""bf16 autocast against fp32 on this CPU, side by side in one run: training, `stats` and generation.

    python benchmarks/autocast_cpu.py --data-bin RESULTS/data/bin [--src en --tgt it]
        [--updates 60] [--rounds 2] [--threads 1] [--checkpoint TRAINED.pt]   # --rounds 0: training alone
        [--out benchmarks/results/autocast_cpu_europarl.json]

The workload is the `europarl_en_it --scale cpu` recipe's baseline (fairseq_heads/pipeline/recipes.py:
6+6 layers pre-norm, d=256, 8 heads of 32, FFN 1,024, Adam, 4,096-token batches of the Europarl train
set), once in fp32 and once under `--autocast bf16` (fairseq_heads/precision.py), from the same initial
weights on the same batches. Measured:

  train     one process holds the models and alternates them update by update (fp32 update k, bf16
            update k, ...), so that load from other processes on a shared machine falls on all
            alike: each variant's target tokens/s over the updates after the first 5 (its median
            update time), and the models' valid loss after the same updates, in fp32 to 6 decimals
            (they should differ by bf16 rounding only). A third variant, `bf16_flash`, is bf16
            autocast with torch's own choice of SDPA kernel (its CPU flash kernel), which the tool's
            training steps avoid (precision.sdpa_backends): the gain of that choice, side by side;
  stats     seconds of `fairseq-heads stats` (confidence, positional, rare: the functions' forward
            pass) on the valid set, each precision in turn for --rounds rounds, and the largest
            difference of a head's confidence between the two;
  generate  seconds of fairseq-generate (beam 5) on the valid set, its sacreBLEU and hypothesis
            length, likewise.

The analysis runs on --checkpoint (a trained model: an untrained one's bf16 and fp32 hypotheses
differ in length, so their decoding times are not like for like), else on the fp32 model of the
training part.

Each variant's stats and generate figure is its fastest round. The verdict says whether bf16 is
faster; the JSON keeps the machine's CPU flags (amx_bf16, avx512_bf16: the units bf16 autocast uses).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

import fairseq_heads  # noqa: E402
from fairseq_heads.files import write_text_atomic  # noqa: E402

USER_DIR = os.path.dirname(os.path.abspath(fairseq_heads.__file__))
BIN = os.path.dirname(sys.executable)
VARIANTS = ("none", "bf16")  # --autocast's values: the analysis compares these
TRAIN_VARIANTS = VARIANTS + ("bf16_flash",)  # bf16 autocast, torch's SDPA kernel choice
SIZE = ["--encoder-normalize-before", "--decoder-normalize-before",
        "--encoder-layers", 6, "--decoder-layers", 6, "--encoder-embed-dim", 256, "--decoder-embed-dim", 256,
        "--encoder-ffn-embed-dim", 1024, "--decoder-ffn-embed-dim", 1024, "--encoder-attention-heads", 8,
        "--decoder-attention-heads", 8, "--share-all-embeddings"]


def run(argv, env, log):
    with open(log, "w") as out:
        subprocess.run([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT, env=env, check=True)


def train_side_by_side(args, work: str) -> dict:
    """Both precisions' models, alternating update by update on the same batches (module docstring);
    the fp32 model is saved for the analysis."""
    import copy
    import statistics

    import torch
    from fairseq import options, optim, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_heads.precision import autocast

    torch.set_num_threads(args.threads)
    parser = options.get_training_parser()
    namespace = options.parse_args_and_arch(parser, [str(a) for a in [
        args.data_bin, "--user-dir", USER_DIR, "--task", "translation_heads", "-s", args.src, "-t", args.tgt, "--cpu",
        "--arch", "transformer", *SIZE, "--dropout", 0.1, "--label-smoothing", 0.1,
        "--criterion", "label_smoothed_cross_entropy", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
        "--lr", 5e-4, "--max-tokens", 4096, "--seed", 1]])
    cfg = convert_namespace_to_omegaconf(namespace)
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    torch.manual_seed(1)
    models = {"none": task.build_model(cfg.model)}
    for variant in TRAIN_VARIANTS[1:]:
        models[variant] = copy.deepcopy(models["none"])
    criterion = task.build_criterion(cfg.criterion)
    optimizers = {v: optim.build_optimizer(cfg.optimizer, list(m.parameters())) for v, m in models.items()}
    iterator = task.get_batch_iterator(task.dataset("train"), max_tokens=4096, seed=1,
                                       max_positions=(256, 256)).next_epoch_itr(shuffle=True)
    seconds = {v: [] for v in TRAIN_VARIANTS}
    tokens = []
    for update, sample in zip(range(args.updates), iterator):
        tokens.append(int(sample["ntokens"]))
        for variant in (TRAIN_VARIANTS if update % 2 == 0 else tuple(reversed(TRAIN_VARIANTS))):
            model, optimizer = models[variant], optimizers[variant]
            model.train()
            torch.manual_seed(update)  # the same dropout masks' seed for every variant
            start = time.perf_counter()
            optimizer.zero_grad()
            # as the *_heads tasks' train_step: a pass with a backward (bf16_flash: without the SDPA hold)
            context = (torch.autocast("cpu", dtype=torch.bfloat16) if variant == "bf16_flash"
                       else autocast(variant, "cpu", backward=True))
            with context:
                loss, _, _ = criterion(model, sample)
            optimizer.backward(loss)
            optimizer.step()
            seconds[variant].append(time.perf_counter() - start)
    checkpoint = os.path.join(work, "fp32.pt")
    state = {"cfg": cfg, "model": models["none"].state_dict(), "extra_state": {}, "last_optimizer_state": None,
             "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "Adam",
                                    "lr_scheduler_state": {}, "num_updates": args.updates}]}
    torch.save(state, checkpoint)
    result = {}
    for variant in TRAIN_VARIANTS:
        per_update = [t / s for t, s in zip(tokens[5:], seconds[variant][5:])]
        result[variant] = {"target_tokens_per_s_median": round(statistics.median(per_update), 1),
                           "target_tokens_per_s_total": round(sum(tokens[5:]) / sum(seconds[variant][5:]), 1),
                           "updates": len(seconds[variant]),
                           "valid_loss_fp32_eval": valid_loss_of(models[variant], task)}
    return result, checkpoint


def valid_loss_of(model, task) -> float:
    """The label-smoothed loss per target token (base 2, as fairseq logs it) of `model` on the valid
    set, in fp32, eval mode."""
    import math

    import torch
    from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

    from fairseq_heads.pruning.curve import batches

    criterion = LabelSmoothedCrossEntropyCriterion(task, sentence_avg=False, label_smoothing=0.1)
    model.eval()
    total, tokens = 0.0, 0
    with torch.no_grad():
        for sample in batches(task, "valid", model, None, max_tokens=8192):
            loss, _, logging = criterion(model, sample)
            total, tokens = total + float(loss), tokens + int(logging["ntokens"])
    return round(total / tokens / math.log(2), 6)


def timed(argv, env, log):
    start = time.perf_counter()
    run(argv, env, log)
    return time.perf_counter() - start


def analyse(args, autocast, checkpoint, work, env):
    stats_dir = os.path.join(work, f"stats_{autocast}")
    shutil.rmtree(stats_dir, ignore_errors=True)
    stats_s = timed([os.path.join(BIN, "fairseq-heads"), "stats", args.data_bin, "--path", checkpoint,
                     "--gen-subset", "valid", "--metrics", "confidence,positional,rare", "--out-dir", stats_dir,
                     "-s", args.src, "-t", args.tgt, "--max-tokens", 8192, "--bootstrap-replicates", 20,
                     "--log-format", "none", "--cpu", "--autocast", autocast], env, os.path.join(work, "stats.log"))
    gen_dir = os.path.join(work, f"gen_{autocast}")
    os.makedirs(gen_dir, exist_ok=True)
    generate_s = timed([os.path.join(BIN, "fairseq-generate"), args.data_bin, "--user-dir", USER_DIR,
                        "--task", "translation_heads", "-s", args.src, "-t", args.tgt, "--cpu", "--path", checkpoint,
                        "--gen-subset", "valid",
                        "--beam", 5, "--batch-size", 128, "--max-len-b", 50,
                        "--remove-bpe", "sentencepiece", "--scoring", "sacrebleu", "--results-path", gen_dir,
                        "--autocast", autocast], env, os.path.join(work, "generate.log"))
    lines = open(os.path.join(gen_dir, "generate-valid.txt")).read().splitlines()
    score = [line for line in lines if line.startswith("Generate")]
    hypothesis_tokens = sum(len(line.split("\t")[2].split()) for line in lines if line.startswith("H-"))
    with open(os.path.join(stats_dir, "heads.json")) as f:
        heads = json.load(f)
    return {"stats_s": round(stats_s, 2), "generate_s": round(generate_s, 2),
            "bleu_line": score[-1].strip() if score else None, "hypothesis_tokens": hypothesis_tokens}, heads


def confidence_gap(heads_a, heads_b) -> float:
    rows_a = {(r["type"], r["layer"], r["head"]): r for r in heads_a["heads"]}
    gaps = [abs(float(r["confidence"]) - float(rows_a[(r["type"], r["layer"], r["head"])]["confidence"]))
            for r in heads_b["heads"] if r.get("confidence") is not None]
    return max(gaps)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-bin", required=True)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="it")
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2, help="of the analysis; 0: the training part alone")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--checkpoint", help="a trained model for stats and generate (module doc)")
    parser.add_argument("--out", default="benchmarks/results/autocast_cpu_europarl.json")
    args = parser.parse_args(argv)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    work = tempfile.mkdtemp(prefix="autocast_bench_")
    train, checkpoint = train_side_by_side(args, work)
    checkpoint = args.checkpoint or checkpoint
    print("train", train, flush=True)
    analysis = {v: [] for v in VARIANTS}
    heads = {}
    for round_index in range(args.rounds):
        for autocast in (VARIANTS if round_index % 2 == 0 else tuple(reversed(VARIANTS))):
            result, heads[autocast] = analyse(args, autocast, checkpoint, work, env)
            analysis[autocast].append(result)
            print(autocast, "analysis", result, flush=True)
    analysed = args.rounds > 0
    best = {v: {"stats_s": min(r["stats_s"] for r in analysis[v]),
                "generate_s": min(r["generate_s"] for r in analysis[v]),
                "bleu_line": analysis[v][0]["bleu_line"],
                "hypothesis_tokens": analysis[v][0]["hypothesis_tokens"]} for v in VARIANTS} if analysed else None
    speedup = {
        "train": round(train["bf16"]["target_tokens_per_s_median"] / train["none"]["target_tokens_per_s_median"], 3),
        "train_bf16_flash": round(train["bf16_flash"]["target_tokens_per_s_median"]
                                  / train["none"]["target_tokens_per_s_median"], 3)}
    if analysed:
        speedup.update(stats=round(best["none"]["stats_s"] / best["bf16"]["stats_s"], 3),
                       generate=round(best["none"]["generate_s"] / best["bf16"]["generate_s"], 3))
    report = {
        "benchmark": "autocast_cpu", "machine": machine_info(), "threads": args.threads, "updates": args.updates,
        "workload": "europarl_en_it --scale cpu baseline: 6+6 x 8 heads, d=256, 4,096-token batches",
        "analysed_checkpoint": (args.checkpoint or "the fp32 model after the training part") if analysed
        else "none (--rounds 0: the training part alone)",
        "train": train, "best": best, "analysis_rounds": analysis, "bf16_speedup": speedup,
        "valid_loss_difference": round(train["bf16"]["valid_loss_fp32_eval"] - train["none"]["valid_loss_fp32_eval"], 6),
        "confidence_max_abs_difference": round(confidence_gap(heads["none"], heads["bf16"]), 5) if analysed else None,
        "verdict": {part: ("bf16 faster" if ratio > 1.0 else "bf16 NOT faster") for part, ratio in speedup.items()},
    }
    write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(json.dumps({"bf16_speedup": speedup, "verdict": report["verdict"]}))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
