"""Cost of `fairseq-heads stats` relative to fairseq's own evaluation on the same data and model.

    python benchmarks/stats_cost.py DATA_BIN --path CHECKPOINT --subset valid \
        --out benchmarks/out/stats_cost.json [--conllu SRC.conllu] [--max-tokens 4096]

A data-bin with one `dict.txt` (no language pair) is a language model's: the reference is then
`fairseq-eval-lm`, `stats` runs with every LM metric (confidence, lrp, grad, positional, rare,
previous_token, duplicate_token, induction), and the memory sizes count lines of the subset
(fairseq's `--sample-break-mode none` blocks are cut from them). Translation, otherwise:

Measures, in one run and as separate processes (so each pays fairseq's start-up once):
- wall time of `fairseq-validate` (the reference);
- wall time of `fairseq-heads stats` with the attention metrics (confidence, positional, rare,
  and syntactic when --conllu is given), divided by the reference;
- wall time of `fairseq-heads stats --metrics lrp --lrp-normalise sentence`, divided by it;
- peak resident memory (getrusage of the child, maxrss) of `stats` with confidence, positional,
  rare and lrp on the first N and the first 10 N sentences of the subset (default N = 100),
  which streaming should keep (nearly) flat.
Writes JSON with the numbers (wall and CPU seconds: on a shared machine the CPU ratio is the steadier
one), the load average before and after, and the machine (platform, CPU count, torch version).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import machine_info  # noqa: E402

BIN = os.path.dirname(sys.executable)
USER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fairseq_heads")

# Run a command as the only child of a fresh Python process and print its peak RSS (KiB) and CPU
# seconds (user + system): RUSAGE_CHILDREN keeps the maximum RSS over all waited-for children, so
# one wrapper per measurement. CPU time is what a loaded machine does not inflate (much).
_MAXRSS_WRAPPER = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
                   "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
                   "print(u.ru_maxrss, u.ru_utime + u.ru_stime); sys.exit(rc)")


def child_env():
    return dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
                MKL_NUM_THREADS=os.environ.get("MKL_NUM_THREADS", "1"))


def timed(command, log_path):
    """(wall seconds, peak RSS in MiB, CPU seconds) of one command; its output goes to log_path."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        result = subprocess.run([sys.executable, "-c", _MAXRSS_WRAPPER, *command], stdout=subprocess.PIPE,
                                stderr=log, text=True, env=child_env())
    wall = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"command failed ({result.returncode}), see {log_path}: {' '.join(command)}")
    rss, cpu = result.stdout.strip().splitlines()[-1].split()
    return wall, int(rss) / 1024.0, float(cpu)


def language_pair(data_bin, subset):
    for name in os.listdir(data_bin):
        if name.startswith(subset + ".") and name.endswith(".idx"):
            pair, lang = name[len(subset) + 1:-4].rsplit(".", 1)
            src, tgt = pair.split("-")
            return src, tgt
    raise SystemExit(f"no subset {subset!r} in {data_bin}")


def head_subset(data_bin, subset, src, tgt, count, out_dir):
    """A data-bin in out_dir whose `valid` subset is the first `count` sentences of `subset`."""
    from fairseq.data import Dictionary, data_utils, indexed_dataset

    os.makedirs(out_dir, exist_ok=True)
    for lang in (src, tgt):
        shutil.copy(os.path.join(data_bin, f"dict.{lang}.txt"), out_dir)
        dictionary = Dictionary.load(os.path.join(data_bin, f"dict.{lang}.txt"))
        source = data_utils.load_indexed_dataset(os.path.join(data_bin, f"{subset}.{src}-{tgt}.{lang}"),
                                                 dictionary)
        if count > len(source):
            raise SystemExit(f"{subset} has {len(source)} sentences, fewer than {count}")
        prefix = os.path.join(out_dir, f"valid.{src}-{tgt}.{lang}")
        builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=len(dictionary))
        for i in range(count):
            builder.add_item(source[i])
        builder.finalize(prefix + ".idx")
    return out_dir


def is_language_model_bin(data_bin):
    return os.path.exists(os.path.join(data_bin, "dict.txt"))


def head_subset_lm(data_bin, subset, count, out_dir):
    """An LM data-bin in out_dir whose `valid` subset is the first `count` lines of `subset`."""
    from fairseq.data import Dictionary, data_utils, indexed_dataset

    os.makedirs(out_dir, exist_ok=True)
    shutil.copy(os.path.join(data_bin, "dict.txt"), out_dir)
    dictionary = Dictionary.load(os.path.join(data_bin, "dict.txt"))
    source = data_utils.load_indexed_dataset(os.path.join(data_bin, subset), dictionary)
    if count > len(source):
        raise SystemExit(f"{subset} has {len(source)} lines, fewer than {count}")
    prefix = os.path.join(out_dir, "valid")
    builder = indexed_dataset.make_builder(prefix + ".bin", impl="mmap", vocab_size=len(dictionary))
    for i in range(count):
        builder.add_item(source[i])
    builder.finalize(prefix + ".idx")
    return out_dir


