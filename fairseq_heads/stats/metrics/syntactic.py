"""Syntactic heads (Voita et al. 2019, Sec. 4.3): does a head of encoder self-attention point
from a word to its dependency head (dep->head) or to its dependents (head->dep), more often than
the best fixed relative offset? The definition, step by step, is in docs/metrics.md ("Syntactic
heads"); the words and arcs come from :mod:`fairseq_heads.stats.syntax.alignment`.

A decoder-only LM's query sees only the words before it (and itself), so its version
(``causal=True``, docs/metrics.md "Syntactic heads of a language model") keeps of each query the
correct words that precede it and drops queries left without one (:func:`preceding_queries`);
the offset baseline is then fitted on those queries only, so its offsets are negative.

Bootstrap unit: the sentence (intervals on the accuracies; the baseline is a point value).
"""

from __future__ import annotations

from collections import Counter
import math
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import torch

from ..streaming import DEFAULT_REPLICATES, DEFAULT_SEED, RatioAccumulator, RatioEstimate
from ...numbers import as_float
from ..labels import syntactic_labels
from ..registry import LANGUAGE_MODEL, TRANSLATION, WEIGHTS, Heatmap, Metric, StatsError, bootstrap, register
from ..streaming import estimate_cells, estimate_columns
from ..syntax.alignment import RELATIONS, Arc, fill_unknown_pieces, prepare_sentence

DEP_TO_HEAD = "dep->head"
HEAD_TO_DEP = "head->dep"
DIRECTIONS = (DEP_TO_HEAD, HEAD_TO_DEP)


def syntactic_column(relation: str, direction: str) -> str:
    """The heads-table column of one (relation, direction): syntactic_nsubj_dep2head, ..."""
    return f"syntactic_{relation}_{direction.replace('->', '2')}"


def parse_syntactic_column(column: str) -> Optional[Tuple[str, str]]:
    """(relation, direction) of a column named by :func:`syntactic_column`, else None."""
    for relation in RELATIONS:
        for direction in DIRECTIONS:
            if column == syntactic_column(relation, direction):
                return relation, direction
    return None


class SyntacticQuery(NamedTuple):
    """One scored query: the row ``query`` must put its max on a word in ``correct``."""

    relation: str
    direction: str
    query: int
    correct: Tuple[int, ...]


# ---------------------------------------------------------------- scoring


def syntactic_queries(arcs: Iterable[Arc], relations: Sequence[str] = RELATIONS) -> List[SyntacticQuery]:
    """The queries of one sentence for both directions (module doc, step 4)."""
    wanted = set(relations)
    queries = []
    dependents: Dict[Tuple[int, str], List[int]] = {}
    for arc in arcs:
        if arc.relation not in wanted:
            continue
        queries.append(SyntacticQuery(arc.relation, DEP_TO_HEAD, arc.dependent, (arc.head,)))
        dependents.setdefault((arc.head, arc.relation), []).append(arc.dependent)
    for (head, relation), deps in dependents.items():
        queries.append(SyntacticQuery(relation, HEAD_TO_DEP, head, tuple(sorted(set(deps)))))
    return queries


def preceding_queries(queries: Iterable[SyntacticQuery]) -> List[SyntacticQuery]:
    """The queries a causal LM can answer: each keeps the correct words before its query word.

    A word sees only earlier words, so an arc whose other end follows the query cannot be
    scored: it is neither a hit nor a miss (not in the denominator). A head->dep query keeps its
    earlier dependents; a query left with no correct word is dropped.
    """
    kept = []
    for q in queries:
        earlier = tuple(c for c in q.correct if c < q.query)
        if earlier:
            kept.append(q._replace(correct=earlier))
    return kept


def query_hits(word_attn: torch.Tensor, queries: Sequence[SyntacticQuery]) -> torch.Tensor:
    """(*heads, Q) bool: does each head's max-weight word (ties -> earliest) hit a correct word."""
    num_words = word_attn.shape[-1]
    query_index = torch.tensor([q.query for q in queries], dtype=torch.long)
    correct = torch.zeros(len(queries), num_words, dtype=torch.bool)
    for i, q in enumerate(queries):
        correct[i, list(q.correct)] = True
    best = word_attn[..., query_index, :].argmax(-1)  # (*heads, Q)
    return correct[torch.arange(len(queries)), best]


class SyntacticScore(NamedTuple):
    """Result for one (relation, direction): accuracy per head and the offset baseline."""

    accuracy: RatioEstimate  # per head; count = number of queries
    baseline: float  # accuracy of the best fixed offset; NaN without queries
    baseline_offset: Optional[int]
    num_queries: int


