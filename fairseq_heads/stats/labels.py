"""Function labels for heads from the finalized statistics, with configurable thresholds.

Defaults (``PAPER_THRESHOLDS``):
- positional(k): share of query tokens whose argmax key is at offset k >= 0.9 (paper, Sec. 4.2).
- rare: share of sentences whose most-attended key is the rarest token >= 0.5 (our choice;
  the paper gives no threshold — see :mod:`rare` for why).
- syntactic(rel, dir): accuracy - best-fixed-offset baseline >= 0.10 (paper, Sec. 4.3:
  heads that beat the positional baseline by at least 10 points).
- LMs: previous-token (mass on q-1 >= 0.5), duplicate-token (mass on earlier copies >= 0.5),
  induction (score >= 0.4); see previous_token.py, duplicate_token.py, induction.py.

Labels are made from point estimates; pass e.g. ``ci_low`` tensors instead of estimates to
label only heads whose interval clears the threshold.  NaN values never produce a label.
A head is keyed ``(attention_type, layer, head)`` (0-based); statistics of shape ``(L, H)``
give layer and head directly, ``(H,)`` needs the ``layer`` argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from ..heads import HeadKey


@dataclass(frozen=True)
class LabelThresholds:
    positional: float = 0.9
    rare: float = 0.5
    syntactic_margin: float = 0.10
    # decoder-only LMs (our thresholds, fixed before any model was scored; see docs/metrics.md)
    previous_token: float = 0.5  # attention mass on position q-1
    duplicate_token: float = 0.5  # attention mass on earlier copies of the query's token
    induction: float = 0.4  # Olsson et al.'s induction score on repeated random probes


PAPER_THRESHOLDS = LabelThresholds()


def positional_labels(
    shares: torch.Tensor, offsets: Sequence[int], threshold: float = PAPER_THRESHOLDS.positional
) -> Dict[Tuple[int, ...], int]:
    """{head index: offset k} for heads whose largest share over offsets is >= threshold.

    ``shares`` is (*heads, K) with K = len(offsets).
    """
    shares = torch.as_tensor(shares, dtype=torch.float64)
    best_share, best = torch.nan_to_num(shares, nan=-1.0).max(-1)
    labels = {}
    for index in (best_share >= threshold).nonzero().tolist():
        labels[tuple(index)] = int(offsets[best[tuple(index)]])
    return labels


def rare_labels(rarest_share: torch.Tensor, threshold: float = PAPER_THRESHOLDS.rare) -> torch.Tensor:
    """Bool (*heads): share of sentences pointing at the rarest token >= threshold."""
    share = torch.as_tensor(rarest_share, dtype=torch.float64)
    return torch.nan_to_num(share, nan=-1.0) >= threshold


def syntactic_labels(
    accuracy_and_baseline: Mapping[Tuple[str, str], Tuple[torch.Tensor, float]],
    margin: float = PAPER_THRESHOLDS.syntactic_margin,
) -> Dict[Tuple[int, ...], List[Tuple[str, str]]]:
    """{head index: [(relation, direction), ...]} where accuracy - baseline >= margin.

    ``accuracy_and_baseline[(relation, direction)] = (accuracy (*heads), baseline)``; from a
    :class:`syntactic.SyntacticAccumulator` result use ``{k: (v.accuracy.estimate, v.baseline)}``.
    """
    labels: Dict[Tuple[int, ...], List[Tuple[str, str]]] = {}
    for slot, (accuracy, baseline) in accuracy_and_baseline.items():
        gain = torch.as_tensor(accuracy, dtype=torch.float64) - float(baseline)
        for index in (torch.nan_to_num(gain, nan=-1.0) >= margin).nonzero().tolist():
            labels.setdefault(tuple(index), []).append(tuple(slot))
    return labels


def at_least(estimate: torch.Tensor, threshold: float, label: str) -> Dict[Tuple[int, int], List[str]]:
    """{(layer, head): [label]} of the heads of an (L, H) `estimate` >= threshold (NaN never
    labels): the LM labels (previous-token, duplicate-token, induction)."""
    hits = (torch.nan_to_num(estimate, nan=-1.0) >= threshold).nonzero().tolist()
    return {(layer, head): [label] for layer, head in hits}


def _head_key(attention_type: str, index: Tuple[int, ...], layer: Optional[int]) -> HeadKey:
    if len(index) == 2:
        return (attention_type, index[0], index[1])
    if len(index) == 1 and layer is not None:
        return (attention_type, layer, index[0])
    raise ValueError(f"cannot name head {index}: statistics must be (L, H), or (H,) with layer given")


def head_labels(
    attention_type: str,
    positional: Optional[Tuple[torch.Tensor, Sequence[int]]] = None,
    rarest_share: Optional[torch.Tensor] = None,
    syntactic: Optional[Mapping[Tuple[str, str], Tuple[torch.Tensor, float]]] = None,
    thresholds: LabelThresholds = PAPER_THRESHOLDS,
    layer: Optional[int] = None,
) -> Dict[HeadKey, List[str]]:
    """All labels of one attention type's heads, e.g. ``{("enc-self", 0, 3): ["positional(-1)"]}``.

    Label strings: ``positional(k)``, ``rare``, ``syntactic(<relation>,<direction>)``.
    Only labelled heads appear.
    """
    out: Dict[HeadKey, List[str]] = {}
    if positional is not None:
        shares, offsets = positional
        for index, k in positional_labels(shares, offsets, thresholds.positional).items():
            out.setdefault(_head_key(attention_type, index, layer), []).append(f"positional({k})")
    if rarest_share is not None:
        for index in rare_labels(rarest_share, thresholds.rare).nonzero().tolist():
            out.setdefault(_head_key(attention_type, tuple(index), layer), []).append("rare")
    if syntactic is not None:
        for index, slots in syntactic_labels(syntactic, thresholds.syntactic_margin).items():
            key = _head_key(attention_type, index, layer)
            out.setdefault(key, []).extend(f"syntactic({rel},{direction})" for rel, direction in slots)
    return out
