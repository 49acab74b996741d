"""The GPU queue's experiment (c): what the tool costs on the machine, measured side by side.

    data               the translation recipe's data step (carried to the GPU)
    train_<v>_<round>  fairseq-train for `updates` updates, no validation: v = plain (fairseq's
                       transformer) or gated (every head of the three types gated, the L0
                       criterion and gate_adam: an L0 fine-tune's cost), rounds interleaved
    reference_time     fairseq-validate of the first plain model on stats.subset
    stats_time         `fairseq-heads stats` of it on the same subset (its heads.csv ranks heads)
    decode             beam search on the first `decode_sentences` of generate.subset: the model
                       with `keep_fractions` of each block's heads physically removed (top by
                       gradient importance) against it with those heads masked, rounds
                       interleaved, and the speed-up the FLOPs predict (pruning/decode_speed.py)
    summary            bench/throughput.json: the numbers and the machine

Every process is started the same way, so start-up costs fall alike on both sides of a ratio.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import List, Tuple

from ..files import write_text_atomic
from .fairseq_steps import machine_info, train_argv, training_summary
from .nmt import NmtRecipe, NmtSteps
from .config import settings_except
from .nmt_config import ALL_TYPES, PLATEAU_STOP
from .runner import Step, StepContext


@dataclass(frozen=True)
class Bench:
    updates: int = 20
    rounds: int = 2
    keep_fractions: Tuple[float, ...] = (0.5, 0.25)
    decode_sentences: int = 40


@dataclass(frozen=True)
class ThroughputRecipe:
    nmt: NmtRecipe = field(default_factory=NmtRecipe)
    bench: Bench = field(default_factory=Bench)


VARIANTS = ("plain", "gated")


def timed(argv: List[str], log_path: str) -> float:
    """Wall seconds of a subprocess (its output appended to log_path); raises when it fails."""
    start = time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        status = subprocess.run([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT).returncode
    if status:
        raise RuntimeError(f"{argv[2]} exited with {status}")
    return time.time() - start


class ThroughputSteps:
    def __init__(self, config: ThroughputRecipe, data_root: str, user_dir: str):
        self.c = config
        self.nmt = NmtSteps(config.nmt, data_root, user_dir)

    def steps(self) -> List[Step]:
        b, n = self.c.bench, self.c.nmt
        runs = [f"train_{v}_{r}" for r in range(1, b.rounds + 1) for v in VARIANTS]
        # every field of the training (its own trainings run a fixed number of updates), the
        # baseline's plateau stop only where set, as in train_settings
        train = settings_except(n.train, *(() if n.train.plateau_validations else PLATEAU_STOP))
        model = {"model": asdict(n.model), "train": train, "updates": b.updates}
        steps = [self.nmt.steps()[0]]  # data
        steps += [Step(run, f"bench/{run}", {**model, "variant": run.split("_")[1]}, inputs=("data",),
                       argv=self.training_argv(run.split("_")[1])) for run in runs]
        first = "train_plain_1"
        steps += [
            Step("reference_time", "bench/reference_time", {"subset": n.stats.subset},
                 inputs=("data", first), call=self.reference_time),
            Step("stats_time", "bench/stats_time", asdict(n.stats), inputs=("data", first), call=self.stats_time),
            Step("decode", "bench/decode", {"bench": asdict(b), "generate": asdict(n.generate)},
                 inputs=("data", first, "stats_time"), call=self.decode),
        ]
        steps.append(Step("summary", "bench/summary", {}, inputs=tuple(s.name for s in steps), call=self.summary))
        return steps

    def checkpoint(self, context: StepContext) -> str:
        return context.path("bench/train_plain_1/checkpoint_last.pt")

    def training_argv(self, variant: str):
        def argv(context: StepContext) -> List[str]:
            n, t = self.nmt, self.c.nmt.train
            options = n.common() + n.size() + n.training(t.max_tokens, gate_adam=variant != "plain") + [
                "--lr", t.lr, "--lr-scheduler", "inverse_sqrt", "--warmup-updates", t.warmup,
                "--max-update", self.c.bench.updates, "--disable-validation", "--save-dir", context.out,
                "--save-interval-updates", 0]
            if variant == "plain":
                options += ["--arch", "transformer", "--criterion", "label_smoothed_cross_entropy",
                            "--optimizer", "adam"]
            else:
                options += ["--arch", "gated_transformer", "--gated-attention", ALL_TYPES,
                            "--criterion", "label_smoothed_cross_entropy_l0", "--l0-lambda", 0.01,
                            "--optimizer", "gate_adam", "--gate-lr-scale", 1000]
            return train_argv(n.data_bin(context), options)
        return argv

    def reference_time(self, context: StepContext) -> None:
        n = self.c.nmt
        argv = [sys.executable, "-m", "fairseq_cli.validate", self.nmt.data_bin(context), "--path",
                self.checkpoint(context), "--valid-subset", n.stats.subset, "--max-tokens", n.stats.max_tokens,
                "--task", "translation", "-s", n.data.src, "-t", n.data.tgt, "--num-workers", 0,
                "--user-dir", self.nmt.user_dir]  # its checkpoint loader (torch >= 2.6)
        seconds = timed(argv + (["--cpu"] if n.cpu else []), context.log_path)
        write_text_atomic(os.path.join(context.out, "seconds.json"), json.dumps({"seconds": round(seconds, 2)}))

    def stats_time(self, context: StepContext) -> None:
        n = self.c.nmt
        argv = [sys.executable, "-m", "fairseq_heads.cli", "stats", self.nmt.data_bin(context), "--path",
                self.checkpoint(context), "--gen-subset", n.stats.subset, "--metrics", ",".join(n.stats.metrics),
                "--out-dir", os.path.join(context.out, "stats"), "--max-tokens", n.stats.max_tokens,
                "-s", n.data.src, "-t", n.data.tgt, "--bootstrap-replicates", n.stats.bootstrap_replicates]
        seconds = timed(argv + (["--cpu"] if n.cpu else []), context.log_path)
        write_text_atomic(os.path.join(context.out, "seconds.json"), json.dumps({"seconds": round(seconds, 2)}))

    def decode(self, context: StepContext) -> None:
        from ..pruning.decode_speed import decode_speeds

        b, n = self.c.bench, self.c.nmt
        report = decode_speeds(self.checkpoint(context), self.nmt.data_bin(context), n.data.src, n.data.tgt,
                               context.path("bench/stats_time/stats/heads.csv"), b.keep_fractions,
                               n.generate.subset, b.decode_sentences, n.generate.beam, n.generate.batch_size,
                               b.rounds, cpu=n.cpu, work=context.out)
        write_text_atomic(os.path.join(context.out, "decode.json"), json.dumps(report, indent=1) + "\n")

    def summary(self, context: StepContext) -> None:
        b = self.c.bench
        def rate(log):  # the steady rate where the run logged it, else the whole run's
            summary = training_summary(log)
            return summary["steady_target_tokens_per_second"] or summary["target_tokens_per_second"]
        rates = {v: [rate(context.path(f"logs/train_{v}_{r}.log")) for r in range(1, b.rounds + 1)] for v in VARIANTS}

        def seconds(step):
            with open(context.path(f"bench/{step}/seconds.json")) as f:
                return json.load(f)["seconds"]
        with open(context.path("bench/decode/decode.json")) as f:
            decode = json.load(f)
        report = {
            "training": {"target_tokens_per_second": rates, "updates_per_run": b.updates,
                         "gated_over_plain": round(statistics.median(rates["gated"]) / statistics.median(rates["plain"]), 3),
                         "goal": ">= 0.95"},
            "stats_over_fairseq_validate": {"stats_s": seconds("stats_time"), "validate_s": seconds("reference_time"),
                                            "ratio": round(seconds("stats_time") / seconds("reference_time"), 2)},
            "decode": decode,
            "config": asdict(self.c),
            "machine": machine_info(),
        }
        write_text_atomic(os.path.join(context.out, "throughput.json"), json.dumps(report, indent=1) + "\n")
