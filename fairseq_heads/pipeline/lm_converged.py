"""The converged protocol's steps for the language-model recipe (issue 37, item 10): the
translation recipe's protocol (nmt_converged.py) on a decoder-only LM. Per L0 model
`l0_<λ>_conv_s<seed>`:

    <model>_l0        L0 fine-tune of the baseline until the plateau rule holds
                      (convergence.py: `plateau_validations` validations `validate_updates` apart
                      with the same open heads and < `plateau_loss_tolerance` relative valid-loss
                      change; at most `l0_max_updates`)
    mask_<model>      its open heads as a fixed head mask
    <model>           the fine-tune goes on with that mask and no penalty until --patience (at
                      most `fixed_mask_max_updates`); its best checkpoint is the model
    result_<model>    test perplexity of that checkpoint (its masked heads count as removed:
                      masked and pruned are the same function), with both phases' update counts
    stats_<model>     its surviving heads' functions
    scratch_<model>   for `scratch_lambdas`: the same layout trained from random init with the
                      baseline's schedule, validations and patience (at most `scratch_max_updates`);
                      λ=0's layout is every head: the full-layout-from-scratch control, against
                      which a pruned layout's from-scratch cost is measured
    result_scratch_<model>

λ=0 (the control) runs the same protocol without a penalty.
"""
import os
from dataclasses import asdict, dataclass
from typing import List

from .config import settings_except
from .converged_phases import (ConvergedProtocol, baseline_is_full_scratch, fixed_mask_phase_options,
                               l0_phase_options, phase_settings, phase_steps, result_record, reuse_baseline,
                               validations)
from .fairseq_steps import train_argv
from .runner import Step, StepContext


@dataclass(frozen=True)
class LmConverged(ConvergedProtocol):
    scratch_max_updates: int = 80


def converged_name(lam: float, seed: int, suffix: str) -> str:
    return f"l0_{format(lam, 'g')}_conv_s{seed}{suffix}"


def lm_converged_steps(lm, lam: float, seed: int) -> List[Step]:
    """The steps of one converged L0 model (and its from-scratch twin); `lm` is the recipe's LmSteps."""
    c, v, s = lm.c, lm.c.converged, lm.suffix
    name = converged_name(lam, seed, s)
    mask = f"masks/{name}/head_mask.json"
    settings = {"model": asdict(c.model), "train": lm.train_settings(), "l0": settings_except(c.l0, "lambdas", "control"),
                "lambda": lam, "seed": seed}

    def gated(context: StepContext) -> List[object]:
        return lm.model_options(gate_adam=True) + [
            "--optimizer", "gate_adam", "--lr", c.l0.lr, "--gate-lr-scale", c.l0.gate_lr_scale,
            "--lr-scheduler", "fixed", "--save-dir", context.out, *validations(v),
            "--validation-trace", os.path.join(context.out, "validations.jsonl"), "--seed", seed]

    def l0_phase(context: StepContext) -> List[str]:
        return train_argv(lm.data_bin(context), gated(context) + [
            "--finetune-from-model", lm.baseline_checkpoint(context),
            "--criterion", "cross_entropy_l0", *l0_phase_options(v, context, lam, c.l0.trace_interval)])

    def fixed_mask_phase(context: StepContext) -> List[str]:
        return train_argv(lm.data_bin(context), gated(context) + [
            "--criterion", "cross_entropy", *fixed_mask_phase_options(v, context, name, mask)])

    steps = phase_steps(name, settings, v, f"baseline{s}", l0_phase, fixed_mask_phase) + [
        Step(f"result_{name}", f"results/{name}", lm.result_settings(),
             inputs=("data", name), call=lm.result_call(name, lam, checkpoint=f"models/{name}/checkpoint_best.pt",
                                                        options=result_record(v, seed, name))),
        Step(f"stats_{name}", f"stats/{name}", lm.stats_settings(), inputs=("data", name),
             call=lm.stats_call(name, checkpoint=f"models/{name}/checkpoint_best.pt")),
    ]
    if lam in v.scratch_lambdas:
        steps += scratch_steps(lm, name, lam, seed, mask)
    return steps


def scratch_steps(lm, name: str, lam: float, seed: int, mask: str) -> List[Step]:
    """`name`'s layout (its mask) trained from random init as the baseline was, to patience; the
    baseline itself where it is that model (converged_phases.baseline_is_full_scratch)."""
    c, v = lm.c, lm.c.converged
    scratch = f"scratch_{name}"
    if lam == 0:  # the full layout: every head, not whichever the control's gates happened to keep
        mask, mask_step = "masks/all_open/head_mask.json", "open_mask"
    else:
        mask_step = f"mask_{name}"

    def train(context: StepContext) -> List[str]:
        return train_argv(lm.data_bin(context), lm.baseline_options(context, context.path(mask)) + [
            "--max-update", v.scratch_max_updates, "--patience", v.patience, *validations(v),
            "--validation-trace", os.path.join(context.out, "validations.jsonl"), "--seed", seed])

    settings = {"model": asdict(c.model), "train": lm.train_settings(), "converged": phase_settings(v, "scratch"), "seed": seed}
    if baseline_is_full_scratch(c, lam, seed):  # the baseline trained to patience on this schedule
        training = Step(scratch, f"models/{scratch}", {**settings, "reuses": f"baseline{lm.suffix}"},
                        inputs=("data", f"baseline{lm.suffix}", mask_step),
                        call=reuse_baseline(f"models/baseline{lm.suffix}/checkpoint_best.pt",
                                            f"logs/baseline{lm.suffix}.log"))
    else:
        training = Step(scratch, f"models/{scratch}", settings, inputs=("data", mask_step), argv=train,
                        resumable=True)
    return [
        training,
        Step(f"result_{scratch}", f"results/{scratch}", lm.result_settings(),
             inputs=("data", scratch, mask_step),
             call=lm.result_call(scratch, lam, checkpoint=f"models/{scratch}/checkpoint_best.pt", kind="from_scratch",
                                 options=["--from-model", name, "--protocol", "converged", "--seed", seed,
                                          "--phase", f"from_scratch={{results}}/models/{scratch}/validations.jsonl"])),
    ]
