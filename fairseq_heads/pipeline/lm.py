"""The language-model recipe as steps (runner.Step), with its settings in one frozen config
(`LmRecipe`, overridable with --set): the GPU queue's experiment (b) and its toy scale.

    data          prepare-lm: documents split by book -> sentencepiece -> data-bin
    baseline      a `gated_llama` LM (RMSNorm, RoPE, SwiGLU, GQA) trained with every gate fixed
                  open (an all-ones --head-mask: no gate is sampled or trained, the plain model)
    result_baseline  test perplexity; stats: every LM statistic on valid
    l0_<λ>        L0 fine-tunes of the baseline (λ=0: the control, as long), each pruned from its
                  gates (pruned_l0_<λ>) and scored (result_l0_<λ>), its surviving heads'
                  functions (stats_l0_<λ>); with converged.seeds the converged protocol instead,
                  with the layouts (and the full one) from scratch (lm_converged.py)
    curve_<m>     Michel et al.'s curve (perplexity as heads go, ranked by metric m), no fine-tune
    report        lm-report: tables.md and figures

As in nmt.py, `call` steps run in this process, trainings as subprocesses (side by side with
--jobs), and models of a seed other than 1 are named with `_s<seed>`.
"""
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import List, Tuple

from ..commands import (curve as curve_command, lm_report as lm_report_command,
                        lm_result as lm_result_command, prepare_lm as prepare_lm_command,
                        prune as prune_command, stats as stats_command)
from ..files import write_text_atomic
from .config import precision_settings, settings_except
from .fairseq_steps import run_fairseq_heads, train_argv, training_summary
from .converged_phases import validations
from .lm_converged import LmConverged, lm_converged_steps
from .runner import Step, StepContext

SURVIVOR_METRICS = "confidence,positional,previous_token,duplicate_token,induction"


@dataclass(frozen=True)
class LmData:
    corpus: str = "synthetic"     # a prepare-lm corpus
    source: str = ""              # its folder under --data-root (gutenberg, gutenberg_large, wikitext2)
    vocab_size: int = 300
    synthetic_sentences: int = 1500


@dataclass(frozen=True)
class LmModel:
    layers: int = 2
    dim: int = 32
    heads: int = 4
    kv_heads: int = 2             # grouped-query attention: query heads per KV head = heads / kv_heads
    ffn: int = 64
    context: int = 64             # tokens per block


@dataclass(frozen=True)
class LmTrain:
    max_tokens: int = 1024
    lr: float = 3e-3
    warmup: int = 10
    max_update: int = 40
    minutes: float = 0.0          # a cap on the baseline's training time (0: none)
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    fp16: bool = False
    seed: int = 1
    # inverse_sqrt (from 1e-7 over the warm-up), or fixed: a constant lr after a linear warm-up
    # (the Markov setting's: docs/results/lm_markov_repeats_2x4)
    scheduler: str = "inverse_sqrt"
    validate_updates: int = 0     # the baseline validates (and checkpoints) every N updates; 0: at epoch ends
    patience: int = 0             # the baseline stops after N validations without a better valid loss (0: never)


# LmTrain fields added after results were keyed: left out of a step's key while at their default,
# which is the behaviour from before them, so that adding them re-ran nothing
LATER_TRAIN_DEFAULTS = {"validate_updates": 0, "patience": 0}


def train_settings(train: LmTrain) -> dict:
    """What a step trained with TRAIN (or from a model trained with it) depends on."""
    return {k: v for k, v in dataclasses.asdict(train).items()
            if not (k in LATER_TRAIN_DEFAULTS and v == LATER_TRAIN_DEFAULTS[k])}


@dataclass(frozen=True)
class LmL0:
    lambdas: Tuple[float, ...] = (0.05, 0.5)
    control: bool = True
    updates: int = 20
    lr: float = 1e-3
    gate_lr_scale: float = 400.0
    trace_interval: int = 5


@dataclass(frozen=True)
class LmStats:
    subset: str = "valid"
    bootstrap_replicates: int = 20
    induction_lengths: str = "8,16"
    induction_probes: int = 16
    icl_positions: str = "8,48"   # natural-text in-context learning: loss at the first minus the second
    rare_outside_top: int = 0


