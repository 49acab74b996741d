"""The decoder-only LM recipe of docs/results/lm_english*: lm.py's steps on fairseq's
`transformer_lm` (its gated twin, every gate fixed open for the baseline) instead of gated_llama,
plus what that study added:

    pud                PUD's gold-parsed English sentences, one a line, binarised with the LM's own
                       sentencepiece model and dictionary (data/lm_conllu_subset.py)
    stats_pud          syntactic heads of the baseline on it (the arcs to earlier words;
                       docs/metrics.md), positional and previous-token on the same blocks
    mask_l0_<λ>        for the λs of `scratch_lambdas`: the L0 model's open heads;
    scratch_l0_<λ>     that layout trained from scratch for baseline + fine-tune updates (the same
                       budget), scored by result_scratch_l0_<λ>; the quick protocol's only: the
                       converged one (`converged.seeds`) has its own, `converged.scratch_lambdas`

Other settings of that study are `--set`s: `data.corpus=wikitext2 data.source=wikitext2`,
`data.repeat_spans=true` (with `data.repeat_prob`), `model.layers=2 model.heads=4 model.dim=128
model.ffn=512` (the 2x4 size), `normalize_before=true` (pre-norm layers, the Markov setting).
"""
import os
from dataclasses import asdict, dataclass, field
from typing import List, Tuple

from ..commands import lm_result as lm_result_command, mask as mask_command, stats as stats_command
from .fairseq_steps import run_fairseq_heads
from .lm import LmData, LmRecipe, LmSteps
from .runner import Step, StepContext


@dataclass(frozen=True)
class TextData(LmData):
    repeat_spans: bool = False    # train paragraphs cut into 12-40-word windows, some written twice
    repeat_prob: float = 0.5


@dataclass(frozen=True)
class LmEnglishRecipe(LmRecipe):
    data: LmData = field(default_factory=TextData)
    arch: str = "gated_transformer_lm"
    normalize_before: bool = False
    pud_conllu: str = ""          # under --data-root; empty: no syntactic heads (text that is not English)
    scratch_lambdas: Tuple[float, ...] = ()


class LmEnglishSteps(LmSteps):
    def model_options(self, gate_adam: bool = False) -> List[object]:
        options = super().model_options(gate_adam)
        if self.c.arch == "gated_llama":
            return options
        # fairseq's transformer_lm has one key/value head per query head
        at = options.index("--decoder-kv-heads")
        del options[at:at + 2]
        options[options.index("gated_llama")] = self.c.arch
        return options + (["--decoder-normalize-before"] if self.c.normalize_before else [])

    def corpus_options(self) -> List[object]:
        d = self.c.data
        return ["--repeat-spans", "--repeat-prob", d.repeat_prob] if getattr(d, "repeat_spans", False) else []

    def steps(self) -> List[Step]:
        steps = super().steps()
        report = steps.pop()  # it reads every step: rebuilt below with the new ones
        c, s = self.c, self.suffix
        if c.pud_conllu:
            steps += [
                Step("pud", "pud", {"conllu": c.pud_conllu}, inputs=("data",), call=self.run_pud),
                Step(f"stats_pud{s}", f"stats/baseline_pud{s}", self.stats_settings(), inputs=("pud", f"baseline{s}"),
                     call=self.run_stats_pud),
            ]
        for lam in () if c.converged.seeds else c.scratch_lambdas:
            if lam in c.l0.lambdas or (lam == 0 and c.l0.control):
                steps += self.scratch_steps(f"l0_{format(lam, 'g')}{s}")
        return steps + [Step(report.name, report.out, report.settings,
                             inputs=tuple(step.name for step in steps), call=report.call)]

    def run_pud(self, context: StepContext) -> None:
        from ..data.lm_conllu_subset import main as binarise_conllu

        binarise_conllu(["--data-bin", self.data_bin(context), "--spm-model", context.path("data/spm.model"),
                         "--subset", f"pud={os.path.join(self.data_root, self.c.pud_conllu)}",
                         "--out-dir", os.path.join(context.out, "bin")])

    def run_stats_pud(self, context: StepContext) -> None:
        st = self.c.stats
        run_fairseq_heads(stats_command, [
            context.path("pud/bin"), "--path", self.baseline_checkpoint(context), "--gen-subset", "pud",
            "--conllu", context.path("pud/bin/pud.conllu.gz"), "--metrics", "syntactic,positional,previous_token",
            "--bootstrap-replicates", st.bootstrap_replicates, "--out-dir", context.out, "--log-format", "none",
            *self.device()])

    def scratch_steps(self, name: str) -> List[Step]:
        c = self.c
        mask, scratch = f"masks/{name}/head_mask.json", f"scratch_{name}"

        def write_mask(context: StepContext) -> None:
            run_fairseq_heads(mask_command, [
                "--path", context.path(f"models/{name}/checkpoint_last.pt"),
                "--out", os.path.join(context.out, "head_mask.json")])

        def train(context: StepContext) -> List[str]:
            # the baseline's command; the later --head-mask and --max-update win in argparse
            return self.train_baseline(context) + [
                "--head-mask", context.path(mask), "--max-update", str(c.train.max_update + c.l0.updates)]

        def score(context: StepContext) -> None:
            run_fairseq_heads(lm_result_command, [
                self.data_bin(context), "--path", context.path(f"models/{scratch}/checkpoint_best.pt"),
                "--name", scratch, "--kind", "from_scratch", "--from-model", name, "--subset", "test",
                "--results-dir", context.results, "--batch-size", c.batch_size, "--seed", c.train.seed,
                "--baseline-seed", c.train.seed, "--out", os.path.join(context.out, "result.json"), *self.device()])

        return [
            Step(f"mask_{name}", f"masks/{name}", {}, inputs=(name,), call=write_mask),
            Step(scratch, f"models/{scratch}", {"model": asdict(c.model), "train": self.train_settings(),
                                                "updates": c.l0.updates},
                 inputs=("data", f"mask_{name}"), argv=train, resumable=True),
            Step(f"result_{scratch}", f"results/{scratch}", self.result_settings(),
                 inputs=("data", scratch), call=score),
        ]
