"""The converged protocol's steps for the translation recipe (recipes/README.md, "protocols"):
per L0 model `<enc|all>_l0_<λ>_conv_s<seed>` (unique names; the report reads each model's
settings from its result file, and an unfinished L0 phase's from its settings file)

    <model>_l0        L0 fine-tune of the baseline until the plateau rule holds
                      (convergence.py: `plateau_validations` validations `validate_updates` apart
                      with the same open heads and < `plateau_loss_tolerance` relative valid-loss
                      change; at most `l0_max_updates`)
    mask_<model>      its open heads as a fixed head mask
    <model>           the fine-tune goes on with that mask and no penalty until --patience
                      (at most `fixed_mask_max_updates`; the best checkpoint is scored)
    bleu_<model>      BLEU and the result file with both phases' update counts
    scratch_<model>   for `scratch_lambdas` (all types): the same layout trained from random
                      init with the baseline's schedule, validations and patience; its BLEU
    michel_<m>_as_<model>  for `michel_metrics` (encoder models): the baseline's top-K encoder
                      heads by metric m, K as many as <model> kept, fine-tuned as <model>'s
                      fixed-mask phase: Michel et al. compared fairly (report/michel.py)
    speed_<model>     with `decode_speed` (encoder models): decoding tokens/s pruned against
                      masked, beside the FLOP-predicted speed-up

λ=0 (the control) runs the same protocol without a penalty: its scratch side is the full layout
trained from scratch, the reference of "trained vs scratch" (report/tables.py). Where the
baseline was itself trained to patience on the same schedule, that model of the baseline's own
seed *is* the baseline (`baseline_is_full_scratch`): it is reused, not trained again.
"""
import json
import os
from dataclasses import asdict, dataclass
from typing import List, Tuple

import torch

from ..files import write_text_atomic
from ..report.layout import PHASE_SETTINGS
from .fairseq_steps import train_argv
from .config import precision_settings
from .nmt_config import ALL_TYPES, BASELINE_CHECKPOINT, l0_settings, lambda_name, model_settings, train_settings
from .converged_phases import (ConvergedProtocol, baseline_is_full_scratch, fixed_mask_phase_options,
                               l0_phase_options, phase_settings, phase_steps, plateau_stop_options, result_record,
                               reuse_baseline, validations)
from .runner import Step, StepContext


@dataclass(frozen=True)
class Converged(ConvergedProtocol):
    # scratch_lambdas: all-types λs only (an encoder model's layout is not trained from scratch)
    michel_metrics: Tuple[str, ...] = ()     # for each encoder L0 model (λ > 0): the top-K encoder heads
                                             # by each of these metrics, K its heads, fine-tuned alike
    decode_speed: bool = False               # for each encoder L0 model (λ > 0): its decoding speed-up
                                             # pruned against masked, beside the FLOP prediction
    seeded_encoder_lambdas: Tuple[float, ...] = ()  # where set, only these encoder λs and the encoder
                                             # control run at every seed, every other model at the
                                             # first seed only (the headline point's spread, not
                                             # every point's); empty: every model at every seed


def runs_at_seed(v: Converged, side: str, lam: float, seed_index: int) -> bool:
    """Whether the (side, λ) model runs at the `seed_index`-th seed of `v.seeds`."""
    if seed_index == 0 or not v.seeded_encoder_lambdas:
        return True
    return side == "enc" and (lam == 0 or lam in v.seeded_encoder_lambdas)


def converged_sweep(nmt, lambdas: List[Tuple[str, float]], seeds: Tuple[int, ...]) -> List[Step]:
    """The converged models of every (side, λ) in LAMBDAS for every seed (`runs_at_seed`), seed by
    seed: a seed's L0 models and their controls come before the next seed's (the runner starts
    steps in list order, so a stopped sweep leaves whole seeds), and the comparisons of them all
    (Michel et al.'s heuristic, decoding speed) after every model."""
    models, comparisons = [], []
    for index, seed in enumerate(seeds):
        for side, lam in lambdas:
            if not runs_at_seed(nmt.c.converged, side, lam, index):
                continue
            own, compared = converged_steps(nmt, side, lam, seed)
            models += own
            comparisons += compared
    return models + comparisons


