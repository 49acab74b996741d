"""The built-in metrics as registry entries, registered in heads.csv column order.

Each entry binds a metric file of `metrics/` (the definition and its accumulator) to the run:
the attention types, what it needs from the forward pass, its columns and per-head cells, its
labels, run metadata and heatmap (see registry.py for what each field means).
"""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

import torch

from ..heads import ATTENTION_TYPES
from ..numbers import as_float
from .capture import capture_heads
from .labels import positional_labels, rare_labels, syntactic_labels
from .metrics import grad, lrp
from .metrics.confidence import ConfidenceAccumulator
from .metrics.duplicate_token import DuplicateTokenAccumulator
from .metrics.positional import PositionalAccumulator, offset_column
from .metrics.previous_token import PreviousTokenAccumulator
from .metrics.rare import PrefixRareWordAccumulator, RareWordAccumulator, rarest_count_cutoff
from .metrics.syntactic import DIRECTIONS, RELATIONS, SyntacticAccumulator, syntactic_column
from .registry import (
    HEAD_OUTPUTS,
    LANGUAGE_MODEL,
    OWN_PASS,
    TRANSLATION,
    WEIGHTS,
    Heatmap,
    Metric,
    StatsError,
    bootstrap,
    register,
)
from .streaming import ESTIMATE_SUFFIXES, RatioAccumulator, estimate_cells, estimate_columns
from .syntax.alignment import fill_unknown_pieces, prepare_sentence

UNK_FILLED = "syntactic_sentences_with_unk_filled"  # meta: sentences whose <unk> were filled


def _ratio(shape, run):
    return RatioAccumulator(shape, **bootstrap(run))


def _replicates(acc, run):
    return acc.replicate_estimates()


def _over_threshold(estimate, threshold: float, label: str) -> Dict[Tuple[int, int], List[str]]:
    """{(layer, head): [label]} where estimate >= threshold (NaN never labels)."""
    hits = (torch.nan_to_num(estimate, nan=-1.0) >= threshold).nonzero().tolist()
    return {(layer, head): [label] for layer, head in hits}


# ---------------------------------------------------------------- importance: all attention types

# The weights metrics read the max / argmax over keys from `view.reductions`, computed once per
# batch for all of them: each is a pass over the full (B, H, Tq, Tk) weights (collect.AttentionView).

def _confidence_update(acc, view) -> None:
    acc.update_from_max(view.reductions.key_max()[0], view.query_mask, view.key_mask)


register(Metric(
    "confidence", ATTENTION_TYPES, WEIGHTS,
    accumulator=lambda shape, run: ConfidenceAccumulator(shape, **bootstrap(run)),
    update=_confidence_update,
    columns=lambda run: estimate_columns("confidence"),
    cells=lambda result, index, run: estimate_cells("confidence", result, index),
    replicates=_replicates,
    heatmap=Heatmap("confidence", "confidence (mean max attention)", (0.0, 1.0))))


def _lrp_score(batch, run):
    """One forward under the conservative rules; relevance per head and sentence (metrics/lrp)."""
    with lrp.conservative_lrp_rules(run.model), \
            capture_heads(run.model, weights=False, head_outputs=True) as captured:
        objective = lrp.top1_objective(run.model, batch.sample["net_input"], batch.target_mask)
        return lrp.objective_head_relevance(objective, batch.target_mask, captured, batch.keys,
                                            run.options.lrp_normalise)


register(Metric(
    "lrp", ATTENTION_TYPES, OWN_PASS, accumulator=_ratio, score=_lrp_score,
    columns=lambda run: estimate_columns("lrp"),
    cells=lambda result, index, run: estimate_cells("lrp", result, index),
    replicates=_replicates,
    heatmap=Heatmap("lrp", "LRP relevance (share of the layer)")))


