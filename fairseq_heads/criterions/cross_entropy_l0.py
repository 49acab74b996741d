"""Cross entropy + λ · relaxed L0 norm of the head gates: `label_smoothed_cross_entropy_l0`
without label smoothing, for language models (`--task language_modeling[_heads]`) or wherever
fairseq's plain `cross_entropy` is the loss. Same normalisation: λ per target token."""
from dataclasses import dataclass, field
from typing import Optional

from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig

from .label_smoothed_cross_entropy_l0 import L0PenaltyMixin, LabelSmoothedCrossEntropyL0Config


@dataclass
class CrossEntropyL0Config(CrossEntropyCriterionConfig):
    l0_lambda: float = field(default=0.0, metadata=LabelSmoothedCrossEntropyL0Config.__dataclass_fields__["l0_lambda"].metadata)
    target_heads: Optional[str] = field(
        default=None, metadata=LabelSmoothedCrossEntropyL0Config.__dataclass_fields__["target_heads"].metadata)


@register_criterion("cross_entropy_l0", dataclass=CrossEntropyL0Config)
class CrossEntropyL0Criterion(L0PenaltyMixin, CrossEntropyCriterion):
    def __init__(self, task, sentence_avg, l0_lambda=0.0, target_heads=None):
        super().__init__(task, sentence_avg)
        self._init_l0(l0_lambda, target_heads)