def converged_steps(nmt, side: str, lam: float, seed: int) -> Tuple[List[Step], List[Step]]:
    """The steps of one converged L0 model (and its from-scratch twin), and those that compare it
    (Michel et al.'s heuristic at its size, its decoding speed); `nmt` is the recipe's NmtSteps."""
    c, v, s = nmt.c, nmt.c.converged, nmt.suffix
    name = f"{side}_l0_{lambda_name(lam)}_conv_s{seed}{s}"
    kind, types, extra = (("encoder_l0", "enc-self", ["--freeze-decoder"]) if side == "enc"
                          else ("all_l0", ALL_TYPES, []))
    mask = f"masks/{name}/head_mask.json"
    settings = {"model": model_settings(c.model), "train": train_settings(c.train), "l0": l0_settings(c.l0),
                "side": side, "lambda": lam, "seed": seed, **precision_settings(c.autocast)}

    def gated(context: StepContext) -> List[object]:
        l0 = c.l0
        return nmt.common() + nmt.size() + nmt.training(c.train.max_tokens, seed, gate_adam=True) + [
            "--arch", "gated_transformer", "--gated-attention", types, *extra,
            "--optimizer", "gate_adam", "--lr", l0.lr, "--gate-lr-scale", l0.gate_lr_scale,
            "--lr-scheduler", "fixed", "--save-dir", context.out, *validations(v),
            "--validation-trace", os.path.join(context.out, "validations.jsonl")]

    def l0_phase(context: StepContext) -> List[str]:
        # what the report reads of this phase while its model has no result file yet (the
        # heads-dying figure): its settings, not its name (report/layout.py, PHASE_SETTINGS)
        phase = {"name": name, "kind": kind, "l0_lambda": lam, "protocol": "converged", "seed": seed,
                 "baseline_seed": c.train.seed, "gate_lr_scale": float(c.l0.gate_lr_scale), "phase": "l0"}
        write_text_atomic(os.path.join(context.out, PHASE_SETTINGS), json.dumps(phase, indent=1) + "\n")
        return train_argv(nmt.data_bin(context), gated(context) + [
            "--finetune-from-model", context.path(f"models/baseline{s}/{BASELINE_CHECKPOINT}"),
            "--criterion", "label_smoothed_cross_entropy_l0", *l0_phase_options(v, context, lam, c.l0.trace_interval)])

    def fixed_mask_phase(context: StepContext) -> List[str]:
        return train_argv(nmt.data_bin(context), gated(context) + [
            "--criterion", "label_smoothed_cross_entropy", *fixed_mask_phase_options(v, context, name, mask)])

    steps = phase_steps(name, settings, v, f"baseline{s}", l0_phase, fixed_mask_phase) + [
        nmt.bleu_step(name, kind, lam, checkpoint="checkpoint_best.pt", inputs=(f"mask_{name}",), head_mask=mask,
                      result_options=result_record(v, seed, name)),
    ]
    if side == "all" and lam in v.scratch_lambdas:
        steps += scratch_steps(nmt, name, lam, seed, mask)
    comparisons = []
    if side == "enc" and lam > 0:
        for metric in v.michel_metrics:
            comparisons += heuristic_steps(nmt, name, metric, seed, gated)
        if v.decode_speed:
            comparisons.append(speed_step(nmt, name, mask))
    return steps, comparisons


# Interleaved timing rounds per model, the median reported: on the 2-core CPU machine one round
# in two or three ran ~20% slow (16.5 s against 20 s for the same model), which two rounds cannot
# outvote.
SPEED_ROUNDS = 5


def speed_step(nmt, name: str, mask: str) -> Step:
    """The pruned model's decoding speed (beam search on generate.subset, this recipe's device)
    against the same model with its heads masked, and the speed-up its FLOPs predict
    (pruning/decode_speed.py): what the pruning buys at inference."""
    g = nmt.c.generate

    def call(context: StepContext) -> None:
        from ..gating.head_masks import load_head_mask
        from ..precision import autocast
        from ..pruning.decode_speed import compare_pruned

        # an encoder model's mask lists every type, the others whole: prune the encoder's heads
        # (the types its checkpoint gates)
        encoder = {"enc-self": load_head_mask(context.path(mask))["enc-self"]}
        with autocast(nmt.c.autocast, "cpu" if nmt.c.cpu else "cuda"):  # timed as the recipe decodes
            report = compare_pruned(context.path(f"models/{name}/checkpoint_best.pt"), nmt.data_bin(context),
                                    nmt.c.data.src, nmt.c.data.tgt, {name: encoder},
                                    g.subset, 1_000_000, g.beam, g.batch_size, SPEED_ROUNDS, nmt.c.cpu, context.out)
        for path in os.listdir(context.out):  # the pruned checkpoint was only the measured model
            if path.endswith(".pt"):
                os.remove(os.path.join(context.out, path))
        write_text_atomic(os.path.join(context.out, "decode_speed.json"), json.dumps(report, indent=1) + "\n")
    return Step(f"speed_{name}", f"speed/{name}", {"generate": asdict(g), "rounds": SPEED_ROUNDS,
                                                   **precision_settings(nmt.c.autocast)},
                inputs=("data", name, f"mask_{name}"), call=call, alone=True)  # a timing: no training beside it


