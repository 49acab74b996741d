"""The translation recipe as steps (runner.Step): the paper's pipeline on one corpus and model
size, with its settings in one frozen config (`NmtRecipe`, overridable with --set).

    data          prepare: clean -> sentencepiece -> fairseq-preprocess (or the toy corpus)
    baseline      a plain fairseq `transformer` (its own process; resumable)
    bleu_baseline sacreBLEU of the baseline on generate.subset
    stats         confidence, LRP, gradient, positional, rare on stats.subset (in domain: the
                  recipe's own valid set)
    syntax_data   PUD (or another parsed set) binarised with the model's sentencepiece and
                  dictionaries; syntax_stats: syntactic heads on it (gold source parses);
                  with syntax.compare, parsed_set_stats: stats's metrics on it too
    enc_l0_<λ>    encoder-only L0 fine-tunes (decoder frozen), λ=0 the control trained as long;
    all_l0_<λ>    all attention types; each with bleu_<model> (the quick protocol: a fixed
                  number of updates; with converged.seeds the converged protocol, nmt_converged.py)
    curve_<m>     Michel et al.'s curve over encoder heads ranked by metric m, no fine-tune
    report        tables.md, figures, report.html

Models of a seed other than 1 are named with `_s<seed>`, so that several seeds' results merge
into one published folder.
"""
import dataclasses
import json
import os
import shutil
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ..commands import (curve as curve_command, prepare as prepare_command, report as report_command,
                        result as result_command, stats as stats_command)
from ..precision import AUTOCAST_CHOICES
from .config import precision_settings, settings_except
from .fairseq_steps import generate, run_fairseq_heads, train_argv, training_summary
from .formation import formation_step
from .nmt_config import (ALL_TYPES, BASELINE_CHECKPOINT, L0, Curve, Data, Formation, Generate, Model, Stats, Syntax,
                         Train, l0_settings, lambda_name, model_settings, syntax_data_settings, train_settings,
                         train_settings_without_plateau_stop)
from .converged_phases import plateau_stop_options
from .nmt_converged import Converged, converged_sweep
from .runner import Step, StepContext

@dataclass(frozen=True)
class NmtRecipe:
    name: str = "toy"
    data: Data = field(default_factory=Data)
    syntax: Syntax = field(default_factory=Syntax)
    model: Model = field(default_factory=Model)
    train: Train = field(default_factory=Train)
    l0: L0 = field(default_factory=L0)
    generate: Generate = field(default_factory=Generate)
    stats: Stats = field(default_factory=Stats)
    curve: Curve = field(default_factory=Curve)
    formation: Formation = field(default_factory=Formation)
    converged: Converged = field(default_factory=Converged)  # seeds set: the converged protocol
    cpu: bool = True
    autocast: str = "none"      # precision.py: "bf16" for every training, BLEU, stats and curve


def _asdict(section) -> dict:
    return dataclasses.asdict(section)


def seed_suffix(config: NmtRecipe) -> str:
    return "" if config.train.seed == 1 else f"_s{config.train.seed}"


