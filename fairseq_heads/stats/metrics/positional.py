"""Positional heads (Voita et al. 2019, Sec. 4.2).

Definition (exactly what is computed):

    share(head, k) = #{query tokens q : offset(argmax_key(head, q)) == k} / #{query tokens q}

for each relative offset k in ``offsets`` (default -2..+2), pooled over all sentences.
``offset(key) = key_index - query_index`` where both indices are *unpadded* token
indices: the rank of the position among the positions selected by ``key_mask`` (real,
non-EOS, non-pad) in its sentence, so left/right padding and the decoder's leading EOS do
not shift them.  Offsets only make sense for self-attention (enc-self, dec-self; Tq == Tk,
queries and keys are the same positions), so a query's index is the index of its own
position; queries are the positions selected by both ``query_mask`` and ``key_mask``
(``query_mask`` may be a subset of ``key_mask`` without shifting anything).

argmax_key: the key with the largest attention weight among the keys selected by
``key_mask`` (EOS excluded); ties go to the earliest selected position.  Optional
``sink_key_mask`` (e.g. the EOS positions) adds keys that compete for the argmax but have
no offset: a query whose argmax is a sink counts in the denominator and matches no k.
Default (no sink): EOS is not a candidate, consistent with :mod:`confidence`.

A head is labelled positional(k) when ``max_k share(head, k) >= threshold`` (paper:
"at least 90% of the time its maximum attention weight is assigned to a specific relative
position"; default 0.9), see :func:`labels.positional_labels`.
Bootstrap unit: the sentence.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from ._batch import AttentionInput, check_shapes, expand_mask, masked_argmax, per_layer, token_positions
from ..streaming import DEFAULT_REPLICATES, DEFAULT_SEED, RatioAccumulator, RatioEstimate
from ...numbers import as_float
from ..labels import positional_labels
from ..registry import WEIGHTS, Heatmap, Metric, bootstrap, register
from ..streaming import estimate_cells, estimate_columns

DEFAULT_OFFSETS = (-2, -1, 0, 1, 2)


def counted_queries(query_mask: torch.Tensor, key_mask: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: queries that are scored — selected, themselves a token position, with a candidate key."""
    return query_mask & key_mask & candidates.any(-1, keepdim=True)


