"""The built-in metrics of decoder-only LMs that bring their own inputs (registry PROBES), after
those of builtin.py in heads.csv column order: induction (repeated random-token probes and the OV
circuit's copying score, metrics/induction.py) and in-context learning on the subset's own text
(metrics/natural_icl.py, model level: heads.json meta only).
"""
from __future__ import annotations

import logging
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from ..heads import iter_attention
from ..numbers import as_float
from .capture import capture_heads
from .metrics.induction import (
    InductionAccumulator,
    copying_scores,
    induction_column,
    induction_meta,
    probe_vocabulary,
    repeated_random_probes,
)
from .metrics.natural_icl import NaturalICLAccumulator, natural_icl_meta, position_nll, unavailable_reason
from .registry import LANGUAGE_MODEL, LM_ATTENTION_TYPE, PROBES, Heatmap, Metric, StatsError, bootstrap, register
from .streaming import estimate_cells, estimate_columns

logger = logging.getLogger("fairseq_heads.stats")


def _at_least(estimate, threshold: float, label: str) -> Dict[Tuple[int, int], List[str]]:
    """{(layer, head): [label]} where estimate >= threshold (NaN never labels)."""
    hits = (torch.nan_to_num(estimate, nan=-1.0) >= threshold).nonzero().tolist()
    return {(layer, head): [label] for layer, head in hits}


# ---------------------------------------------------------------- induction


class InductionOutcome(NamedTuple):
    """The induction metric's result: the probe scores and repeat-copy loss drops per length
    ({"all" | L: (scores, drop)}), and the copying score of each head's OV circuit (L, H), NaN
    with ``copying_reason`` when the model's weights do not give one."""

    by_length: Dict[object, tuple]
    copying: torch.Tensor
    copying_reason: Optional[str]


def induction_lengths(run) -> Tuple[int, ...]:
    """The probe lengths whose probes (1 + 2L tokens) fit the model's positions."""
    limit = run.model.max_positions()
    fits = tuple(n for n in run.options.induction_lengths if limit is None or 1 + 2 * n <= limit)
    if not fits:
        raise StatsError(f"--induction-lengths: no probe of 1 + 2L tokens fits the model's "
                         f"{limit} positions")
    return fits


def _induction_probe(acc, run) -> None:
    """Run the repeated random-token probes (metrics/induction.py) through the model."""
    dictionary = run.task.source_dictionary
    generator = torch.Generator().manual_seed(run.options.seed)
    vocabulary = probe_vocabulary(dictionary)
    device = next(run.model.parameters()).device
    for length in acc.lengths:
        probes = repeated_random_probes(vocabulary, length, run.options.induction_probes,
                                        dictionary.eos(), generator)
        for start in range(0, len(probes), 16):
            batch = probes[start:start + 16]
            with torch.no_grad(), capture_heads(run.model, weights=True, head_outputs=False,
                                                attention_types=(LM_ATTENTION_TYPE,)) as captured:
                net_output = run.model(batch.to(device))
                lprobs = run.model.get_normalized_probs(net_output, log_probs=True)
                weights = [w.detach().float().cpu() for w in captured.type_weights(LM_ATTENTION_TYPE)]
            acc.update(weights, lprobs.float().cpu(), batch, length)


def model_copying_scores(model, shape: Tuple[int, int]) -> Tuple[torch.Tensor, Optional[str]]:
    """((L, H) copying scores of an LM's dec-self heads, None), or (NaN, why not)."""
    blocks = sorted(((layer, attention) for t, layer, attention in iter_attention(model)
                     if t == LM_ATTENTION_TYPE), key=lambda pair: pair[0])
    try:
        scores = copying_scores(model.decoder, [attention for _, attention in blocks])
    except (AttributeError, ValueError, RuntimeError) as error:  # not a fairseq Transformer decoder's weights
        return torch.full(shape, float("nan"), dtype=torch.float64), f"{type(error).__name__}: {error}"
    return scores, None


def _induction_finalize(acc, run, replicates) -> InductionOutcome:
    copying, reason = model_copying_scores(run.model, run.shape[LM_ATTENTION_TYPE])
    return InductionOutcome(acc.finalize(), copying, reason)


