"""Rare-word heads (Voita et al. 2019, Sec. 4.4).

Definition (exactly what is computed), per sentence s and head:

    m_s[k]  = mean over selected queries q of a_s[head, q, k]      (average attention a key receives)
    k*_s    = argmax over selected keys k of m_s[k]                (ties -> earliest position)
    f_s[k]  = key_freq of the token at key k (real counts: stats/token_counts.py)
    rarest_s          = 1 if f_s[k*_s] == min_k f_s[k]                       else 0
    two_rarest_s      = 1 if f_s[k*_s] <= second smallest of sorted(f_s)     else 0

    share_rarest(head)     = sum_s rarest_s / #sentences
    share_two_rarest(head) = sum_s two_rarest_s / #sentences

Queries and keys are the selected (real, non-EOS, non-pad) positions; EOS is neither
averaged over nor a candidate key.  Tokens are the model's tokens (subwords).

Ties: every key whose frequency equals the minimum is "the rarest" (a repeated rare token,
or several tokens with the same count).  "Second smallest of sorted(f_s)" counts
duplicates, so with frequencies [1, 1, 5] the two rarest are the two 1s, and with [1, 3, 3]
both 3s qualify as second rarest.

Chance levels (the score of a head picking a uniformly random key), per sentence:

    chance_rarest_s     = #{k : f_s[k] == min f_s} / n_s
    chance_two_rarest_s = #{k : f_s[k] <= second smallest f_s} / n_s

i.e. 1/n and min(2, n)/n adjusted for ties, averaged over the same sentences.

Sentence filter: sentences with fewer than ``min_keys`` (default 2) selected keys are
skipped — with one key every head trivially "finds" the rarest token.  The paper only
scored sentences whose rarest token is genuinely rare (outside the 500 most frequent
types); ``max_rarest_freq`` reproduces that: skip sentences whose minimum key frequency is
above it.  :func:`max_count_outside_top` turns the rank (top N) into that count.

Labelling default (see :func:`labels.rare_labels`): share_rarest >= 0.5.  Why: chance is
about 1/n (~0.04 for 25-token sentences), so pointing at the single rarest token in the
majority of sentences is an order of magnitude above chance, and the paper's rare-word
head (rarest token in roughly two thirds of the scored sentences) clears it.
Bootstrap unit: the sentence.
"""

from __future__ import annotations

import logging
from typing import NamedTuple, Optional, Sequence, Tuple

import torch

from ._batch import (AttentionInput, causal_prefix_mask, check_shapes, expand_mask, masked_argmax, per_layer,
                     prefix_argmax)
from ..streaming import DEFAULT_REPLICATES, DEFAULT_SEED, RatioAccumulator, RatioEstimate
from ...numbers import as_float
from ..labels import rare_labels
from ..registry import WEIGHTS, Heatmap, Metric, bootstrap, register
from ..streaming import estimate_cells, estimate_columns
from ..token_counts import TokenCounts, resolve_token_counts

logger = logging.getLogger("fairseq_heads.stats")

DEFAULT_MIN_KEYS = 2