LM_METRICS = "confidence,lrp,grad,positional,rare,previous_token,duplicate_token,induction"


def lm_block_args(checkpoint):
    """fairseq-eval-lm's block options as the checkpoint's task has them (what `stats` uses).

    eval-lm builds its task from the command line: left at its defaults (1024-token blocks), a
    model with 256 positions skips every block but the last short one and scores a few tokens."""
    from fairseq import checkpoint_utils

    task = checkpoint_utils.load_checkpoint_to_cpu(checkpoint)["cfg"]["task"]
    return ["--tokens-per-sample", str(task["tokens_per_sample"]),
            "--sample-break-mode", str(task["sample_break_mode"])]


def eval_lm_tokens(log_path):
    """The number of tokens fairseq-eval-lm says it evaluated (None if its log has no such line)."""
    with open(log_path) as log:
        found = re.findall(r"Evaluated ([0-9,]+) tokens", log.read())
    return int(found[-1].replace(",", "")) if found else None


def stats_tokens(out_dir):
    with open(os.path.join(out_dir, "heads.json")) as f:
        return json.load(f)["meta"]["target_tokens"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_bin")
    parser.add_argument("--path", required=True, help="checkpoint")
    parser.add_argument("--subset", default="valid")
    parser.add_argument("--conllu", default=None, help="source parses of the subset (adds syntactic)")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--memory-sizes", default="100,1000", help="two subset sizes for peak memory")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs of each timed command, interleaved; the minimum is reported")
    parser.add_argument("--out", required=True, help="JSON output path")
    parser.add_argument("--note", default=None, help="free text stored in the JSON (e.g. what the checkpoint is)")
    opts = parser.parse_args(argv)

    language_model = is_language_model_bin(opts.data_bin)
    src, tgt = (None, None) if language_model else language_pair(opts.data_bin, opts.subset)
    common = ["--path", opts.path, "--max-tokens", str(opts.max_tokens), "--cpu"]
    stats = [os.path.join(BIN, "fairseq-heads"), "stats", "--log-format", "none"]
    work = tempfile.mkdtemp(prefix="stats_cost.")
    load_before = os.getloadavg()
    try:
        if language_model:
            report = measure_language_model(opts, stats, common, work)
        else:
            report = measure_translation(opts, stats, common, work, src, tgt)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["load_average_1_5_15"] = {"before": list(load_before), "after": list(os.getloadavg())}
    if opts.note:
        report["run_note"] = opts.note
    os.makedirs(os.path.dirname(os.path.abspath(opts.out)), exist_ok=True)
    with open(opts.out, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(json.dumps(report["ratio_to_reference"]), json.dumps(report["peak_rss_mib"]))


def interleaved(runs, repeats, work):
    """Minimum wall seconds per run (over interleaved repeats), all repeats, peak RSS, and the
    minimum CPU seconds per run."""
    all_seconds = {name: [] for name in runs}
    all_cpu = {name: [] for name in runs}
    run_rss = {}
    for _ in range(repeats):  # interleaved, so load from other processes hits all alike
        for name, command in runs.items():
            wall, run_rss[name], cpu = timed(command, os.path.join(work, f"{name}.log"))
            all_seconds[name].append(wall)
            all_cpu[name].append(cpu)
            print(f"{name}: {wall:.1f} s, {cpu:.1f} CPU s, peak RSS {run_rss[name]:.0f} MiB", flush=True)
    cpu = {name: min(values) for name, values in all_cpu.items()}
    return {name: min(values) for name, values in all_seconds.items()}, all_seconds, run_rss, cpu


def measure_language_model(opts, stats, common, work):
    eval_lm = [os.path.join(BIN, "fairseq-eval-lm"), opts.data_bin, "--gen-subset", opts.subset,
               "--user-dir", USER_DIR, "--log-format", "none", *lm_block_args(opts.path), *common]
    runs = {
        "eval_lm": eval_lm,
        "stats_all_lm_metrics": stats + [opts.data_bin, "--gen-subset", opts.subset, "--metrics", LM_METRICS,
                                         "--out-dir", os.path.join(work, "a"), *common],
        "stats_attention": stats + [opts.data_bin, "--gen-subset", opts.subset, "--metrics",
                                    "confidence,positional,rare,previous_token,duplicate_token",
                                    "--out-dir", os.path.join(work, "b"), *common],
    }
    seconds, all_seconds, run_rss, cpu = interleaved(runs, opts.repeats, work)
    # the reference must score the same tokens as stats (see lm_block_args)
    tokens = {"eval_lm": eval_lm_tokens(os.path.join(work, "eval_lm.log")),
              "stats_all_lm_metrics": stats_tokens(os.path.join(work, "a")),
              "stats_attention": stats_tokens(os.path.join(work, "b"))}
    if len(set(tokens.values())) != 1:
        print(f"WARNING: the runs scored different numbers of tokens: {tokens}", flush=True)
    memory = {}
    for size in (int(n) for n in opts.memory_sizes.split(",")):
        data = head_subset_lm(opts.data_bin, opts.subset, size, os.path.join(work, f"bin{size}"))
        _, memory[size], _ = timed(stats + [data, "--gen-subset", "valid", "--metrics", LM_METRICS,
                                            "--out-dir", os.path.join(work, f"m{size}"), *common],
                                   os.path.join(work, f"memory{size}.log"))
        print(f"peak RSS with {size} lines: {memory[size]:.0f} MiB", flush=True)
    sizes = sorted(memory)
    return {
        "kind": "language_model",
        "data_bin": opts.data_bin, "checkpoint": opts.path,
        "subset": opts.subset, "max_tokens": opts.max_tokens, "metrics": LM_METRICS.split(","),
        "tokens_scored": tokens,
        "wall_seconds": seconds, "wall_seconds_all_repeats": all_seconds, "peak_rss_mib_per_run": run_rss,
        "ratio_to_reference": {name: seconds[name] / seconds["eval_lm"] for name in runs if name != "eval_lm"},
        "cpu_seconds": cpu,
        "cpu_ratio_to_reference": {name: cpu[name] / cpu["eval_lm"] for name in runs if name != "eval_lm"},
        "peak_rss_mib": {str(n): memory[n] for n in sizes},
        "peak_rss_growth": memory[sizes[-1]] / memory[sizes[0]],
        "note": "reference: fairseq-eval-lm with the checkpoint's --tokens-per-sample and "
                "--sample-break-mode (the blocks stats scores; tokens_scored); wall times include each "
                "process's start-up (fairseq import, model load); the induction probes are a fixed cost "
                "(lengths x probes), not per line",
        "machine": machine_info(),
    }


def measure_translation(opts, stats, common, work, src, tgt):
    validate = [os.path.join(BIN, "fairseq-validate"), opts.data_bin, "--valid-subset", opts.subset,
                "--user-dir", USER_DIR, "--task", "translation", "-s", src, "-t", tgt,
                "--criterion", "cross_entropy", "--log-format", "none", *common]
    attention_metrics = "confidence,positional,rare" + (",syntactic" if opts.conllu else "")
    runs = {
        "validate": validate,
        "stats_attention": stats + [opts.data_bin, "--gen-subset", opts.subset, "--metrics",
                                    attention_metrics, "--out-dir", os.path.join(work, "a"),
                                    *(["--conllu", opts.conllu] if opts.conllu else []), *common],
        "stats_lrp_sentence": stats + [opts.data_bin, "--gen-subset", opts.subset, "--metrics", "lrp",
                                       "--lrp-normalise", "sentence", "--out-dir",
                                       os.path.join(work, "l"), *common],
    }
    seconds, all_seconds, run_rss, cpu = interleaved(runs, opts.repeats, work)

    memory = {}
    for size in (int(n) for n in opts.memory_sizes.split(",")):
        data = head_subset(opts.data_bin, opts.subset, src, tgt, size, os.path.join(work, f"bin{size}"))
        _, memory[size], _ = timed(stats + [data, "--gen-subset", "valid", "--metrics",
                                            "confidence,positional,rare,lrp", "--out-dir",
                                            os.path.join(work, f"m{size}"), *common],
                                   os.path.join(work, f"memory{size}.log"))
        print(f"peak RSS with {size} sentences: {memory[size]:.0f} MiB", flush=True)
    sizes = sorted(memory)
    report = {
        "data_bin": os.path.abspath(opts.data_bin), "checkpoint": os.path.abspath(opts.path),
        "subset": opts.subset, "max_tokens": opts.max_tokens,
        "attention_metrics": attention_metrics.split(","),
        "wall_seconds": seconds,
        "wall_seconds_all_repeats": all_seconds,
        "peak_rss_mib_per_run": run_rss,
        "cpu_seconds": cpu,
        "kind": "translation",
        "ratio_to_reference": {
            "stats_attention": seconds["stats_attention"] / seconds["validate"],
            "stats_lrp_sentence": seconds["stats_lrp_sentence"] / seconds["validate"],
        },
        "peak_rss_mib": {str(n): memory[n] for n in sizes},
        "peak_rss_growth": memory[sizes[-1]] / memory[sizes[0]],
        "note": "wall times include each process's start-up (fairseq import, model load)",
        "machine": machine_info(),
    }
    return report


if __name__ == "__main__":
    main()