def _induction_cells(outcome, index, run):
    induction = outcome.by_length
    cells = estimate_cells("induction", induction["all"][0], index)
    cells["induction_chance"] = induction_meta(induction)["chance"]["all"]
    for key, (scores, _) in induction.items():
        if key != "all":
            cells[induction_column(key)] = as_float(scores.estimate[index])
    cells["copying_score"] = as_float(outcome.copying[index])
    return cells


def _induction_meta(by_type, run):
    if by_type is None:
        return {"induction_probes": None}
    meta = {"induction_probes": {"lengths": list(induction_lengths(run)),
                                 "per_length": run.options.induction_probes, "seed": run.options.seed}}
    for outcome in by_type.values():
        meta["induction"] = induction_meta(outcome.by_length)
        meta["induction"]["copying_score_unavailable"] = outcome.copying_reason
    return meta


register(Metric(
    "induction", ("dec-self",), PROBES, model_kinds=(LANGUAGE_MODEL,),
    accumulator=lambda shape, run: InductionAccumulator(shape, induction_lengths(run), **bootstrap(run)),
    probe=_induction_probe, finalize=_induction_finalize,
    columns=lambda run: (estimate_columns("induction") + ["induction_chance"]
                         + [induction_column(n) for n in run.options.induction_lengths]
                         + ["copying_score"]),
    cells=_induction_cells, meta=_induction_meta,
    labels=lambda outcome, run: _at_least(outcome.by_length["all"][0].estimate,
                                          run.options.thresholds.induction, "induction"),
    heatmap=Heatmap("induction", "induction score (repeated random probes)", (0.0, 1.0)),
    label_colours=(("induction", "#dd8452"),)))


# ---------------------------------------------------------------- natural-text in-context learning


def _lprobs_at(model, src_tokens: torch.Tensor, positions: List[int]) -> torch.Tensor:
    """(B, P, V) next-token log-probabilities at the given positions only: a fairseq Transformer
    decoder projects just those features to the vocabulary (the largest matmul of a small LM)."""
    from fairseq.models.transformer import TransformerDecoderBase

    decoder = getattr(model, "decoder", None)
    if isinstance(decoder, TransformerDecoderBase) and getattr(decoder, "adaptive_softmax", None) is None:
        features, extra = model(src_tokens, features_only=True)
        logits = decoder.output_layer(features[:, positions])
        return model.get_normalized_probs((logits, extra), log_probs=True)
    net_output = model(src_tokens)
    return model.get_normalized_probs(net_output, log_probs=True)[:, positions]


def _natural_icl_probe(acc, run) -> None:
    """The subset's blocks that reach the late position, cut there (causal: nothing later
    counts), through the model; the losses at (early, late) of each."""
    dataset = run.task.dataset(run.subset)
    acc.reason = unavailable_reason(run.model.max_positions(), dataset.sizes, acc.late)
    if acc.reason is not None:
        logger.warning("natural_icl: no score: %s", acc.reason)
        return
    blocks = [i for i, size in enumerate(dataset.sizes) if int(size) > acc.late]
    per_batch = max(1, (run.options.max_tokens or 4096) // (acc.late + 1))
    device = next(run.model.parameters()).device
    positions = [acc.early, acc.late]
    for start in range(0, len(blocks), per_batch):
        sample = dataset.collater([dataset[i] for i in blocks[start:start + per_batch]])
        src_tokens = sample["net_input"]["src_tokens"][:, :acc.late + 1].to(device)
        with torch.no_grad():
            lprobs = _lprobs_at(run.model, src_tokens, positions)
        acc.update(position_nll(lprobs.float().cpu(), sample["target"][:, positions]))


def _natural_icl_meta(by_type, run):
    """heads.json meta natural_icl: the score, both mean losses, the positions, or why not."""
    return {"natural_icl": next(iter(by_type.values())) if by_type else None}


register(Metric(
    # model level: no per-head columns; heads.json meta natural_icl
    "natural_icl", ("dec-self",), PROBES, model_kinds=(LANGUAGE_MODEL,),
    accumulator=lambda shape, run: NaturalICLAccumulator(run.options.icl_positions, **bootstrap(run)),
    probe=_natural_icl_probe,
    finalize=lambda acc, run, replicates: natural_icl_meta(acc, acc.finalize()),
    columns=lambda run: [], cells=lambda result, index, run: {}, meta=_natural_icl_meta))
