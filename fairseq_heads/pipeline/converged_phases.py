"""The converged protocol's phases as options and small steps, shared by the translation
(nmt_converged.py) and language-model (lm_converged.py) recipes: each recipe adds its own model,
criterion and scoring; the protocol itself (recipes/README.md, "protocols") is written once.
`v` is either recipe's protocol section (Converged or LmConverged: a `ConvergedProtocol`)."""
import os
import shutil
from dataclasses import dataclass
from typing import List, Tuple

from ..commands import mask as mask_command
from ..convergence import Validation, validation_line
from ..files import write_text_atomic
from .fairseq_steps import run_fairseq_heads, training_summary
from .runner import Step, StepContext

@dataclass(frozen=True)
class ConvergedProtocol:
    """The settings both recipes' converged protocols share (the toy scale's defaults); each
    recipe's section adds its own (nmt_converged.Converged, lm_converged.LmConverged)."""
    seeds: Tuple[int, ...] = ()       # the L0 models' training seeds; empty: the quick protocol
    validate_updates: int = 5
    plateau_validations: int = 2
    plateau_loss_tolerance: float = 0.005
    patience: int = 2
    l0_max_updates: int = 40
    fixed_mask_max_updates: int = 30
    scratch_max_updates: int = 60
    scratch_lambdas: Tuple[float, ...] = ()  # λs whose layouts are also trained from scratch (0: every head)


# The protocol's settings each phase reads. A phase's key has these only, so that raising one
# phase's cap re-runs that phase and what reads it, not the phases before it.
PHASE_SETTINGS = {
    "l0": ("validate_updates", "plateau_validations", "plateau_loss_tolerance", "l0_max_updates"),
    "fixed_mask": ("validate_updates", "patience", "fixed_mask_max_updates"),
    "scratch": ("validate_updates", "patience", "scratch_max_updates"),
}


def phase_settings(v, phase: str) -> dict:
    """What one phase of a converged model (or its from-scratch twin) depends on in `v`."""
    return {name: getattr(v, name) for name in PHASE_SETTINGS[phase]}


def validations(v) -> List[object]:
    """A validation (and a checkpoint) every `validate_updates` updates, none at epoch ends, so
    that "N validations" means N x validate_updates updates on either side."""
    return ["--validate-interval-updates", v.validate_updates, "--save-interval-updates", v.validate_updates,
            "--validate-interval", 1_000_000, "--keep-interval-updates", 1]


def l0_phase_options(v, context: StepContext, lam: float, trace_interval: int) -> List[object]:
    """The L0 phase's penalty, its stopping rule and its gate trace (the criterion is the recipe's)."""
    return ["--l0-lambda", lam, "--max-update", v.l0_max_updates, "--stop-on-plateau", v.plateau_validations,
            "--plateau-loss-tolerance", v.plateau_loss_tolerance,
            "--gate-trace", os.path.join(context.out, "gate_trace.jsonl"), "--gate-trace-interval", trace_interval]


def plateau_stop_options(train, context: StepContext) -> List[object]:
    """A training's plateau stop (`train.plateau_validations`, nmt_config.Train; none where 0)
    with its validation trace in the step's folder: the trace is the rule's memory when the run
    resumes. A run started before the stop was added (runner.Step.resumable_from) has no
    trace: it is written from the step's log first, so that the rule sees every validation, as
    it would have in a run with the stop from its start."""
    if not train.plateau_validations:
        return []
    trace = os.path.join(context.out, "validations.jsonl")
    if context.resumed and not os.path.exists(trace) and os.path.exists(context.log_path):
        write_text_atomic(trace, "".join(validation_line(r) for r in baseline_validations(context.log_path)))
    return ["--stop-on-plateau", train.plateau_validations, "--plateau-loss-tolerance", train.plateau_loss_tolerance,
            "--validation-trace", trace]


def write_l0_mask(name: str):
    """A call step: the L0 phase's open heads (models/NAME_l0) as a fixed head mask."""
    def call(context: StepContext) -> None:
        run_fairseq_heads(mask_command, [
            "--path", context.path(f"models/{name}_l0/checkpoint_last.pt"),
            "--out", os.path.join(context.out, "head_mask.json")])
    return call


