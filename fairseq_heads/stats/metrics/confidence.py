"""Head confidence (Voita et al. 2019, Sec. 4.1).

Definition (exactly what is computed):

    confidence(head) = sum_s sum_{q in Q_s} max_{k in K_s} a_s[head, q, k]  /  sum_s |Q_s|

where ``s`` runs over sentences, ``Q_s`` are the sentence's query positions selected by
``query_mask`` (real tokens, EOS and padding excluded) and ``K_s`` the key positions
selected by ``key_mask``; ``a`` are the attention probabilities as produced by the model
(not renormalised over ``K_s``).  It is a token-weighted mean: every query token counts
once, long sentences weigh more.

EOS choice.  The paper defines confidence as "the average of its maximum attention weight
excluding the end of sentence symbol".  We exclude EOS both as a query and, with the
standard ``key_mask`` (non-EOS), as a candidate key: probability mass a head parks on EOS
(the common "no-op" pattern) does not count as confident attention to a token.  The mass
is not renormalised away either, so such a head gets a *low* confidence.  To take the max
over all real keys including EOS instead, pass ``key_mask | eos_mask`` — the functions use
whichever key set they are given.

A head attending uniformly over n keys has confidence 1/n.
Bootstrap unit: the sentence (see :mod:`streaming`).
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch

from ._batch import AttentionInput, check_shapes, expand_mask, masked_max, per_layer
from ..streaming import DEFAULT_REPLICATES, DEFAULT_SEED, RatioAccumulator, RatioEstimate
from ...heads import ATTENTION_TYPES
from ..registry import WEIGHTS, Heatmap, Metric, bootstrap, register


def max_attention_per_query(attn: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """Max attention weight over the keys selected by ``key_mask``: (B, *heads, Tq, Tk) -> (B, *heads, Tq).

    -inf for rows of sentences without any selected key.  In ``attn``'s dtype (a max is exact).
    """
    num_head_dims = attn.dim() - 3
    return masked_max(attn, expand_mask(key_mask, num_head_dims + 1))


def confidence_sums(
    attn: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-sentence numerator and denominator of confidence, both (B, *heads).

    numerator = sum over selected queries of the max attention over selected keys;
    denominator = number of selected queries (0 for sentences without selected keys).
    """
    check_shapes(attn, query_mask, key_mask)
    return confidence_sums_from_max(max_attention_per_query(attn, key_mask), query_mask, key_mask)


def confidence_sums_from_max(
    max_weight: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`confidence_sums` from the per-query max (B, *heads, Tq) of :func:`max_attention_per_query`."""
    num_head_dims = max_weight.dim() - 2
    # A query with no key to attend to (empty sentence) is not a measurement.
    valid_query = query_mask & key_mask.any(-1, keepdim=True)
    valid = expand_mask(valid_query, num_head_dims)  # (B, 1.., Tq)
    # float64 from here: the max is exact in the weights' dtype, the sum over queries is not
    numerator = max_weight.to(torch.float64).masked_fill(~valid, 0.0).sum(-1)
    denominator = valid.to(torch.float64).sum(-1).expand_as(numerator)
    return numerator, denominator


class ConfidenceAccumulator:
    """Streams :func:`confidence_sums` over batches; one value per head.

    Args:
        head_shape: ``(H,)`` when ``update`` gets one layer (B, H, Tq, Tk), ``(L, H)`` when it
            gets a list of L layers or a stacked (B, L, H, Tq, Tk) tensor.
        replicates, seed: bootstrap settings (see :class:`RatioAccumulator`).
    """

    def __init__(self, head_shape: Sequence[int], replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED):
        self.ratio = RatioAccumulator(head_shape, replicates=replicates, seed=seed)

    def update(self, attn: AttentionInput, query_mask: torch.Tensor, key_mask: torch.Tensor) -> None:
        numerator, denominator = per_layer(confidence_sums, attn, query_mask, key_mask)
        self.ratio.update(numerator, denominator)

    def update_from_max(self, max_weight: AttentionInput, query_mask: torch.Tensor,
                        key_mask: torch.Tensor) -> None:
        """:meth:`update` from :func:`max_attention_per_query` of each layer (e.g. shared)."""
        numerator, denominator = per_layer(confidence_sums_from_max, max_weight, query_mask, key_mask)
        self.ratio.update(numerator, denominator)

    def finalize(self) -> RatioEstimate:
        """(estimate, count = number of query tokens, ci_low, ci_high), each of ``head_shape``."""
        return self.ratio.finalize()

    def replicate_estimates(self) -> torch.Tensor:
        """Bootstrap replicates of the confidence, (R, *head_shape)."""
        return self.ratio.replicate_estimates()


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class Confidence(Metric):
    name, attention_types, needs = "confidence", ATTENTION_TYPES, WEIGHTS
    in_agreement = True
    heatmap = Heatmap("confidence", "confidence (mean max attention)", (0.0, 1.0))

    def accumulator(self, shape, run):
        return ConfidenceAccumulator(shape, **bootstrap(run))

    def update(self, acc, view):
        # the max over keys is shared with the other weights metrics (collect.AttentionView)
        acc.update_from_max(view.reductions.key_max()[0], view.query_mask, view.key_mask)


register(Confidence())