def _grad_score(batch, run):
    """|dL/dxi_h| per sentence from the data pass's head outputs (metrics/grad)."""
    lprobs = run.model.get_normalized_probs(batch.net_output, log_probs=True)
    loss = lrp.reference_nll(lprobs, batch.sample["target"], run.task.target_dictionary.pad())
    return grad.gradient_importance(loss, batch.captured, batch.keys), torch.ones(batch.size)


def _grad_replicates(acc, run):
    replicates = acc.replicate_estimates()
    return grad.normalise_layers_l2(replicates) if run.options.grad_normalise == "layer" else replicates


def _grad_finalize(acc, run, replicates):
    """With --grad-normalise layer, the estimate is layer-normalised and the interval is that
    of the normalised replicates (normalising is not linear)."""
    result = acc.finalize()
    if run.options.grad_normalise != "layer":
        return result
    return grad.normalised_estimate(result, replicates)


register(Metric(
    "grad", ATTENTION_TYPES, HEAD_OUTPUTS, accumulator=_ratio, score=_grad_score,
    columns=lambda run: estimate_columns("grad"),
    cells=lambda result, index, run: estimate_cells("grad", result, index),
    finalize=_grad_finalize, replicates=_grad_replicates,
    heatmap=Heatmap("grad", "gradient importance |dL/dxi|")))


# ---------------------------------------------------------------- head functions (Voita et al.)


def _positional_cells(shares, index, run):
    estimate = shares.estimate[index]
    best = int(torch.nan_to_num(estimate, nan=-1.0).argmax())
    offsets = run.options.offsets
    cells = {"positional_offset": int(offsets[best]) if not torch.isnan(estimate[best]) else None}
    cells.update(estimate_cells("positional_share", shares, index + (best,)))
    for j, k in enumerate(offsets):
        cells[offset_column(k)] = as_float(estimate[j])
    return cells


def _positional_labels(shares, run):
    found = positional_labels(shares.estimate, run.options.offsets, run.options.thresholds.positional)
    return {index: [f"positional({k})"] for index, k in found.items()}


def _positional_update(acc, view) -> None:
    # candidates: the key_mask keys (no sinks), the keys of the shared argmax
    acc.update_from_argmax(view.reductions.key_max()[1], view.query_mask, view.key_mask)


register(Metric(
    "positional", ("enc-self", "dec-self"), WEIGHTS,  # offsets need Tq == Tk
    accumulator=lambda shape, run: PositionalAccumulator(shape, offsets=run.options.offsets,
                                                         **bootstrap(run)),
    update=_positional_update,
    columns=lambda run: (["positional_offset"] + estimate_columns("positional_share")
                         + [offset_column(k) for k in run.options.offsets]),
    cells=_positional_cells, labels=_positional_labels, text_columns=("positional_offset",),
    heatmap=Heatmap("positional_share", "positional: share at the best offset", (0.0, 1.0)),
    label_colours=(("positional", "#4c72b0"),), label_abbreviations=(("positional", "pos"),)))


def _rare_cutoff(run):
    """--rare-outside-top N as a count: the source dictionary's (training) counts (metrics/rare)."""
    return rarest_count_cutoff(run.task.source_dictionary, run.options.rare_outside_top)


def _rare_accumulator(shape, run):
    # an LM's query sees only its prefix: the rarest token of each query's prefix (metrics/rare)
    kind = PrefixRareWordAccumulator if run.language_model else RareWordAccumulator
    return kind(shape, max_rarest_freq=_rare_cutoff(run), **bootstrap(run))


def _rare_update(acc, view) -> None:
    if view.language_model:
        acc.update_from_argmax(view.reductions.prefix_argmax(), view.key_mask, view.key_counts)
    else:
        acc.update(view.weights, view.query_mask, view.key_mask, view.key_counts)


def _rare_cells(rare, index, run):
    cells = estimate_cells("rare_share", rare.rarest, index)
    cells["rare_two_share"] = as_float(rare.two_rarest.estimate[index])
    cells["rare_chance"] = as_float(rare.chance_rarest.estimate)
    return cells