class NmtSteps:
    """Builds the recipe's steps; `data_root` locates the corpus folders (not part of any key:
    the same data under another path is the same data)."""

    def __init__(self, config: NmtRecipe, data_root: str, user_dir: str):
        self.c = config
        self.data_root = data_root
        self.user_dir = user_dir
        self.suffix = seed_suffix(config)

    # ------------------------------------------------------------------ shared options
    def data_bin(self, context: StepContext) -> str:
        return context.path("data/bin")

    def common(self) -> List[str]:
        c = self.c
        options = ["--user-dir", self.user_dir, "--task", "translation_heads",
                   "-s", c.data.src, "-t", c.data.tgt, "--num-workers", c.train.num_workers]
        return options + (["--cpu"] if c.cpu else []) + self.precision()

    def precision(self) -> List[str]:
        """--autocast, where it is on (the same option on fairseq's CLIs and ours)."""
        return [] if self.c.autocast == "none" else ["--autocast", self.c.autocast]

    def size(self) -> List[str]:
        m = self.c.model
        return ["--encoder-layers", m.layers, "--decoder-layers", m.layers,
                "--encoder-embed-dim", m.dim, "--decoder-embed-dim", m.dim,
                "--encoder-ffn-embed-dim", m.ffn, "--decoder-ffn-embed-dim", m.ffn,
                "--encoder-attention-heads", m.heads, "--decoder-attention-heads", m.heads,
                "--share-all-embeddings"] + (["--encoder-normalize-before", "--decoder-normalize-before"]
                                             if m.normalize_before else [])

    def training(self, max_tokens: int, seed: int = 0, gate_adam: bool = False) -> List[str]:
        t = self.c.train
        options = ["--dropout", t.dropout, "--label-smoothing", t.label_smoothing,
                   "--max-tokens", max_tokens, "--adam-betas", "(0.9,0.98)", "--seed", seed or t.seed,
                   "--max-source-positions", 256, "--max-target-positions", 256,
                   "--skip-invalid-size-inputs-valid-test",
                   "--log-format", "json", "--log-interval", 50, "--no-progress-bar",
                   "--no-epoch-checkpoints"]
        if t.seq_len_multiple > 1:
            options += ["--required-seq-len-multiple", t.seq_len_multiple]
        # fp16 with fp32 master weights; unflattened for gate_adam, which must see the gates apart
        # from the weights (optim/gate_adam.py); a plain model's one flat master tensor saves an
        # optimizer loop over every parameter. Not bf16: fairseq 0.12 ties --bf16 to TPUs.
        if not t.fp16:
            return options
        return options + ["--fp16"] + (["--fp16-no-flatten-grads"] if gate_adam else [])

    # ------------------------------------------------------------------ the steps
    def steps(self) -> List[Step]:
        c, s = self.c, self.suffix
        steps = [
            Step("data", "data", _asdict(c.data), call=self.run_data),
            Step(f"baseline{s}", f"models/baseline{s}", self.baseline_settings(train_settings(c.train)),
                 inputs=("data",), argv=self.train_baseline, resumable=True,
                 resumable_from=self.baseline_resumable_from()),
            self.bleu_step(f"baseline{s}", "baseline", None),
            Step(f"stats{s}", f"stats/baseline{s}", {**_asdict(c.stats), **precision_settings(c.autocast)},
                 inputs=("data", f"baseline{s}"), call=self.run_stats),
        ]
        syntax_data = "data"
        if c.syntax.source:
            syntax_data = "syntax_data"
            steps.append(Step("syntax_data", "syntax_data", syntax_data_settings(c.syntax), inputs=("data",),
                              call=self.run_syntax_data))
        steps.append(Step(f"syntax_stats{s}", f"stats/syntax{s}",
                          {"replicates": c.stats.bootstrap_replicates, "max_tokens": c.stats.max_tokens,
                           **precision_settings(c.autocast)},
                          inputs=(syntax_data, f"baseline{s}"), call=self.run_syntax_stats))
        if c.syntax.compare:
            steps.append(Step(f"parsed_set_stats{s}", f"stats/parsed_set{s}",
                              {**settings_except(c.stats, "subset"), **precision_settings(c.autocast)},
                              inputs=(syntax_data, f"baseline{s}"), call=self.run_parsed_set_stats))
        if c.formation.enabled:
            steps.append(formation_step(self, syntax_data))
        lambdas = [("enc", lam) for lam in c.l0.encoder_lambdas]
        lambdas += [("all", lam) for lam in c.l0.all_lambdas]
        if c.l0.control:
            lambdas += [(side, 0.0) for side in ("enc", "all") if (side == "enc" and c.l0.encoder_lambdas)
                        or (side == "all" and c.l0.all_lambdas)]
        if c.converged.seeds:  # nmt_converged.py: L0 to the plateau, fixed mask to patience
            steps += converged_sweep(self, lambdas, c.converged.seeds)
        else:  # the quick protocol: a fixed number of updates
            for side, lam in lambdas:
                name = f"{side}_l0_{lambda_name(lam)}{s}"
                steps.append(Step(name, f"models/{name}", {"l0": l0_settings(c.l0), "side": side, "lambda": lam,
                                                           "size": model_settings(c.model),
                                                           "train": train_settings(c.train),
                                                           **precision_settings(c.autocast)},
                                  inputs=("data", f"baseline{s}"), argv=self.l0_argv(side, lam),
                                  resumable=True))
                steps.append(self.bleu_step(name, "encoder_l0" if side == "enc" else "all_l0", lam,
                                            inputs=(f"baseline{s}",)))
        for metric in c.curve.metrics:
            steps.append(Step(f"curve_{metric}{s}", f"curves/{metric}{s}", {"curve": settings_except(c.curve, "metrics"),
                                                                           "generate": _asdict(c.generate),
                                                                           **precision_settings(c.autocast)},
                              inputs=("data", f"baseline{s}", f"stats{s}"), call=self.curve_call(metric)))
        steps.append(Step("report", None, {}, inputs=tuple(step.name for step in steps), call=self.run_report))
        return steps

    def run_data(self, context: StepContext) -> None:
        c = self.c.data
        work = context.path("prepare")  # kept: prepare skips its finished steps on a re-run
        if c.corpus == "synthetic":
            train, valid, test = c.synthetic_sizes
            inputs = ["--synthetic", "--n-train", train, "--n-valid", valid, "--n-test", test]
        else:
            folder = os.path.join(self.data_root, c.corpus)
            inputs = [f"--{split}" for split in ("train", "valid", "test")]
            inputs = [item for split, stem in zip(inputs, c.prefix)
                      for item in (split, f"{folder}/{stem}.{c.src}.gz,{folder}/{stem}.{c.tgt}.gz")]
        run_fairseq_heads(prepare_command, [
            "--work-dir", work, "--src", c.src, "--tgt", c.tgt, *inputs, "--max-len", c.max_len,
            "--vocab-size", c.vocab_size, "--workers", max(1, min(16, os.cpu_count() or 1))])
        shutil.copytree(os.path.join(work, "bin"), os.path.join(context.out, "bin"))
        shutil.copy2(os.path.join(work, "spm.model"), context.out)

    def baseline_settings(self, train: dict, autocast: Optional[str] = None) -> dict:
        c = self.c
        return {"model": model_settings(c.model), "train": train, "fp16": c.train.fp16,
                **precision_settings(c.autocast if autocast is None else autocast)}

    def baseline_resumable_from(self) -> Tuple[Tuple[str, dict], ...]:
        """The baseline's earlier settings that trained the same model (runner.Step.resumable_from):
        without the plateau stop (added to a running training: it only ends it sooner), and under
        another autocast (a training carried to a machine with another bf16 kernel goes on in the
        precision that pays there: fp32 weights, Adam and schedule are the same)."""
        c = self.c
        trains = [("", train_settings(c.train))]
        if c.train.plateau_validations:
            trains.append(("a stopping rule added", train_settings_without_plateau_stop(c.train)))
        earlier = []
        for autocast in (c.autocast, *(a for a in AUTOCAST_CHOICES if a != c.autocast)):
            changed = "" if autocast == c.autocast else f"autocast {autocast} before, {c.autocast} now"
            for stop, train in trains:
                why = "; ".join(w for w in (stop, changed) if w)
                if why:
                    earlier.append((why, self.baseline_settings(train, autocast)))
        return tuple(earlier)

    def train_baseline(self, context: StepContext) -> List[str]:
        t = self.c.train
        options = self.common() + self.size() + self.training(t.max_tokens) + [
            "--arch", "transformer", "--criterion", "label_smoothed_cross_entropy",
            "--optimizer", "adam", "--lr", t.lr, "--lr-scheduler", "inverse_sqrt",
            "--warmup-updates", t.warmup, "--max-update", t.max_update, "--save-dir", context.out]
        if t.minutes:
            options += ["--stop-time-hours", t.minutes / 60]
        if t.validate_updates:  # "N validations" then means N x validate_updates updates
            options += ["--validate-interval-updates", t.validate_updates, "--save-interval-updates",
                        t.validate_updates, "--keep-interval-updates", t.keep_checkpoints,
                        "--validate-interval", 1_000_000]
        if t.patience:
            options += ["--patience", t.patience]
        return train_argv(self.data_bin(context), options + plateau_stop_options(t, context))

    def l0_argv(self, side: str, lam: float):
        def argv(context: StepContext) -> List[str]:
            l0, s = self.c.l0, self.suffix
            types, extra = ("enc-self", ["--freeze-decoder"]) if side == "enc" else (ALL_TYPES, [])
            options = self.common() + self.size() + self.training(self.c.train.max_tokens, gate_adam=True) + [
                "--arch", "gated_transformer", "--gated-attention", types, *extra,
                "--finetune-from-model", context.path(f"models/baseline{s}/{BASELINE_CHECKPOINT}"),
                "--criterion", "label_smoothed_cross_entropy_l0", "--l0-lambda", lam,
                "--optimizer", "gate_adam", "--lr", l0.lr, "--gate-lr-scale", l0.gate_lr_scale,
                "--lr-scheduler", "fixed", "--max-update", l0.updates, "--save-dir", context.out,
                "--gate-trace", os.path.join(context.out, "gate_trace.jsonl"),
                "--gate-trace-interval", l0.trace_interval]
            return train_argv(self.data_bin(context), options)
        return argv

    def bleu_step(self, model: str, kind: str, lam, checkpoint: str = "checkpoint_last.pt",
                  inputs: Tuple[str, ...] = (), head_mask: str = "", result_options=(), record=()) -> Step:
        """BLEU of models/MODEL/CHECKPOINT on generate.subset (fairseq-generate in this process,
        with HEAD_MASK if the model trained with one) and its result file (`fairseq-heads
        result` with RESULT_OPTIONS, where {results} is the results folder), beside the training
        log's summary (tokens/s). The result file records the baseline's seed and RECORD, options
        that only write down settings the model's own key holds already (report/layout.py, "a
        model's settings"): they are not in this step's key, so a field recorded later re-scores
        nothing."""
        settings = {"generate": _asdict(self.c.generate), "kind": kind, "lambda": lam,
                    "checkpoint": checkpoint, "result": [str(o) for o in result_options],
                    **precision_settings(self.c.autocast)}
        if model.startswith("baseline"):
            checkpoint = BASELINE_CHECKPOINT
        inputs = ("data", model) + tuple(i for i in inputs if i not in ("data", model))

        def call(context: StepContext) -> None:
            g = self.c.generate
            path = context.path(os.path.join("models", model, checkpoint))
            mask = ["--head-mask", context.path(head_mask)] if head_mask else []
            out = os.path.join(context.out, "generate.txt")
            generate(self.data_bin(context), self.common() + mask + [
                "--path", path, "--gen-subset", g.subset, "--beam", g.beam,
                "--batch-size", g.batch_size, "--remove-bpe", "sentencepiece", "--scoring", "sacrebleu"], out)
            options = ["--name", model, "--kind", kind, "--subset", g.subset, "--results-dir", context.results]
            if lam is not None:
                options += ["--l0-lambda", lam]
            if result_options:  # the converged protocol's: its seed, phases, from-model
                options += [str(o).format(results=context.results) for o in result_options]
            else:  # the baseline, or a quick-protocol fine-tune of it
                options += ["--seed", self.c.train.seed] + (["--protocol", "quick"] if lam is not None else [])
            options += ["--baseline-seed", self.c.train.seed, *record]
            run_fairseq_heads(result_command, [
                out, "--path", path, *options, *mask, "--out", os.path.join(context.out, "result.json")])
            summary = training_summary(os.path.join(context.results, "logs", f"{model}.log"))
            with open(os.path.join(context.out, "training.json"), "w", encoding="utf-8") as f:
                json.dump(summary, f, indent=1)
        return Step(f"bleu_{model}", f"results/{model}", settings, inputs=inputs, call=call)

    def stats_argv(self, context: StepContext, data_bin: str, subset: str, metrics: str) -> List[str]:
        c = self.c
        argv = [data_bin, "--path", context.path(f"models/baseline{self.suffix}/{BASELINE_CHECKPOINT}"),
                "--gen-subset", subset, "--metrics", metrics, "--out-dir", context.out,
                "-s", c.data.src, "-t", c.data.tgt, "--max-tokens", c.stats.max_tokens,
                "--bootstrap-replicates", c.stats.bootstrap_replicates, "--log-format", "none"]
        return argv + (["--cpu"] if c.cpu else []) + self.precision()

    def run_stats(self, context: StepContext) -> None:
        self.run_recipe_metrics(context, self.data_bin(context), self.c.stats.subset)

    def run_parsed_set_stats(self, context: StepContext) -> None:
        data_bin, _ = self.parsed_set(context)
        self.run_recipe_metrics(context, data_bin, "test")

    def run_recipe_metrics(self, context: StepContext, data_bin: str, subset: str) -> None:
        """`fairseq-heads stats` with the recipe's metrics and their settings on SUBSET of DATA_BIN."""
        st = self.c.stats
        argv = self.stats_argv(context, data_bin, subset, ",".join(st.metrics))
        argv += ["--grad-normalise", st.grad_normalise]
        if st.rare_outside_top:
            argv += ["--rare-outside-top", st.rare_outside_top]
        run_fairseq_heads(stats_command, argv)

    def run_syntax_data(self, context: StepContext) -> None:
        from ..data.extra_subset import binarize_subsets

        c, root = self.c, self.data_root
        binarize_subsets(self.data_bin(context), context.path("data/spm.model"),
                         {"test": (os.path.join(root, c.syntax.source), os.path.join(root, c.syntax.target))},
                         c.data.src, c.data.tgt, os.path.join(context.out, "bin"),
                         conllu={"test": os.path.join(root, c.syntax.conllu)})

    def parsed_set(self, context: StepContext) -> Tuple[str, str]:
        """(data-bin, gold parses) of the parsed set: its "test" split."""
        if self.c.syntax.source:
            data_bin = context.path("syntax_data/bin")
            suffix = ".gz" if self.c.syntax.conllu.endswith(".gz") else ""
            return data_bin, os.path.join(data_bin, "test.conllu" + suffix)
        return self.data_bin(context), context.path("data/bin/test.conllu")

    def run_syntax_stats(self, context: StepContext) -> None:
        data_bin, conllu = self.parsed_set(context)
        run_fairseq_heads(stats_command,
                          self.stats_argv(context, data_bin, "test", "syntactic") + ["--conllu", conllu])

    def curve_call(self, metric: str):
        def call(context: StepContext) -> None:
            c, s = self.c, self.suffix
            g = c.generate
            argv = [self.data_bin(context), "--path", context.path(f"models/baseline{s}/{BASELINE_CHECKPOINT}"),
                    "--scores", context.path(f"stats/baseline{s}/heads.csv"), "--metric", metric,
                    "--steps", ",".join(str(n) for n in c.curve.steps), "--types", c.curve.types,
                    "--gen-subset", g.subset, "--beam", g.beam, "--batch-size", g.batch_size,
                    "-s", c.data.src, "-t", c.data.tgt, "--out", os.path.join(context.out, "curve.csv")]
            run_fairseq_heads(curve_command, argv + (["--cpu"] if c.cpu else []) + self.precision())
        return call

    def run_report(self, context: StepContext) -> None:
        run_fairseq_heads(report_command, [context.results])
