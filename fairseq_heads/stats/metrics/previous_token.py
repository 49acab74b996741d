"""Previous-token heads of a causal (decoder-only) model.

Definition (exactly what is computed), per head, pooled over the subset:

    mass(head)  = sum_{q in Q} a[head, q, q-1] / |Q|
    share(head) = #{q in Q : argmax_{k in K_q} a[head, q, k] == q-1} / |Q|

Q: query positions that are real tokens (not pad, not EOS) whose previous position q-1 is a real
token too (so the first token of a block and the token after an EOS are not queries); K_q: the
real tokens at positions <= q (the causal prefix, EOS excluded, as for confidence).  Ties in the
argmax go to the earliest position.  Uniform attention over n prefix tokens scores 1/n on both.

Label (stated before any model was scored): ``previous-token`` when mass >= 0.5, i.e. the head
puts the majority of its attention on the previous token.  share is the paper's positional(-1)
share restricted to these queries; its 0.9 threshold is the positional label.
Bootstrap unit: the sentence / block.
"""
from __future__ import annotations

from typing import Sequence, Tuple

import torch

from ._batch import AttentionInput, expand_mask, per_layer, prefix_argmax, stack_layers
from ..streaming import PairedRatioAccumulator
from ..labels import at_least
from ..registry import LANGUAGE_MODEL, WEIGHTS, Heatmap, Metric, bootstrap, register
from ..streaming import ESTIMATE_SUFFIXES, estimate_cells, estimate_columns


def previous_token_sums(attn: torch.Tensor, token_mask: torch.Tensor
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sentence (mass numerator, share numerator, denominator), each (B, *heads)."""
    return previous_token_sums_from_argmax(attn, prefix_argmax(attn, token_mask), token_mask)


def previous_token_sums_from_argmax(attn: torch.Tensor, best: torch.Tensor, token_mask: torch.Tensor
                                    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`previous_token_sums` given each query's argmax over its causal prefix (B, *heads, T)
    (e.g. shared with other metrics); of ``attn`` only the diagonal a[q, q-1] is read."""
    num_head_dims = attn.dim() - 3
    queries = token_mask.clone()
    queries[:, 0] = False
    queries[:, 1:] &= token_mask[:, :-1]
    # a[q, q-1], (B, *heads, T-1); float64 after taking the diagonal, not of the whole tensor
    on_previous = torch.diagonal(attn, offset=-1, dim1=-2, dim2=-1).to(torch.float64)
    on_previous = torch.cat([on_previous.new_zeros(on_previous.shape[:-1] + (1,)), on_previous], -1)
    position = torch.arange(token_mask.shape[-1], device=attn.device)
    hit = (best == position - 1)
    q = expand_mask(queries, num_head_dims)
    mass = (on_previous * q).sum(-1)
    share = (hit & q).to(torch.float64).sum(-1)
    count = q.to(torch.float64).sum(-1).expand_as(mass)
    return mass, share, count


class PreviousTokenAccumulator(PairedRatioAccumulator):
    """Streams :func:`previous_token_sums`; finalize gives (mass, share) estimates of head_shape."""

    def update(self, attn: AttentionInput, token_mask: torch.Tensor) -> None:
        self.update_pair(*per_layer(previous_token_sums, attn, token_mask))

    def update_from_argmax(self, weights: Sequence[torch.Tensor], best: Sequence[torch.Tensor],
                           token_mask: torch.Tensor) -> None:
        """:meth:`update` of a list of layers, given each layer's causal-prefix argmax."""
        self.update_pair(*stack_layers([previous_token_sums_from_argmax(w, b, token_mask)
                                        for w, b in zip(weights, best)]))


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class PreviousToken(Metric):
    name, attention_types, needs = "previous_token", ("dec-self",), WEIGHTS
    model_kinds = (LANGUAGE_MODEL,)
    heatmap = Heatmap("previous_token_mass", "previous-token: attention mass on q-1", (0.0, 1.0))
    label_colours = (("previous-token", "#64b5cd"),)
    label_abbreviations = (("previous-token", "prev"),)

    def accumulator(self, shape, run):
        return PreviousTokenAccumulator(shape, **bootstrap(run))

    def update(self, acc, view):
        acc.update_from_argmax(view.weights, view.reductions.prefix_argmax(), view.key_mask)

    def columns(self, run):
        return (estimate_columns("previous_token_mass")
                + estimate_columns("previous_token_share", ESTIMATE_SUFFIXES[:3]))

    def cells(self, pair, index, run):
        mass, share = pair
        return {**estimate_cells("previous_token_mass", mass, index),
                **estimate_cells("previous_token_share", share, index, ESTIMATE_SUFFIXES[:3])}

    def labels(self, pair, run):
        return at_least(pair[0].estimate, run.options.thresholds.previous_token, "previous-token")


register(PreviousToken())