def _rare_labels(rare, run):
    hits = rare_labels(rare.rarest.estimate, run.options.thresholds.rare)
    return {tuple(index): ["rare"] for index in hits.nonzero().tolist()}


def _rare_meta(by_type, run):
    return {"rare_outside_top": run.options.rare_outside_top,
            "rare_max_rarest_count": _rare_cutoff(run) if by_type else None,
            "rare_chance": {t: {"rarest": as_float(r.chance_rarest.estimate),
                                "two_rarest": as_float(r.chance_two_rarest.estimate)}
                            for t, r in (by_type or {}).items()}}


register(Metric(
    "rare", ("enc-self", "enc-dec"), WEIGHTS,  # keys are source tokens (key frequency known)
    accumulator=_rare_accumulator, update=_rare_update,
    columns=lambda run: estimate_columns("rare_share") + ["rare_two_share", "rare_chance"],
    cells=_rare_cells, labels=_rare_labels, meta=_rare_meta,
    heatmap=Heatmap("rare_share", "rare: share hitting the rarest token", (0.0, 1.0)),
    label_colours=(("rare", "#c44e52"),)))


def _check_syntactic(options) -> None:
    if "syntactic" in (options.metrics or ()) and not options.conllu:
        raise StatsError("the syntactic metric needs --conllu (gold parses of the source side, "
                         "or of a language model's text)")


def _syntactic_update(acc, view) -> None:
    """Word-level attention and gold arcs of each sentence of the batch: the source sentences
    of a translation model (enc-self), the blocks of an LM (dec-self, one sentence a block)."""
    run = view.run
    dictionary = run.task.source_dictionary
    self_weights = torch.stack(view.weights, dim=1)
    word_attn, arcs = [], []
    for b, sentence_id in enumerate(view.sentence_ids):
        keep = view.token_mask[b]
        pieces = [dictionary[int(token)] for token in view.tokens[b][keep]]
        token_attn = self_weights[b][..., keep, :][..., keep]  # (L, H, T, T)
        tokenlist = run.conllu_index[sentence_id]
        try:
            if dictionary.unk_word in pieces:
                pieces = fill_unknown_pieces(pieces, tokenlist, dictionary.unk_word)
                run.counters[UNK_FILLED] = run.counters.get(UNK_FILLED, 0) + 1
            attn_b, arcs_b = prepare_sentence(tokenlist, pieces, token_attn, sentence_index=sentence_id)
        except ValueError as error:
            sentences = "the lines of the subset" if view.language_model else "the source sentences"
            raise StatsError(f"--conllu {run.options.conllu} does not match {sentences} "
                             f"(sentence index = dataset index, 0-based): {error}") from None
        word_attn.append(attn_b)
        arcs.append(arcs_b)
    acc.update(word_attn, arcs)


def _syntactic_columns(run):
    columns = ["syntactic_best", "syntactic_best_gain"]
    for relation in RELATIONS:
        for direction in DIRECTIONS:
            name = syntactic_column(relation, direction)
            columns += estimate_columns(name) + [name + "_baseline"]
    return columns


def _syntactic_cells(scores, index, run):
    cells: Dict[str, object] = {}
    best_slot, best_gain = None, float("nan")
    for (relation, direction), score in scores.items():
        name = syntactic_column(relation, direction)
        cells.update(estimate_cells(name, score.accuracy, index))
        cells[name + "_baseline"] = as_float(score.baseline)
        gain = as_float(score.accuracy.estimate[index]) - as_float(score.baseline)
        if not math.isnan(gain) and (math.isnan(best_gain) or gain > best_gain):
            best_slot, best_gain = f"{relation},{direction}", gain
    cells["syntactic_best"] = best_slot
    cells["syntactic_best_gain"] = best_gain
    return cells


def _syntactic_labels(scores, run):
    found = syntactic_labels({slot: (score.accuracy.estimate, score.baseline)
                              for slot, score in scores.items()},
                             run.options.thresholds.syntactic_margin)
    return {index: [f"syntactic({rel},{direction})" for rel, direction in slots]
            for index, slots in found.items()}