def rarity_thresholds(key_freq: torch.Tensor, key_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Smallest and second-smallest (with duplicates) frequency among selected keys, each (B,).

    Sentences with one selected key get that key's frequency for both; with none, +inf.
    """
    freq = key_freq.to(torch.float64).masked_fill(~key_mask, float("inf"))
    ordered = freq.sort(-1).values
    smallest = ordered[:, 0]
    second = ordered[:, 1] if ordered.shape[1] > 1 else smallest
    second = torch.where(torch.isinf(second), smallest, second)
    return smallest, second


def max_count_outside_top(counts: Sequence[float], top_n: int) -> float:
    """The largest count a type outside the ``top_n`` most frequent types can have, for
    ``max_rarest_freq``; -inf when no type is outside (fewer than ``top_n`` + 1 distinct ranks).

    ``counts`` are the counts of the ordinary types (no specials).  A type is outside the top N
    when at least N types are strictly more frequent than it, i.e. when its count is below the
    N-th largest count c_N: types tied with the N-th are inside, so the answer does not depend on
    how a dictionary orders equal counts.  The answer is the largest count below c_N, so that
    ``min f_s <= answer`` is exactly "the rarest token lies outside the top N".
    """
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    ordered = sorted((float(c) for c in counts), reverse=True)
    if len(ordered) <= top_n:
        return float("-inf")
    nth = ordered[top_n - 1]
    below = [c for c in ordered[top_n:] if c < nth]
    return below[0] if below else float("-inf")


def ordinary_counts(dictionary, counts: Optional[Sequence[float]] = None) -> list:
    """The counts (the dictionary's own, or ``counts`` by its indices) of a fairseq Dictionary's
    ordinary types: no specials (bos, pad, eos, unk) and no ``madeupword`` fillers (padding of
    the vocabulary, never seen in the data)."""
    counts = dictionary.count if counts is None else counts
    return [float(counts[i]) for i in range(dictionary.nspecial, len(dictionary))
            if not dictionary[i].startswith("madeupword")]


def rarest_count_cutoff(dictionary, top_n: Optional[int],
                        counts: Optional[Sequence[float]] = None) -> Optional[float]:
    """``max_rarest_freq`` for "the rarest token lies outside the ``top_n`` most frequent types"
    of a fairseq Dictionary (its counts, or ``counts`` by its indices); None when ``top_n`` is
    None (no filter)."""
    if top_n is None:
        return None
    counts = ordinary_counts(dictionary, counts)
    cutoff = max_count_outside_top(counts, top_n)
    if cutoff == float("-inf"):
        raise ValueError(f"--rare-outside-top {top_n}: the dictionary has {len(counts)} types and "
                         f"none is less frequent than its {top_n} most frequent, so no sentence "
                         f"would be scored")
    return cutoff


def sentence_filter(
    key_mask: torch.Tensor,
    key_freq: torch.Tensor,
    query_mask: torch.Tensor,
    min_keys: int = DEFAULT_MIN_KEYS,
    max_rarest_freq: Optional[float] = None,
) -> torch.Tensor:
    """Which sentences are scored, (B,) bool (see module doc)."""
    keep = (key_mask.sum(-1) >= max(min_keys, 1)) & query_mask.any(-1)
    if max_rarest_freq is not None:
        smallest, _ = rarity_thresholds(key_freq, key_mask)
        keep &= smallest <= max_rarest_freq
    return keep


def rare_hits(
    attn: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor, key_freq: torch.Tensor
) -> Tuple[torch.Tensor]:
    """Per-sentence hits, (B, *heads, 2): [..., 0] rarest, [..., 1] one of the two rarest (0/1 floats)."""
    num_head_dims = check_shapes(attn, query_mask, key_mask)
    if tuple(key_freq.shape) != tuple(key_mask.shape):
        raise ValueError(f"key_freq must have the key_mask shape {tuple(key_mask.shape)}, got {tuple(key_freq.shape)}")
    q = expand_mask(query_mask, num_head_dims).unsqueeze(-1).to(torch.float64)  # (B, 1.., Tq, 1)
    n_queries = q.sum(-2).clamp(min=1.0)
    mean_attention = (attn.to(torch.float64) * q).sum(-2) / n_queries  # (B, *heads, Tk)
    best_key = masked_argmax(mean_attention, expand_mask(key_mask, num_head_dims))  # (B, *heads)
    batch = best_key.shape[0]
    best_freq = key_freq.to(torch.float64).gather(1, best_key.reshape(batch, -1)).reshape(best_key.shape)
    smallest, second = rarity_thresholds(key_freq, key_mask)
    shape = (batch,) + (1,) * num_head_dims
    hits = torch.stack([best_freq == smallest.reshape(shape), best_freq <= second.reshape(shape)], dim=-1)
    return (hits.to(torch.float64),)


def rare_chance(key_freq: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """Per-sentence chance levels, (B, 2): [:, 0] rarest, [:, 1] two rarest (tie-adjusted; 0 if no keys)."""
    smallest, second = rarity_thresholds(key_freq, key_mask)
    freq = key_freq.to(torch.float64)
    n = key_mask.sum(-1).to(torch.float64).clamp(min=1.0)
    at_min = ((freq == smallest[:, None]) & key_mask).sum(-1) / n
    at_two = ((freq <= second[:, None]) & key_mask).sum(-1) / n
    return torch.stack([at_min, at_two], dim=-1)


class RareWordResult(NamedTuple):
    """Shares per head (*head_shape) and chance levels (scalars), each a :class:`RatioEstimate`.

    ``count`` is the number of scored sentences.
    """

    rarest: RatioEstimate
    two_rarest: RatioEstimate
    chance_rarest: RatioEstimate
    chance_two_rarest: RatioEstimate


def _pick(estimate: RatioEstimate, index: int) -> RatioEstimate:
    return RatioEstimate(*(t[..., index] for t in estimate))


class RareWordAccumulator:
    """Streams rare-word hits and chance levels; sentences are the ratio units.

    Args:
        head_shape: ``(H,)`` for single-layer updates, ``(L, H)`` for lists of L layers.
        min_keys, max_rarest_freq: sentence filter (see module doc).
    The chance accumulator uses the same seed, so its replicates use the same resamples.
    """

    def __init__(
        self,
        head_shape: Sequence[int],
        min_keys: int = DEFAULT_MIN_KEYS,
        max_rarest_freq: Optional[float] = None,
        replicates: int = DEFAULT_REPLICATES,
        seed: int = DEFAULT_SEED,
    ):
        self.head_shape = tuple(head_shape)
        self.min_keys = min_keys
        self.max_rarest_freq = max_rarest_freq
        self.hits = RatioAccumulator(self.head_shape + (2,), replicates=replicates, seed=seed)
        self.chance = RatioAccumulator((2,), replicates=replicates, seed=seed)

    def update(
        self, attn: AttentionInput, query_mask: torch.Tensor, key_mask: torch.Tensor, key_freq: torch.Tensor
    ) -> None:
        (hits,) = per_layer(rare_hits, attn, query_mask, key_mask, key_freq)
        keep = sentence_filter(key_mask, key_freq, query_mask, self.min_keys, self.max_rarest_freq)
        scored = keep.to(torch.float64)
        hit_weight = scored.reshape((-1,) + (1,) * (hits.dim() - 1))
        self.hits.update(hits * hit_weight, hit_weight.expand_as(hits))
        self.chance.update(rare_chance(key_freq, key_mask) * scored[:, None], scored[:, None].expand(-1, 2))

    def finalize(self) -> RareWordResult:
        hits = self.hits.finalize()
        chance = self.chance.finalize()
        return RareWordResult(_pick(hits, 0), _pick(hits, 1), _pick(chance, 0), _pick(chance, 1))

    def replicate_estimates(self) -> torch.Tensor:
        """Bootstrap replicates of the shares, (R, *head_shape, 2): [..., 0] rarest, [..., 1] two rarest."""
        return self.hits.replicate_estimates()


# ---------------------------------------------------------------- causal models (prefix)
#
# A decoder-only model's query q sees only its prefix, so the rare-word question is asked per
# query: does q's argmax key (among the real tokens at positions <= q) hold the least frequent
# token of that prefix?  Per query q with at least ``min_keys`` real prefix tokens:
#
#     rarest_q     = 1 if f[argmax_k a[q, k]] == min_{k <= q} f[k]
#     two_rarest_q = 1 if f[argmax_k a[q, k]] <= second smallest of the prefix's f (duplicates count)
#     chance_q     = #{k <= q : f[k] == min f} / n_q   (uniform attention over the prefix)
#
# shares are token-weighted (sum over queries / number of queries); bootstrap unit the block.
# The paper's filter, asked per query: with ``max_rarest_freq``, a query whose prefix's rarest
# token is more frequent than that is not scored (its prefix holds no rare token).


class PrefixRarity(NamedTuple):
    """What the causal rare-word metric needs of a batch's tokens, whatever the attention (so
    computed once for all layers): per query, the smallest and second-smallest frequency of its
    prefix (B, Tq) float64, which queries are scored (B, Tq) bool, and the chance levels (B, 2)."""

    smallest: torch.Tensor
    second: torch.Tensor
    scored: torch.Tensor
    chance: torch.Tensor


def prefix_rarity(token_mask: torch.Tensor, key_freq: torch.Tensor,
                  min_keys: int = DEFAULT_MIN_KEYS, max_rarest_freq: Optional[float] = None) -> PrefixRarity:
    """The attention-free part of :func:`prefix_rare_hits`."""
    t = token_mask.shape[-1]
    prefix = causal_prefix_mask(token_mask)  # (B, Tq, Tk)
    freq = key_freq.to(torch.float64).unsqueeze(1).expand(-1, t, -1).masked_fill(~prefix, float("inf"))
    ordered = freq.sort(-1).values  # (B, Tq, Tk)
    smallest = ordered[..., 0]
    second = ordered[..., 1] if t > 1 else smallest
    second = torch.where(torch.isinf(second), smallest, second)
    scored = token_mask & (prefix.sum(-1) >= max(min_keys, 1))  # (B, Tq)
    if max_rarest_freq is not None:
        scored &= smallest <= max_rarest_freq
    n = prefix.sum(-1).clamp(min=1).to(torch.float64)
    at_min = ((freq == smallest.unsqueeze(-1)) & prefix).sum(-1) / n
    at_two = ((freq <= second.unsqueeze(-1)) & prefix).sum(-1) / n
    chance = torch.stack([(at_min * scored).sum(-1), (at_two * scored).sum(-1)], -1)
    return PrefixRarity(smallest, second, scored, chance)


def prefix_rare_hits_from_argmax(best: torch.Tensor, key_freq: torch.Tensor, rarity: PrefixRarity
                                 ) -> Tuple[torch.Tensor]:
    """Per-sentence hits (B, *heads, 2) given each query's argmax over its causal prefix
    (B, *heads, Tq) (e.g. shared with other metrics) and the batch's :func:`prefix_rarity`."""
    lead = best.shape[:1] + (1,) * (best.dim() - 2)
    best_freq = key_freq.to(torch.float64).reshape(lead + key_freq.shape[1:]).expand(best.shape)
    best_freq = best_freq.gather(-1, best)
    q = rarity.scored.reshape(lead + rarity.scored.shape[1:])
    hits = torch.stack([(best_freq == rarity.smallest.reshape(lead + rarity.smallest.shape[1:])) & q,
                        (best_freq <= rarity.second.reshape(lead + rarity.second.shape[1:])) & q], -1)
    return (hits.to(torch.float64).sum(-2),)


def prefix_rare_hits(attn: torch.Tensor, token_mask: torch.Tensor, key_freq: torch.Tensor,
                     min_keys: int = DEFAULT_MIN_KEYS, max_rarest_freq: Optional[float] = None
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sentence (hits (B, *heads, 2), chance (B, 2), scored queries (B,)) for causal attention."""
    best = prefix_argmax(attn, token_mask)
    rarity = prefix_rarity(token_mask, key_freq, min_keys, max_rarest_freq)
    (hits,) = prefix_rare_hits_from_argmax(best, key_freq, rarity)
    return hits, rarity.chance, rarity.scored.to(torch.float64).sum(-1)


class PrefixRareWordAccumulator(RareWordAccumulator):
    """:class:`RareWordAccumulator` for causal attention (see the comment above); same result type,
    ``count`` = scored query tokens."""

    def __init__(self, head_shape: Sequence[int], min_keys: int = DEFAULT_MIN_KEYS,
                 max_rarest_freq: Optional[float] = None,
                 replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED):
        super().__init__(head_shape, min_keys=min_keys, max_rarest_freq=max_rarest_freq,
                         replicates=replicates, seed=seed)

    def update(self, attn: AttentionInput, token_mask: torch.Tensor, key_freq: torch.Tensor) -> None:
        if isinstance(attn, torch.Tensor):
            hits, chance, scored = prefix_rare_hits(attn, token_mask, key_freq, self.min_keys,
                                                    self.max_rarest_freq)
            self._add(hits, chance, scored)
            return
        best = [prefix_argmax(layer, token_mask) for layer in attn]
        self.update_from_argmax(best, token_mask, key_freq)

    def update_from_argmax(self, best: Sequence[torch.Tensor], token_mask: torch.Tensor,
                           key_freq: torch.Tensor) -> None:
        """:meth:`update` of a list of layers, given each layer's causal-prefix argmax (B, H, T)."""
        rarity = prefix_rarity(token_mask, key_freq, self.min_keys, self.max_rarest_freq)  # once for all layers
        (hits,) = per_layer(prefix_rare_hits_from_argmax, best, key_freq, rarity)
        self._add(hits, rarity.chance, rarity.scored.to(torch.float64).sum(-1))

    def _add(self, hits: torch.Tensor, chance: torch.Tensor, scored: torch.Tensor) -> None:
        den = scored.reshape((-1,) + (1,) * (hits.dim() - 1)).expand_as(hits)
        self.hits.update(hits, den)
        self.chance.update(chance, scored[:, None].expand(-1, 2))


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class Rare(Metric):
    name, attention_types, needs = "rare", ("enc-self", "enc-dec"), WEIGHTS  # keys are source tokens (key frequency known)
    heatmap = Heatmap("rare_share", "rare: share hitting the rarest token", (0.0, 1.0))
    label_colours = (("rare", "#c44e52"),)

    @staticmethod
    def counts(run) -> TokenCounts:
        """The source tokens' frequencies (token_counts.py), resolved once per run, before the
        pass: the first accumulator asks."""
        if run.token_counts is None:
            task_options = getattr(run.task, "args", None) or run.task.cfg
            source_lang = None if run.language_model else run.task.cfg.source_lang
            target_lang = None if run.language_model else run.task.cfg.target_lang
            run.token_counts = resolve_token_counts(run.task.source_dictionary, task_options.data,
                                                    run.subset, source_lang, target_lang)
            logger.info("rare: token frequencies from the %s (%s)", run.token_counts.source,
                        ", ".join(run.token_counts.files))
        return run.token_counts

    @classmethod
    def cutoff(cls, run) -> Optional[float]:
        """--rare-outside-top N as a count of the run's token frequencies."""
        return rarest_count_cutoff(run.task.source_dictionary, run.options.rare_outside_top,
                                   cls.counts(run).counts.tolist())

    def accumulator(self, shape, run):
        # an LM's query sees only its prefix: the rarest token of each query's prefix
        kind = PrefixRareWordAccumulator if run.language_model else RareWordAccumulator
        return kind(shape, max_rarest_freq=self.cutoff(run), **bootstrap(run))

    def update(self, acc, view):
        key_counts = self.counts(view.run).counts[view.tokens]
        if view.language_model:
            acc.update_from_argmax(view.reductions.prefix_argmax(), view.key_mask, key_counts)
        else:
            acc.update(view.weights, view.query_mask, view.key_mask, key_counts)

    def columns(self, run):
        return estimate_columns("rare_share") + ["rare_two_share", "rare_chance"]

    def cells(self, rare, index, run):
        cells = estimate_cells("rare_share", rare.rarest, index)
        cells["rare_two_share"] = as_float(rare.two_rarest.estimate[index])
        cells["rare_chance"] = as_float(rare.chance_rarest.estimate)
        return cells

    def labels(self, rare, run):
        hits = rare_labels(rare.rarest.estimate, run.options.thresholds.rare)
        return {tuple(index): ["rare"] for index in hits.nonzero().tolist()}

    def meta(self, by_type, run):
        return {"rare_outside_top": run.options.rare_outside_top,
                "rare_counts": run.token_counts.describe() if by_type and run.token_counts else None,
                "rare_max_rarest_count": self.cutoff(run) if by_type else None,
                "rare_chance": {t: {"rarest": as_float(r.chance_rarest.estimate),
                                    "two_rarest": as_float(r.chance_two_rarest.estimate)}
                                for t, r in (by_type or {}).items()}}


register(Rare())