@dataclass(frozen=True)
class LmCurve:
    metrics: Tuple[str, ...] = ("grad", "confidence")
    steps: Tuple[int, ...] = (0, 2, 4, 6)


@dataclass(frozen=True)
class LmRecipe:
    name: str = "lm_toy"
    data: LmData = field(default_factory=LmData)
    model: LmModel = field(default_factory=LmModel)
    train: LmTrain = field(default_factory=LmTrain)
    l0: LmL0 = field(default_factory=LmL0)
    stats: LmStats = field(default_factory=LmStats)
    curve: LmCurve = field(default_factory=LmCurve)
    converged: LmConverged = field(default_factory=LmConverged)  # seeds set: the converged protocol
    batch_size: int = 16          # blocks per batch when scoring (perplexity, curves)
    cpu: bool = True
    autocast: str = "none"        # precision.py: "bf16" for every training and scoring command


def _asdict(section) -> dict:
    return dataclasses.asdict(section)


class LmSteps:
    def __init__(self, config: LmRecipe, data_root: str, user_dir: str):
        self.c = config
        self.data_root = data_root
        self.user_dir = user_dir
        self.suffix = "" if config.train.seed == 1 else f"_s{config.train.seed}"

    def data_bin(self, context: StepContext) -> str:
        return context.path("data/bin")

    def device(self) -> List[str]:
        """--cpu and --autocast: the options every training and scoring command shares."""
        return (["--cpu"] if self.c.cpu else []) + ([] if self.c.autocast == "none" else ["--autocast", self.c.autocast])

    def stats_settings(self) -> dict:
        return {**_asdict(self.c.stats), **precision_settings(self.c.autocast)}

    def model_options(self, gate_adam: bool = False) -> List[str]:
        m, t = self.c.model, self.c.train
        options = ["--user-dir", self.user_dir, "--task", "language_modeling_heads", "--arch", "gated_llama",
                   "--decoder-layers", m.layers, "--decoder-embed-dim", m.dim, "--decoder-ffn-embed-dim", m.ffn,
                   "--decoder-attention-heads", m.heads, "--decoder-kv-heads", m.kv_heads,
                   "--share-decoder-input-output-embed", "--tokens-per-sample", m.context,
                   "--sample-break-mode", "none", "--max-tokens", t.max_tokens, "--adam-betas", "(0.9,0.98)",
                   "--weight-decay", t.weight_decay, "--clip-norm", t.clip_norm, "--seed", t.seed,
                   "--num-workers", "0", "--log-format", "json", "--log-interval", 50, "--no-progress-bar",
                   "--no-epoch-checkpoints"]
        # fp16 with fp32 master weights; unflattened for gate_adam, which must see the gates apart
        # (optim/gate_adam.py); flat for plain Adam, one master tensor instead of a loop over them
        if not t.fp16:
            return options + self.device()
        return options + self.device() + ["--fp16"] + (["--fp16-no-flatten-grads"] if gate_adam else [])

    def baseline_checkpoint(self, context: StepContext) -> str:
        return context.path(f"models/baseline{self.suffix}/checkpoint_best.pt")

    # ------------------------------------------------------------------ the steps
    def steps(self) -> List[Step]:
        c, s = self.c, self.suffix
        model = {"model": _asdict(c.model), "train": self.train_settings()}
        steps = [
            Step("data", "data", _asdict(c.data), call=self.run_data),
            # its own step, not a file of the baseline's: the checkpoint records the mask's path
            Step("open_mask", "masks/all_open", {"layers": c.model.layers, "heads": c.model.heads},
                 call=self.write_open_mask),
            Step(f"baseline{s}", f"models/baseline{s}", model, inputs=("data", "open_mask"),
                 argv=self.train_baseline, resumable=True),
            Step(f"result_baseline{s}", f"results/baseline{s}", self.result_settings(),
                 inputs=("data", f"baseline{s}"), call=self.result_call(f"baseline{s}", None)),
            Step(f"stats{s}", f"stats/baseline{s}", self.stats_settings(), inputs=("data", f"baseline{s}"),
                 call=self.stats_call(None)),
        ]
        lambdas = c.l0.lambdas + ((0.0,) if c.l0.control else ())
        if c.converged.seeds:  # lm_converged.py: L0 to the plateau, fixed mask to patience; seed by
            # seed, each seed's models and controls before the next's (the runner starts steps in order)
            steps += [step for seed in c.converged.seeds for lam in lambdas
                      for step in lm_converged_steps(self, lam, seed)]
        else:  # the quick protocol: a fixed number of updates
            for lam in lambdas:
                name = f"l0_{format(lam, 'g')}{s}"
                steps += [
                    Step(name, f"models/{name}", {**model, "l0": settings_except(c.l0, "lambdas", "control"),
                                                  "lambda": lam},
                         inputs=("data", f"baseline{s}"), argv=self.l0_argv(lam), resumable=True),
                    Step(f"pruned_{name}", f"models/pruned_{name}", {}, inputs=(name,), call=self.prune_call(name)),
                    Step(f"result_{name}", f"results/{name}", self.result_settings(),
                         inputs=("data", f"pruned_{name}"), call=self.result_call(name, lam)),
                    Step(f"stats_{name}", f"stats/{name}", self.stats_settings(), inputs=("data", name),
                         call=self.stats_call(name)),
                ]
        for metric in c.curve.metrics:
            steps.append(Step(f"curve_{metric}{s}", f"curves/{metric}{s}",
                              {"curve": settings_except(c.curve, "metrics"), "batch_size": c.batch_size,
                               **precision_settings(c.autocast)},
                              inputs=("data", f"baseline{s}", f"stats{s}"), call=self.curve_call(metric)))
        steps.append(Step("report", None, {}, inputs=tuple(step.name for step in steps), call=self.run_report))
        return steps

    def run_data(self, context: StepContext) -> None:
        d = self.c.data
        work = context.path("prepare")  # kept: prepare-lm skips its finished steps on a re-run
        argv = ["--work-dir", work, "--corpus", d.corpus, "--vocab-size", d.vocab_size,
                "--synthetic-sentences", d.synthetic_sentences,
                "--workers", max(1, min(16, os.cpu_count() or 1))]
        if d.source:
            argv += ["--source-dir", os.path.join(self.data_root, d.source)]
        run_fairseq_heads(prepare_lm_command, argv + self.corpus_options())
        shutil.copytree(os.path.join(work, "bin"), os.path.join(context.out, "bin"))
        shutil.copy2(os.path.join(work, "spm.model"), context.out)

    def corpus_options(self) -> List[object]:
        """prepare-lm options a recipe's data section adds (none here)."""
        return []

    def write_open_mask(self, context: StepContext) -> None:
        m = self.c.model
        write_text_atomic(os.path.join(context.out, "head_mask.json"),
                          json.dumps({"dec-self": [[1] * m.heads for _ in range(m.layers)]}) + "\n")

    def baseline_options(self, context: StepContext, head_mask: str) -> List[object]:
        """The baseline's model and schedule with HEAD_MASK (all open: the baseline itself; a
        layout: that layout from scratch), saving into the step's folder."""
        t = self.c.train
        return self.model_options() + [
            "--head-mask", head_mask, "--criterion", "cross_entropy", "--optimizer", "adam", "--lr", t.lr,
            "--lr-scheduler", t.scheduler, "--warmup-updates", t.warmup, "--save-dir", context.out] + (
            ["--warmup-init-lr", 1e-7] if t.scheduler == "inverse_sqrt" else [])

    def train_baseline(self, context: StepContext) -> List[str]:
        t = self.c.train
        options = self.baseline_options(context, context.path("masks/all_open/head_mask.json")) + [
            "--max-update", t.max_update]
        if t.minutes:
            options += ["--stop-time-hours", t.minutes / 60]
        if t.validate_updates:  # "N validations" then means N x validate_updates updates
            options += validations(t)
        if t.patience:
            options += ["--patience", t.patience]
        return train_argv(self.data_bin(context), options)

    def l0_argv(self, lam: float):
        def argv(context: StepContext) -> List[str]:
            l0 = self.c.l0
            options = self.model_options(gate_adam=True) + [
                "--finetune-from-model", self.baseline_checkpoint(context),
                "--criterion", "cross_entropy_l0", "--l0-lambda", lam, "--optimizer", "gate_adam",
                "--lr", l0.lr, "--gate-lr-scale", l0.gate_lr_scale, "--lr-scheduler", "fixed",
                "--max-update", l0.updates, "--save-dir", context.out,
                "--gate-trace", os.path.join(context.out, "gate_trace.jsonl"),
                "--gate-trace-interval", l0.trace_interval]
            return train_argv(self.data_bin(context), options)
        return argv

    def prune_call(self, name: str):
        def call(context: StepContext) -> None:  # the fine-tune's gates decide which heads go
            run_fairseq_heads(prune_command, [
                "--path", context.path(f"models/{name}/checkpoint_last.pt"),
                "--out", os.path.join(context.out, "checkpoint.pt"), "--from-gates"])
        return call

    def train_settings(self) -> dict:
        return {**train_settings(self.c.train), **precision_settings(self.c.autocast)}

    def result_settings(self) -> dict:
        """A result step's key: its batch, and its outputs (the per-block losses the report's
        paired intervals read, `block_losses.json`, came later: result files without them re-run)."""
        return {"batch_size": self.c.batch_size, "block_losses": True, **precision_settings(self.c.autocast)}

    def result_call(self, name: str, lam, checkpoint: str = "", kind: str = "l0", options=()):
        """Test perplexity of models/NAME: the baseline (λ None), the physically pruned quick L0
        model, or CHECKPOINT (under the results folder) of kind KIND with lm-result OPTIONS
        ({results}: the results folder). The result file records the baseline's seed, and a model
        whose OPTIONS give no seed (the baseline, a quick fine-tune) trained with that one."""
        def call(context: StepContext) -> None:
            if lam is None:
                path, model_kind, extra = self.baseline_checkpoint(context), "baseline", []
            else:
                path = context.path(checkpoint or f"models/pruned_{name}/checkpoint.pt")
                model_kind, extra = kind, ["--l0-lambda", lam]
            extra += [str(o).format(results=context.results) for o in options]
            extra += ["--baseline-seed", self.c.train.seed]
            if "--seed" not in options:  # the baseline, a quick fine-tune: the run's seed
                extra += ["--seed", self.c.train.seed]
            run_fairseq_heads(lm_result_command, [
                self.data_bin(context), "--path", path, "--name", name, "--kind", model_kind,
                "--subset", "test", "--results-dir", context.results, "--batch-size", self.c.batch_size,
                "--out", os.path.join(context.out, "result.json"), *extra, *self.device()])
            summary = training_summary(os.path.join(context.results, "logs", f"{name}.log"))
            write_text_atomic(os.path.join(context.out, "training.json"), json.dumps(summary, indent=1) + "\n")
        return call

    def stats_call(self, name, checkpoint: str = ""):
        def call(context: StepContext) -> None:
            st = self.c.stats
            path = (self.baseline_checkpoint(context) if name is None
                    else context.path(checkpoint or f"models/{name}/checkpoint_last.pt"))
            argv = [self.data_bin(context), "--path", path, "--gen-subset", st.subset,
                    "--out-dir", context.out, "--bootstrap-replicates", st.bootstrap_replicates,
                    "--induction-lengths", st.induction_lengths, "--induction-probes", st.induction_probes,
                    "--icl-positions", st.icl_positions, "--log-format", "none", *self.device()]
            if name is not None:
                argv += ["--metrics", SURVIVOR_METRICS]
            if st.rare_outside_top:
                argv += ["--rare-outside-top", st.rare_outside_top]
            run_fairseq_heads(stats_command, argv)
        return call

    def curve_call(self, metric: str):
        def call(context: StepContext) -> None:
            c, s = self.c, self.suffix
            run_fairseq_heads(curve_command, [
                self.data_bin(context), "--path", self.baseline_checkpoint(context),
                "--scores", context.path(f"stats/baseline{s}/heads.csv"), "--metric", metric,
                "--steps", ",".join(str(n) for n in c.curve.steps), "--gen-subset", "test",
                "--batch-size", c.batch_size, "--out", os.path.join(context.out, "curve.csv"), *self.device()])
        return call

    def run_report(self, context: StepContext) -> None:
        run_fairseq_heads(lm_report_command, [context.results])