def _syntactic_meta(by_type, run):
    meta = {UNK_FILLED: run.counters.get(UNK_FILLED, 0),
            "syntactic_baselines": {
                t: {f"{rel},{direction}": {"baseline": score.baseline, "offset": score.baseline_offset,
                                           "queries": score.num_queries}
                    for (rel, direction), score in scores.items()}
                for t, scores in (by_type or {}).items()}}
    if run.language_model:  # which arcs an LM's numbers are over (docs/metrics.md)
        meta["syntactic_scored_arcs"] = "other end precedes the query"
    return meta


register(Metric(
    # translation: encoder self-attention; an LM: its causal dec-self, on the arcs whose other
    # end precedes the query (metrics/syntactic.py, preceding_queries)
    "syntactic", ("enc-self",), WEIGHTS, model_kinds=(TRANSLATION, LANGUAGE_MODEL),
    default=lambda options: bool(options.conllu), check_options=_check_syntactic,
    accumulator=lambda shape, run: SyntacticAccumulator(shape, causal=run.language_model,
                                                        **bootstrap(run)),
    update=_syntactic_update, columns=_syntactic_columns, cells=_syntactic_cells,
    labels=_syntactic_labels, meta=_syntactic_meta, text_columns=("syntactic_best",),
    heatmap=Heatmap("syntactic_best_gain", "syntactic: best accuracy - baseline"),
    label_colours=(("syntactic", "#55a868"),),
    label_abbreviations=(("syntactic", "syn"), ("dep->head", "d>h"), ("head->dep", "h>d"))))


# ---------------------------------------------------------------- decoder-only LMs

def _mass_labels(threshold_name: str, label: str):
    def labels(pair, run):
        return _over_threshold(pair[0].estimate, getattr(run.options.thresholds, threshold_name), label)
    return labels


def _previous_token_cells(pair, index, run):
    mass, share = pair
    return {**estimate_cells("previous_token_mass", mass, index),
            **estimate_cells("previous_token_share", share, index, ESTIMATE_SUFFIXES[:3])}


register(Metric(
    "previous_token", ("dec-self",), WEIGHTS, model_kinds=(LANGUAGE_MODEL,),
    accumulator=lambda shape, run: PreviousTokenAccumulator(shape, **bootstrap(run)),
    update=lambda acc, view: acc.update_from_argmax(view.weights, view.reductions.prefix_argmax(),
                                                    view.key_mask),
    columns=lambda run: (estimate_columns("previous_token_mass")
                         + estimate_columns("previous_token_share", ESTIMATE_SUFFIXES[:3])),
    cells=_previous_token_cells, labels=_mass_labels("previous_token", "previous-token"),
    heatmap=Heatmap("previous_token_mass", "previous-token: attention mass on q-1", (0.0, 1.0)),
    label_colours=(("previous-token", "#64b5cd"),),
    label_abbreviations=(("previous-token", "prev"),)))


register(Metric(
    "duplicate_token", ("dec-self",), WEIGHTS, model_kinds=(LANGUAGE_MODEL,),
    accumulator=lambda shape, run: DuplicateTokenAccumulator(shape, **bootstrap(run)),
    update=lambda acc, view: acc.update(view.weights, view.tokens, view.key_mask),
    columns=lambda run: estimate_columns("duplicate_token_mass") + ["duplicate_token_chance"],
    cells=lambda pair, index, run: {**estimate_cells("duplicate_token_mass", pair[0], index),
                                    "duplicate_token_chance": as_float(pair[1].estimate[index])},
    labels=_mass_labels("duplicate_token", "duplicate-token"),
    heatmap=Heatmap("duplicate_token_mass", "duplicate-token: mass on earlier copies", (0.0, 1.0)),
    label_colours=(("duplicate-token", "#ccb974"),),
    label_abbreviations=(("duplicate-token", "dup"),)))


# induction (probes) and natural-text in-context learning: builtin_lm.py, registered after these
