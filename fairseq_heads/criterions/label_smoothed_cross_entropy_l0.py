"""Label-smoothed cross entropy + λ · relaxed L0 norm of the head gates (Voita et al. 2019, eq. 6).

Normalisation: fairseq sums the loss over the batch and divides the gradient by the batch's
sample size (target tokens, or sentences with --sentence-avg). The penalty is added as
λ · E[L0] · sample_size, so the objective actually optimised is

    mean cross entropy per target token (per sentence with --sentence-avg) + λ · Σ_heads P(gate != 0)

whatever the batch size, number of workers or --update-freq: λ values are comparable across
them, and the logged `loss` stays the translation loss alone (comparable with an ungated model).

Logged besides (console, log file and TensorBoard alike): expected_l0, l0_loss and
open_heads_<type>. Each head's P(open) is not a metric here, so that the console line stays one
field per summary: the `*_heads` tasks write it to TensorBoard (`p_open/<type>/<layer>/<head>`)
and to --gate-trace (tasks/head_hooks.py).
"""
import math
from dataclasses import dataclass, field
from typing import Optional

from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.logging import metrics

from ..models.gated_transformer import expected_l0, open_heads_per_type
from .lagrangian import HeadCountLagrangian, reduce_lagrangian_metrics
from ..heads import ATTENTION_TYPES


@dataclass
class LabelSmoothedCrossEntropyL0Config(LabelSmoothedCrossEntropyCriterionConfig):
    l0_lambda: float = field(
        default=0.0,
        metadata={"help": "weight λ of the relaxed L0 penalty Σ P(gate != 0), per target token "
                          "(per sentence with --sentence-avg)"},
    )
    # --- extension: --target-heads (fairseq_heads/criterions/lagrangian.py) ---
    target_heads: Optional[str] = field(
        default=None,
        metadata={"help": "train toward exactly K open heads: K (all gated heads) or "
                          "TYPE:K,... (e.g. enc-self:10,enc-dec:20); adds a Lagrangian "
                          "λ1 (E[L0] - K) + λ2 (E[L0] - K)^2 with trainable multipliers, and the "
                          "end model keeps the top-K log-alphas (see gating/head_target.py)"},
    )


def open_heads_key(attention_type: str) -> str:
    return "open_heads_" + attention_type.replace("-", "_")


def check_l0_lambda(l0_lambda: float) -> None:
    if not (l0_lambda >= 0 and math.isfinite(l0_lambda)):
        raise ValueError(f"--l0-lambda must be a finite number >= 0, got {l0_lambda}")


def add_l0_terms(criterion, model, loss, sample_size, logging_output):
    """loss + λ·E[L0]·sample_size (+ the --target-heads Lagrangian), and the gate logs.
    `criterion` has `l0_lambda` and `head_count_lagrangian` (shared by the *_l0 criteria)."""
    penalty = expected_l0(model).to(loss)
    if criterion.l0_lambda > 0:
        loss = loss + criterion.l0_lambda * penalty * sample_size
    if criterion.head_count_lagrangian is not None:  # --target-heads extension
        lagrangian, logs = criterion.head_count_lagrangian(model)
        loss = loss + lagrangian.to(loss) * sample_size
        logging_output.update(logs)
    # Per-batch values with a weight, so that summing over workers and batches averages them.
    logging_output["l0_batches"] = 1
    logging_output["expected_l0"] = penalty.item()
    logging_output["l0_loss"] = criterion.l0_lambda * penalty.item()
    for attention_type, (opened, _) in open_heads_per_type(model).items():
        logging_output[open_heads_key(attention_type)] = opened
    return loss


def reduce_l0_metrics(logging_outputs) -> None:
    """Log expected L0, the L0 loss and open heads per type, averaged over batches, then the
    --target-heads Lagrangian's values."""
    batches = sum(log.get("l0_batches", 0) for log in logging_outputs)
    if batches == 0:
        return
    metrics.log_scalar("expected_l0", sum(log.get("expected_l0", 0) for log in logging_outputs) / batches, batches, round=2)
    metrics.log_scalar("l0_loss", sum(log.get("l0_loss", 0) for log in logging_outputs) / batches, batches, round=4)
    for attention_type in ATTENTION_TYPES:
        key = open_heads_key(attention_type)
        if any(key in log for log in logging_outputs):
            metrics.log_scalar(key, sum(log.get(key, 0) for log in logging_outputs) / batches, batches, round=1)
    reduce_lagrangian_metrics(logging_outputs, batches)  # --target-heads extension




class L0PenaltyMixin:
    """forward adds λ·E[L0]·sample_size (and the --target-heads Lagrangian) to the base
    criterion's loss; mixed in before a fairseq criterion (call `_init_l0` in __init__)."""

    def _init_l0(self, l0_lambda: float, target_heads: Optional[str]) -> None:
        check_l0_lambda(l0_lambda)
        self.l0_lambda = l0_lambda
        # --target-heads extension: the multipliers are criterion parameters (fairseq's
        # trainer optimises the criterion's parameters with the model's).
        self.head_count_lagrangian = HeadCountLagrangian(target_heads) if target_heads else None

    def forward(self, model, sample, reduce=True):
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        return add_l0_terms(self, model, loss, sample_size, logging_output), sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        reduce_l0_metrics(logging_outputs)

    def load_state_dict(self, state_dict, strict=True, **kwargs):
        # A checkpoint of a criterion without parameters (--finetune-from-model of a plain
        # model) has none: a --target-heads run then starts with fresh multipliers.
        if state_dict is None:
            return None
        return super().load_state_dict(state_dict, strict=strict, **kwargs)


@register_criterion("label_smoothed_cross_entropy_l0", dataclass=LabelSmoothedCrossEntropyL0Config)
class LabelSmoothedCrossEntropyL0Criterion(L0PenaltyMixin, LabelSmoothedCrossEntropyCriterion):
    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0,
                 report_accuracy=False, l0_lambda=0.0, target_heads=None):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        self._init_l0(l0_lambda, target_heads)
