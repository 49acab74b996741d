"""Duplicate-token heads of a causal model: attention to earlier copies of the query's token.

Definition (exactly what is computed), per head, pooled over the subset:

    mass(head)   = sum_{q in Q} sum_{k < q, x_k == x_q} a[head, q, k] / |Q|
    chance(head) = sum_{q in Q} #{k < q : x_k == x_q} / #K_q / |Q|

Q: real query tokens (not pad, not EOS) with at least one earlier real occurrence of their own
token in the block; K_q: the real tokens at positions <= q.  ``chance`` is what uniform attention
over the prefix scores; a head attending only to earlier copies scores mass 1.

Label (stated before any model was scored): ``duplicate-token`` when mass >= 0.5.
Bootstrap unit: the sentence / block.
"""
from __future__ import annotations

from typing import Tuple

import torch

from ._batch import AttentionInput, causal_prefix_mask, check_shapes, expand_mask, per_layer
from ..streaming import PairedRatioAccumulator
from ...numbers import as_float
from ..labels import at_least
from ..registry import LANGUAGE_MODEL, WEIGHTS, Heatmap, Metric, bootstrap, register
from ..streaming import estimate_cells, estimate_columns


def earlier_copies(tokens: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, T) bool: key k < q is a real token equal to the query's token."""
    same = tokens.unsqueeze(2) == tokens.unsqueeze(1)
    strictly_before = torch.ones_like(same[0]).tril(-1)
    return same & strictly_before & token_mask.unsqueeze(1) & token_mask.unsqueeze(2)


def duplicate_token_sums(attn: torch.Tensor, tokens: torch.Tensor, token_mask: torch.Tensor
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sentence (mass numerator, chance numerator, denominator), each (B, *heads)."""
    return duplicate_token_sums_from_copies(attn, earlier_copies(tokens, token_mask), token_mask)


def mass_on_copies(attn: torch.Tensor, copies: torch.Tensor) -> torch.Tensor:
    """(B, *heads, T) float64: sum of a[..., q, k] over the earlier copies k of each query q.

    Copies are few (a token repeats a handful of times in a block), so the weights are gathered
    at the copy positions and only those are converted to float64 and added up, instead of
    masking and converting the whole (B, *heads, T, T) tensor.
    """
    batch, t = copies.shape[0], copies.shape[1]
    heads = tuple(attn.shape[1:-2])
    b, q, k = copies.nonzero(as_tuple=True)
    picked = attn[b, ..., q, k].to(torch.float64)  # (N, *heads)
    sums = torch.zeros((batch * t,) + heads, dtype=torch.float64, device=attn.device)
    sums.index_add_(0, b * t + q, picked)
    return sums.reshape((batch, t) + heads).movedim(1, -1)


def duplicate_token_sums_from_copies(attn: torch.Tensor, copies: torch.Tensor, token_mask: torch.Tensor
                                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`duplicate_token_sums` given :func:`earlier_copies` (computed once for all layers)."""
    num_head_dims = check_shapes(attn, token_mask, token_mask)
    queries = copies.any(-1)
    lead = token_mask.shape[:1] + (1,) * num_head_dims
    mass_per_query = mass_on_copies(attn, copies)
    prefix = causal_prefix_mask(token_mask).sum(-1).clamp(min=1).to(torch.float64)
    chance_per_query = copies.sum(-1).to(torch.float64) / prefix
    q = expand_mask(queries, num_head_dims).to(torch.float64)
    mass = (mass_per_query * q).sum(-1)
    chance = (chance_per_query.reshape(lead + chance_per_query.shape[1:]) * q).sum(-1).expand_as(mass)
    count = q.sum(-1).expand_as(mass)
    return mass, chance, count


class DuplicateTokenAccumulator(PairedRatioAccumulator):
    """Streams :func:`duplicate_token_sums`; finalize gives (mass, chance) of head_shape."""

    def update(self, attn: AttentionInput, tokens: torch.Tensor, token_mask: torch.Tensor) -> None:
        copies = earlier_copies(tokens, token_mask)  # the same for every layer
        self.update_pair(*per_layer(duplicate_token_sums_from_copies, attn, copies, token_mask))


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class DuplicateToken(Metric):
    name, attention_types, needs = "duplicate_token", ("dec-self",), WEIGHTS
    model_kinds = (LANGUAGE_MODEL,)
    heatmap = Heatmap("duplicate_token_mass", "duplicate-token: mass on earlier copies", (0.0, 1.0))
    label_colours = (("duplicate-token", "#ccb974"),)
    label_abbreviations = (("duplicate-token", "dup"),)

    def accumulator(self, shape, run):
        return DuplicateTokenAccumulator(shape, **bootstrap(run))

    def update(self, acc, view):
        acc.update(view.weights, view.tokens, view.key_mask)

    def columns(self, run):
        return estimate_columns("duplicate_token_mass") + ["duplicate_token_chance"]

    def cells(self, pair, index, run):
        return {**estimate_cells("duplicate_token_mass", pair[0], index),
                "duplicate_token_chance": as_float(pair[1].estimate[index])}

    def labels(self, pair, run):
        return at_least(pair[0].estimate, run.options.thresholds.duplicate_token, "duplicate-token")


register(DuplicateToken())