def heuristic_steps(nmt, l0_name: str, metric: str, seed: int, gated) -> List[Step]:
    """Michel et al.'s choice at the L0 model's size: the baseline's top-K encoder heads by
    `metric` (its stats), K = the encoder heads `l0_name` kept; then the L0 model's fixed-mask
    fine-tune from the baseline with that mask. `gated`: the L0 model's training options."""
    c, v, s = nmt.c, nmt.c.converged, nmt.suffix
    name = f"michel_{metric}_as_{l0_name}"
    mask = f"masks/{name}/head_mask.json"

    def write_mask(context: StepContext) -> None:
        from ..gating.head_masks import load_head_mask, save_head_mask
        from ..pruning.importance import keep_top_k, read_head_scores

        kept = int(load_head_mask(context.path(f"masks/{l0_name}/head_mask.json"))["enc-self"].sum())
        scores = read_head_scores(context.path(f"stats/baseline{s}/heads.csv"), metric, types=("enc-self",))
        chosen = keep_top_k(scores, kept)
        save_head_mask({t: torch.stack(rows) for t, rows in chosen.items()}, os.path.join(context.out, "head_mask.json"))

    def fixed_mask_phase(context: StepContext) -> List[str]:
        return train_argv(nmt.data_bin(context), gated(context) + [
            "--finetune-from-model", context.path(f"models/baseline{s}/{BASELINE_CHECKPOINT}"),
            "--head-mask", context.path(mask), "--criterion", "label_smoothed_cross_entropy",
            "--max-update", v.fixed_mask_max_updates, "--patience", v.patience])

    settings = {"model": model_settings(c.model), "train": train_settings(c.train), "l0": l0_settings(c.l0),
                "converged": phase_settings(v, "fixed_mask"), "seed": seed, "metric": metric,
                **precision_settings(c.autocast)}
    return [
        Step(f"mask_{name}", f"masks/{name}", {"metric": metric},
             inputs=(f"mask_{l0_name}", f"stats{s}"), call=write_mask),
        Step(name, f"models/{name}", settings, inputs=("data", f"baseline{s}", f"mask_{name}"),
             argv=fixed_mask_phase, resumable=True),
        nmt.bleu_step(name, "heuristic", None, checkpoint="checkpoint_best.pt", inputs=(f"mask_{name}",),
                      head_mask=mask, result_options=[
                          "--protocol", "converged", "--seed", seed, "--from-model", l0_name,
                          "--phase", f"fixed_mask={{results}}/models/{name}/validations.jsonl"],
                      record=["--metric", metric]),
    ]


def scratch_steps(nmt, name: str, lam: float, seed: int, mask: str) -> List[Step]:
    """`name`'s layout (its mask) trained from random init as the baseline was, to patience; the
    baseline itself where it is that model (`baseline_is_full_scratch`). A baseline that stops on
    a plateau (`train.plateau_validations`) lends the scratch models its whole stop (validations,
    patience, plateau, cap) instead of the converged section's: the rule counts validations, so
    only at the baseline's interval does it mean the same thing."""
    c, v, s = nmt.c, nmt.c.converged, nmt.suffix
    t = c.train
    scratch = f"scratch_{name}"

    def stop(context: StepContext) -> List[object]:
        if t.plateau_validations:
            return ["--max-update", t.max_update, "--patience", t.patience, *validations(t),
                    *plateau_stop_options(t, context)]
        return ["--max-update", v.scratch_max_updates, "--patience", v.patience, *validations(v),
                "--validation-trace", os.path.join(context.out, "validations.jsonl")]

    def train(context: StepContext) -> List[str]:
        return train_argv(nmt.data_bin(context), nmt.common() + nmt.size() + nmt.training(t.max_tokens, seed) + [
            "--arch", "transformer", "--head-mask", context.path(mask),
            "--criterion", "label_smoothed_cross_entropy", "--optimizer", "adam", "--lr", t.lr,
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", t.warmup, "--save-dir", context.out,
            *stop(context)])

    # train_settings(t) holds the baseline's stop; the converged section's only where it is used
    settings = {"model": model_settings(c.model), "train": train_settings(t), "seed": seed,
                **({} if t.plateau_validations else {"converged": phase_settings(v, "scratch")}),
                **precision_settings(c.autocast)}
    if baseline_is_full_scratch(c, lam, seed):
        training = Step(scratch, f"models/{scratch}", {**settings, "reuses": f"baseline{s}"},
                        inputs=("data", f"baseline{s}", f"mask_{name}"),
                        call=reuse_baseline(f"models/baseline{s}/{BASELINE_CHECKPOINT}", f"logs/baseline{s}.log"))
    else:
        training = Step(scratch, f"models/{scratch}", settings, inputs=("data", f"mask_{name}"), argv=train,
                        resumable=True)
    return [
        training,
        nmt.bleu_step(scratch, "from_scratch", lam, checkpoint="checkpoint_best.pt", inputs=(f"mask_{name}",),
                      head_mask=mask, result_options=[
                          "--protocol", "converged", "--seed", seed, "--from-model", name,
                          "--phase", f"from_scratch={{results}}/models/{scratch}/validations.jsonl"]),
    ]
