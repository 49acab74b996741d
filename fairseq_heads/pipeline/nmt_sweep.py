"""The translation recipes that were bash before issue 39 (Multi30k en->de, newstest en->ru, the
demo): nmt.py's steps plus two things those recipes did and NmtSteps does not.

    mask_all_l0_<λ>      the open heads of a quick-protocol all-types L0 model, as a head mask
    scratch_all_l0_<λ>   for the λs of `scratch_lambdas`: that layout trained from random init
                         with the baseline's schedule (quick protocol; the converged protocol
                         has its own, converged.scratch_lambdas); bleu_scratch_all_l0_<λ>
    data                 may read several train files (`data.extra_train`: newstest years)

A `SweepRecipe` with no scratch λs and no extra train files has exactly NmtSteps' steps and keys.
"""
import os
import shutil
from dataclasses import dataclass, field
from typing import List, Tuple

from ..commands import mask as mask_command, prepare as prepare_command
from .fairseq_steps import run_fairseq_heads
from .nmt import NmtRecipe, NmtSteps
from .nmt_config import Data, lambda_name, model_settings, train_settings
from .runner import Step, StepContext


@dataclass(frozen=True)
class CorpusData(Data):
    # more train files under the corpus folder, after prefix[0] (e.g. newstest 2013-2017)
    extra_train: Tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepRecipe(NmtRecipe):
    data: Data = field(default_factory=CorpusData)
    # all-types λs of the quick protocol whose pruned layout is also trained from scratch
    scratch_lambdas: Tuple[float, ...] = ()


class SweepSteps(NmtSteps):
    def steps(self) -> List[Step]:
        steps = super().steps()
        report = steps.pop()  # it reads every step: rebuilt below with the new ones
        c, s = self.c, self.suffix
        if not c.converged.seeds:
            for lam in c.scratch_lambdas:
                if lam not in c.l0.all_lambdas and not (lam == 0 and c.l0.control and c.l0.all_lambdas):
                    continue
                steps += self.scratch_steps(f"all_l0_{lambda_name(lam)}{s}", lam)
        return steps + [Step(report.name, report.out, report.settings,
                             inputs=tuple(step.name for step in steps), call=report.call)]

    def scratch_steps(self, name: str, lam: float) -> List[Step]:
        mask = f"masks/{name}/head_mask.json"
        scratch = f"scratch_{name}"

        def write_mask(context: StepContext) -> None:
            run_fairseq_heads(mask_command, [
                "--path", context.path(f"models/{name}/checkpoint_last.pt"),
                "--out", os.path.join(context.out, "head_mask.json")])

        def train(context: StepContext) -> List[str]:  # the baseline's command, with the layout
            return self.train_baseline(context) + ["--head-mask", context.path(mask)]

        return [
            Step(f"mask_{name}", f"masks/{name}", {}, inputs=(name,), call=write_mask),
            Step(scratch, f"models/{scratch}", {"model": model_settings(self.c.model),
                                                "train": train_settings(self.c.train)},
                 inputs=("data", f"mask_{name}"), argv=train, resumable=True),
            self.bleu_step(scratch, "from_scratch", lam, checkpoint="checkpoint_best.pt", inputs=(f"mask_{name}",),
                           head_mask=mask, result_options=["--protocol", "quick", "--seed", self.c.train.seed,
                                                           "--from-model", name]),
        ]

    def run_data(self, context: StepContext) -> None:
        d = self.c.data
        extra = getattr(d, "extra_train", ())
        if not extra:
            return super().run_data(context)
        folder = os.path.join(self.data_root, d.corpus)

        def pair(stem: str) -> str:
            return f"{folder}/{stem}.{d.src}.gz,{folder}/{stem}.{d.tgt}.gz"

        inputs = [item for stem in (d.prefix[0],) + tuple(extra) for item in ("--train", pair(stem))]
        inputs += ["--valid", pair(d.prefix[1]), "--test", pair(d.prefix[2])]
        work = context.path("prepare")
        run_fairseq_heads(prepare_command, [
            "--work-dir", work, "--src", d.src, "--tgt", d.tgt, *inputs, "--max-len", d.max_len,
            "--vocab-size", d.vocab_size, "--workers", max(1, min(16, os.cpu_count() or 1))])
        shutil.copytree(os.path.join(work, "bin"), os.path.join(context.out, "bin"))
        shutil.copy2(os.path.join(work, "spm.model"), context.out)


def extra_train_files(data: Data, data_root: str) -> List[str]:
    """The files of `data.extra_train` (checked before a run, as the other corpus files)."""
    return [os.path.join(data_root, data.corpus, f"{stem}.{lang}.gz")
            for stem in getattr(data, "extra_train", ()) for lang in (data.src, data.tgt)]