def candidate_argmax(attn: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor,
                     sink_key_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Each query's argmax key (B, *heads, T) among ``key_mask`` (and ``sink_key_mask``) keys."""
    num_head_dims = check_shapes(attn, query_mask, key_mask)
    if attn.shape[-1] != attn.shape[-2]:
        raise ValueError("relative offsets need self-attention (Tq == Tk)")
    candidates = key_mask if sink_key_mask is None else (key_mask | sink_key_mask)
    return masked_argmax(attn, expand_mask(candidates, num_head_dims + 1))


def argmax_offsets(
    best_key: torch.Tensor,
    query_mask: torch.Tensor,
    key_mask: torch.Tensor,
    sink_key_mask: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Relative offset of each query's argmax key, and which entries are defined.

    ``best_key``: each query's argmax key (B, *heads, T) among the candidates
    (:func:`candidate_argmax` of the weights, or the collector's shared reduction).
    Returns ``(offset, has_offset)``, both (B, *heads, T): ``offset`` is
    ``key_index - query_index`` on unpadded indices; ``has_offset`` is False for queries
    that are not counted (see :func:`counted_queries`) and queries whose argmax is a sink.
    """
    num_head_dims = best_key.dim() - 2
    candidates = key_mask if sink_key_mask is None else (key_mask | sink_key_mask)
    token_index = token_positions(key_mask)  # (B, T); -1 for sinks/EOS/pads
    batch = best_key.shape[0]
    best_key_index = token_index.gather(1, best_key.reshape(batch, -1)).reshape(best_key.shape)
    offset = best_key_index - expand_mask(token_index, num_head_dims)
    counted = expand_mask(counted_queries(query_mask, key_mask, candidates), num_head_dims)
    return offset, counted & (best_key_index >= 0)


def positional_counts(
    best_key: torch.Tensor,
    query_mask: torch.Tensor,
    key_mask: torch.Tensor,
    offsets: Sequence[int] = DEFAULT_OFFSETS,
    sink_key_mask: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-sentence counts for positional shares, both (B, *heads, K) with K = len(offsets),
    from each query's argmax key ``best_key`` (B, *heads, T) (see :func:`argmax_offsets`).

    numerator[..., j] = number of counted queries whose argmax key is at offset ``offsets[j]``;
    denominator = number of counted queries (:func:`counted_queries`).
    """
    num_head_dims = best_key.dim() - 2
    offset, has_offset = argmax_offsets(best_key, query_mask, key_mask, sink_key_mask)
    wanted = torch.tensor(list(offsets), dtype=offset.dtype)
    hits = (offset.unsqueeze(-1) == wanted) & has_offset.unsqueeze(-1)  # (B, *heads, T, K)
    numerator = hits.to(torch.float64).sum(-2)
    candidates = key_mask if sink_key_mask is None else (key_mask | sink_key_mask)
    denominator = counted_queries(query_mask, key_mask, candidates).to(torch.float64).sum(-1)
    denominator = denominator.reshape((-1,) + (1,) * (num_head_dims + 1)).expand_as(numerator)
    return numerator, denominator


class PositionalAccumulator:
    """Streams :func:`positional_counts`; finalize gives shares of shape (*head_shape, K).

    Args:
        head_shape: ``(H,)`` for single-layer updates, ``(L, H)`` for lists of L layers.
        offsets: relative offsets to count (default -2..+2).
    """

    def __init__(
        self,
        head_shape: Sequence[int],
        offsets: Sequence[int] = DEFAULT_OFFSETS,
        replicates: int = DEFAULT_REPLICATES,
        seed: int = DEFAULT_SEED,
    ):
        self.offsets = tuple(int(k) for k in offsets)
        self.ratio = RatioAccumulator(tuple(head_shape) + (len(self.offsets),), replicates=replicates, seed=seed)

    def update(
        self,
        attn: AttentionInput,
        query_mask: torch.Tensor,
        key_mask: torch.Tensor,
        sink_key_mask: Optional[torch.Tensor] = None,
    ) -> None:
        """Count a batch from the attention weights (one layer, or a list of layers)."""
        best_key = per_layer(lambda layer: (candidate_argmax(layer, query_mask, key_mask, sink_key_mask),),
                             attn)[0]
        self._count(best_key, query_mask, key_mask, sink_key_mask)

    def update_from_argmax(self, best_key: AttentionInput, query_mask: torch.Tensor,
                           key_mask: torch.Tensor) -> None:
        """Count a batch from each layer's argmax over the ``key_mask`` keys (no sinks), e.g. the
        collector's shared reduction."""
        self._count(best_key, query_mask, key_mask, None)

    def _count(self, best_key: AttentionInput, query_mask, key_mask, sink_key_mask) -> None:
        numerator, denominator = per_layer(positional_counts, best_key, query_mask, key_mask,
                                           offsets=self.offsets, sink_key_mask=sink_key_mask)
        self.ratio.update(numerator, denominator)

    def finalize(self) -> RatioEstimate:
        """Shares per (head, offset): (estimate, count = query tokens, ci_low, ci_high), (*head_shape, K)."""
        return self.ratio.finalize()

    def replicate_estimates(self) -> torch.Tensor:
        """Bootstrap replicates of the shares, (R, *head_shape, K)."""
        return self.ratio.replicate_estimates()


def offset_column(k: int) -> str:
    """The heads-table column of the share at offset k: positional_share_at_-1, _at_0, _at_+1."""
    return f"positional_share_at_{k:+d}" if k else "positional_share_at_0"


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class Positional(Metric):
    name, attention_types, needs = "positional", ("enc-self", "dec-self"), WEIGHTS  # offsets need Tq == Tk
    text_columns = ("positional_offset",)
    heatmap = Heatmap("positional_share", "positional: share at the best offset", (0.0, 1.0))
    label_colours = (("positional", "#4c72b0"),)
    label_abbreviations = (("positional", "pos"),)

    def accumulator(self, shape, run):
        return PositionalAccumulator(shape, offsets=run.options.offsets, **bootstrap(run))

    def update(self, acc, view):
        # candidates: the key_mask keys (no sinks), the keys of the shared argmax
        acc.update_from_argmax(view.reductions.key_max()[1], view.query_mask, view.key_mask)

    def columns(self, run):
        return (["positional_offset"] + estimate_columns("positional_share")
                + [offset_column(k) for k in run.options.offsets])

    def cells(self, shares, index, run):
        estimate = shares.estimate[index]
        best = int(torch.nan_to_num(estimate, nan=-1.0).argmax())
        offsets = run.options.offsets
        cells = {"positional_offset": int(offsets[best]) if not torch.isnan(estimate[best]) else None}
        cells.update(estimate_cells("positional_share", shares, index + (best,)))
        for j, k in enumerate(offsets):
            cells[offset_column(k)] = as_float(estimate[j])
        return cells

    def labels(self, shares, run):
        found = positional_labels(shares.estimate, run.options.offsets, run.options.thresholds.positional)
        return {index: [f"positional({k})"] for index, k in found.items()}


register(Positional())