class SyntacticAccumulator:
    """Streams syntactic accuracies per (relation, direction) and head, plus offset histograms.

    Args:
        head_shape: shape of the head dims of the word attention, ``(H,)`` or ``(L, H)``.
        relations: relations to score (normalised names).
        causal: score only the arcs whose other end precedes the query (decoder-only LMs,
            :func:`preceding_queries`); the baseline's offsets are restricted the same way.
    ``update(word_attn_list, arcs_list)``: one (*head_shape, W, W) tensor and one arc list per
    sentence; every sentence is one bootstrap unit (also sentences without arcs).
    """

    def __init__(
        self,
        head_shape: Sequence[int],
        relations: Sequence[str] = RELATIONS,
        replicates: int = DEFAULT_REPLICATES,
        seed: int = DEFAULT_SEED,
        causal: bool = False,
    ):
        self.head_shape = tuple(head_shape)
        self.relations = tuple(relations)
        self.causal = causal
        self.slots: Tuple[Tuple[str, str], ...] = tuple((r, d) for r in self.relations for d in DIRECTIONS)
        self._slot_index = {slot: i for i, slot in enumerate(self.slots)}
        self.ratio = RatioAccumulator((len(self.slots),) + self.head_shape, replicates=replicates, seed=seed)
        # offset_hits[slot][k] = number of queries with a correct word at relative word offset k
        self.offset_hits: List[Counter] = [Counter() for _ in self.slots]

    def _sentence_counts(self, word_attn: torch.Tensor, arcs: Sequence[Arc]) -> Tuple[torch.Tensor, torch.Tensor]:
        if tuple(word_attn.shape[:-2]) != self.head_shape:
            raise ValueError(f"word attention heads shape {tuple(word_attn.shape[:-2])} != {self.head_shape}")
        numerator = torch.zeros((len(self.slots),) + self.head_shape, dtype=torch.float64)
        denominator = torch.zeros(len(self.slots), dtype=torch.float64)
        queries = syntactic_queries(arcs, self.relations)
        if self.causal:
            queries = preceding_queries(queries)
        if not queries:
            return numerator, denominator.reshape((-1,) + (1,) * len(self.head_shape)).expand_as(numerator)
        slot = torch.tensor([self._slot_index[(q.relation, q.direction)] for q in queries], dtype=torch.long)
        hits = query_hits(word_attn, queries).to(torch.float64)  # (*heads, Q)
        numerator = hits.new_zeros(self.head_shape + (len(self.slots),)).index_add_(-1, slot, hits)
        numerator = numerator.movedim(-1, 0)
        denominator = torch.bincount(slot, minlength=len(self.slots)).to(torch.float64)
        for q, s in zip(queries, slot.tolist()):
            for offset in {c - q.query for c in q.correct}:
                self.offset_hits[s][offset] += 1
        return numerator, denominator.reshape((-1,) + (1,) * len(self.head_shape)).expand_as(numerator)

    def update(self, word_attn_list: Sequence[torch.Tensor], arcs_list: Sequence[Sequence[Arc]]) -> None:
        if len(word_attn_list) != len(arcs_list):
            raise ValueError("need one arc list per word attention tensor")
        if not word_attn_list:
            return
        counts = [self._sentence_counts(w, a) for w, a in zip(word_attn_list, arcs_list)]
        self.ratio.update(torch.stack([c[0] for c in counts]), torch.stack([c[1] for c in counts]))

    def baselines(self) -> Dict[Tuple[str, str], Tuple[float, Optional[int], int]]:
        """(baseline accuracy, best offset, number of queries) per (relation, direction)."""
        totals = self.ratio.den_sum.reshape(len(self.slots), -1)[:, 0] if self.head_shape else self.ratio.den_sum
        result = {}
        for i, slot in enumerate(self.slots):
            n = int(totals[i])
            if n == 0 or not self.offset_hits[i]:
                result[slot] = (float("nan") if n == 0 else 0.0, None, n)
                continue
            # Ties between offsets -> the smaller |offset|, then the negative one (deterministic).
            offset, hits = max(self.offset_hits[i].items(), key=lambda kv: (kv[1], -abs(kv[0]), -kv[0]))
            result[slot] = (hits / n, offset, n)
        return result

    def finalize(self) -> Dict[Tuple[str, str], SyntacticScore]:
        """{(relation, direction): SyntacticScore} with accuracies of shape ``head_shape``."""
        estimate = self.ratio.finalize()
        baselines = self.baselines()
        return {
            slot: SyntacticScore(RatioEstimate(*(t[i] for t in estimate)), *baselines[slot])
            for i, slot in enumerate(self.slots)
        }

    def replicate_estimates(self) -> torch.Tensor:
        """Bootstrap replicates of the accuracies, (R, num_slots, *head_shape); slot order = ``self.slots``."""
        return self.ratio.replicate_estimates()


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


UNK_FILLED = "syntactic_sentences_with_unk_filled"  # meta: sentences whose <unk> were filled


class SyntacticRun:
    """The syntactic metric's accumulator in a stats run: the accuracies, and how many
    sentences had <unk> pieces filled in from their parse (heads.json meta)."""

    def __init__(self, scores: SyntacticAccumulator):
        self.scores = scores
        self.sentences_with_unk_filled = 0


class SyntacticOutcome(NamedTuple):
    scores: Dict[Tuple[str, str], SyntacticScore]
    sentences_with_unk_filled: int


