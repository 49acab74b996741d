"""Which heads `fairseq-heads prune` removes: the mask policies. The command only parses its
options into one of them; `checkpoint.prune_checkpoint` asks it for the mask.

A policy chooses the head mask (1 kept, 0 removed) for the model as its checkpoint built it,
before a plain model is given gates (whether it has gates is part of the choice), and says
which model the pruned one must equal (`override_gates`):

- the model as its gates run it, kept heads keeping their gate values: pruning by the gates;
- the model with the mask as a head mask (`--head-mask`: kept heads fully open): pruning by
  importance scores, by whole KV groups (a kept group's heads are all kept, also those its gates
  had closed), or by a mask given as such.

The unit (`--prune-unit`) is a single query head, or a whole KV group of a grouped-query model.
"""
from dataclasses import dataclass
from typing import FrozenSet, Mapping, Optional

from torch import nn

from ..gating.gated_attention import iter_gates
from ..gating.head_masks import head_mask_from_gates
from ..heads import heads_per_layer
from .gqa import keep_top_k_groups, kv_groups, whole_group_mask
from .importance import HeadScores, check_scores_match_model, keep_top_k
from .physical import HeadPruningError

PRUNE_UNITS = ("query", "kv-group")


def _check_unit(unit: str) -> None:
    if unit not in PRUNE_UNITS:
        raise HeadPruningError(f"--prune-unit: {unit!r} is not one of {', '.join(PRUNE_UNITS)}")


@dataclass(frozen=True)
class KeepOpenGates:
    """--from-gates: keep the heads whose gates are open (gating/head_target's rule: deterministic
    gate > 0, or the top K of a --target-heads run) in the gated types `types` (None: every gated
    type); other types are kept whole. Unit "kv-group": a KV group with an open head is kept
    whole."""
    types: Optional[FrozenSet[str]] = None
    unit: str = "query"

    def __post_init__(self):
        _check_unit(self.unit)

    @property
    def override_gates(self) -> bool:
        return self.unit == "kv-group"

    def choose(self, model: nn.Module, checkpoint: str) -> Mapping:
        gated = {t for t, _, _ in iter_gates(model)}
        if not gated:
            raise HeadPruningError(f"{checkpoint}: no gated heads in this checkpoint (use --from-importance)")
        if self.types and not self.types <= gated:
            raise HeadPruningError(f"--types: {', '.join(sorted(self.types - gated))} not gated in "
                                   f"{checkpoint} (gated: {', '.join(sorted(gated))})")
        mask = {t: m for t, m in head_mask_from_gates(model).items() if self.types is None or t in self.types}
        return whole_group_mask(mask, kv_groups(model)) if self.unit == "kv-group" else mask


@dataclass(frozen=True)
class KeepTopScored:
    """--from-importance: keep the `keep` highest-scoring heads in total over the scored types
    (`per_type`: `keep` of each type); unit "kv-group": the `keep` KV groups of highest mean
    score. Types without scores are kept whole. `source` names the scores in errors."""
    scores: HeadScores
    keep: int
    per_type: bool = False
    unit: str = "query"
    source: str = "scores"

    override_gates = True  # "this model with that head mask", even where it has trained gates

    def __post_init__(self):
        _check_unit(self.unit)
        if self.unit == "kv-group" and self.per_type:
            raise HeadPruningError("--per-type goes with --prune-unit query")

    def choose(self, model: nn.Module, checkpoint: str) -> Mapping:
        check_scores_match_model(self.scores, heads_per_layer(model), self.source)
        if self.unit == "kv-group":
            return keep_top_k_groups(self.scores, kv_groups(model), self.keep)
        return keep_top_k(self.scores, self.keep, per_type=self.per_type)


@dataclass(frozen=True)
class GivenMask:
    """A head mask chosen elsewhere (benchmarks): the model with it as a head mask."""
    mask: Mapping

    override_gates = True

    def choose(self, model: nn.Module, checkpoint: str) -> Mapping:
        return self.mask