def fixed_mask_phase_options(v, context: StepContext, name: str, mask: str) -> List[object]:
    """The fixed-mask phase from the L0 phase's last checkpoint, with MASK, to patience. Its
    folder also gets the L0 phase's traces: the report draws the heads dying over training, and
    the result file counts both phases' updates."""
    shutil.copy2(context.path(f"models/{name}_l0/gate_trace.jsonl"), context.out)
    shutil.copy2(context.path(f"models/{name}_l0/validations.jsonl"), os.path.join(context.out, "validations_l0.jsonl"))
    return ["--finetune-from-model", context.path(f"models/{name}_l0/checkpoint_last.pt"),
            "--head-mask", context.path(mask), "--max-update", v.fixed_mask_max_updates, "--patience", v.patience]


def phase_steps(name: str, settings: dict, v, baseline: str, l0_phase, fixed_mask_phase) -> List[Step]:
    """One converged model's training: `<name>_l0` (L0_PHASE, from the step BASELINE's model),
    `mask_<name>` (its open heads), then `<name>` (FIXED_MASK_PHASE with that mask); each phase's
    key holds SETTINGS and only the protocol settings it reads (PHASE_SETTINGS)."""
    return [
        Step(f"{name}_l0", f"models/{name}_l0", {**settings, "converged": phase_settings(v, "l0")},
             inputs=("data", baseline), argv=l0_phase, resumable=True),
        Step(f"mask_{name}", f"masks/{name}", {}, inputs=(f"{name}_l0",), call=write_l0_mask(name)),
        Step(name, f"models/{name}", {**settings, "converged": phase_settings(v, "fixed_mask")},
             inputs=("data", f"{name}_l0", f"mask_{name}"), argv=fixed_mask_phase, resumable=True),
    ]


def result_record(v, seed: int, name: str) -> List[object]:
    """The result file's protocol, seed and both phases (`fairseq-heads result`/`lm-result`
    options; {results}: the results folder)."""
    return ["--protocol", "converged", "--seed", seed, "--plateau-validations", v.plateau_validations,
            "--plateau-loss-tolerance", v.plateau_loss_tolerance,
            "--phase", f"l0={{results}}/models/{name}/validations_l0.jsonl",
            "--phase", f"fixed_mask={{results}}/models/{name}/validations.jsonl"]


# ------------------------------------------------------------------ the baseline as its own seed's full layout
def baseline_is_full_scratch(c, lam: float, seed: int) -> bool:
    """Whether the full layout (λ=0) trained from scratch with `seed` would be the baseline run
    again: the same architecture, data, optimiser and schedule (each recipe's scratch steps train
    with the baseline's settings), the same seed, and the same stop (no time cap; validations,
    patience and update cap equal; a baseline with a plateau stop lends its whole stop to the
    scratch models, nmt_converged.scratch_steps). A head mask of ones changes nothing (tests/core:
    masked ≡ plain). `c` is a translation or language-model recipe's config."""
    t, v = c.train, c.converged
    if getattr(t, "plateau_validations", 0):  # the scratch models then stop as the baseline did
        return lam == 0 and seed == t.seed and not t.minutes
    return (lam == 0 and seed == t.seed and not t.minutes and t.max_update == v.scratch_max_updates
            and t.patience == v.patience and t.validate_updates == v.validate_updates)


def baseline_validations(log_path: str) -> List[Validation]:
    """The validations of a fairseq-train log (--log-format json), one per update: a run resumed
    from its last checkpoint may log an update twice, and the later record is the kept one."""
    by_update = {}
    for record in training_summary(log_path)["valid"]:
        if "valid_num_updates" in record and "valid_loss" in record:
            update = int(record["valid_num_updates"])
            by_update[update] = Validation(update, float(record["valid_loss"]), None)
    return [by_update[update] for update in sorted(by_update)]


def reuse_baseline(checkpoint: str, log: str):
    """A call step: the baseline's best checkpoint (CHECKPOINT under the results folder; a hard
    link where the file system allows) and its validations, read from its training LOG, as this
    step's model (`checkpoint_best.pt`, `validations.jsonl`)."""
    def call(context: StepContext) -> None:
        target = os.path.join(context.out, "checkpoint_best.pt")
        try:
            os.link(context.path(checkpoint), target)
        except OSError:
            shutil.copy2(context.path(checkpoint), target)
        records = baseline_validations(context.path(log))
        if not records:
            raise ValueError(f"{context.path(log)}: no validation records to reuse")
        write_text_atomic(os.path.join(context.out, "validations.jsonl"), "".join(map(validation_line, records)))
    return call