def word_level_sentences(view, conllu_index, conllu_path) -> Tuple[List[torch.Tensor], List[List[Arc]], int]:
    """(word-level attention, gold arcs) of each sentence of the batch, and how many of them had
    <unk> pieces filled in: the source sentences of a translation model (enc-self), the blocks
    of an LM (dec-self, one sentence a block). `view`: collect.AttentionView."""
    dictionary = view.run.task.source_dictionary
    self_weights = torch.stack(view.weights, dim=1)
    word_attn, arcs, unk_filled = [], [], 0
    for b, sentence_id in enumerate(view.sentence_ids):
        keep = view.token_mask[b]
        pieces = [dictionary[int(token)] for token in view.tokens[b][keep]]
        token_attn = self_weights[b][..., keep, :][..., keep]  # (L, H, T, T)
        tokenlist = conllu_index[sentence_id]
        try:
            if dictionary.unk_word in pieces:
                pieces = fill_unknown_pieces(pieces, tokenlist, dictionary.unk_word)
                unk_filled += 1
            attn_b, arcs_b = prepare_sentence(tokenlist, pieces, token_attn, sentence_index=sentence_id)
        except ValueError as error:
            sentences = "the lines of the subset" if view.language_model else "the source sentences"
            raise StatsError(f"--conllu {conllu_path} does not match {sentences} "
                             f"(sentence index = dataset index, 0-based): {error}") from None
        word_attn.append(attn_b)
        arcs.append(arcs_b)
    return word_attn, arcs, unk_filled


class Syntactic(Metric):
    # translation: encoder self-attention; an LM: its causal dec-self, on the arcs whose other
    # end precedes the query (preceding_queries)
    name, attention_types, needs = "syntactic", ("enc-self",), WEIGHTS
    model_kinds = (TRANSLATION, LANGUAGE_MODEL)
    text_columns = ("syntactic_best",)
    heatmap = Heatmap("syntactic_best_gain", "syntactic: best accuracy - baseline")
    label_colours = (("syntactic", "#55a868"),)
    label_abbreviations = (("syntactic", "syn"), ("dep->head", "d>h"), ("head->dep", "h>d"))

    def default(self, options):
        return bool(options.conllu)

    def check_options(self, options):
        if "syntactic" in (options.metrics or ()) and not options.conllu:
            raise StatsError("the syntactic metric needs --conllu (gold parses of the source side, "
                             "or of a language model's text)")

    def accumulator(self, shape, run):
        return SyntacticRun(SyntacticAccumulator(shape, causal=run.language_model, **bootstrap(run)))

    def update(self, acc, view):
        word_attn, arcs, unk_filled = word_level_sentences(view, view.run.conllu_index,
                                                           view.run.options.conllu)
        acc.scores.update(word_attn, arcs)
        acc.sentences_with_unk_filled += unk_filled

    def finalize(self, acc, run, replicates):
        return SyntacticOutcome(acc.scores.finalize(), acc.sentences_with_unk_filled)

    def columns(self, run):
        columns = ["syntactic_best", "syntactic_best_gain"]
        for relation in RELATIONS:
            for direction in DIRECTIONS:
                name = syntactic_column(relation, direction)
                columns += estimate_columns(name) + [name + "_baseline"]
        return columns

    def cells(self, outcome, index, run):
        cells: Dict[str, object] = {}
        best_slot, best_gain = None, float("nan")
        for (relation, direction), score in outcome.scores.items():
            name = syntactic_column(relation, direction)
            cells.update(estimate_cells(name, score.accuracy, index))
            cells[name + "_baseline"] = as_float(score.baseline)
            gain = as_float(score.accuracy.estimate[index]) - as_float(score.baseline)
            if not math.isnan(gain) and (math.isnan(best_gain) or gain > best_gain):
                best_slot, best_gain = f"{relation},{direction}", gain
        cells["syntactic_best"] = best_slot
        cells["syntactic_best_gain"] = best_gain
        return cells

    def labels(self, outcome, run):
        found = syntactic_labels({slot: (score.accuracy.estimate, score.baseline)
                                  for slot, score in outcome.scores.items()},
                                 run.options.thresholds.syntactic_margin)
        return {index: [f"syntactic({rel},{direction})" for rel, direction in slots]
                for index, slots in found.items()}

    def meta(self, by_type, run):
        outcomes = (by_type or {}).items()
        meta = {UNK_FILLED: sum(outcome.sentences_with_unk_filled for _, outcome in outcomes),
                "syntactic_baselines": {
                    t: {f"{rel},{direction}": {"baseline": score.baseline, "offset": score.baseline_offset,
                                               "queries": score.num_queries}
                        for (rel, direction), score in outcome.scores.items()}
                    for t, outcome in outcomes}}
        if run.language_model:  # which arcs an LM's numbers are over (docs/metrics.md)
            meta["syntactic_scored_arcs"] = "other end precedes the query"
        return meta


register(Syntactic())
