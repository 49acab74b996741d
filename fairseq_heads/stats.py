"""Per-head statistics of a trained translation model or decoder-only language model over one
data subset (`fairseq-heads stats`).

One teacher-forced pass over the subset (fairseq's task, dataset and batch iterator), streaming:
every metric is an accumulator from :mod:`fairseq_heads.analysis`, so memory does not grow with
the subset.  All accumulators share one bootstrap seed and see the sentences in the same (batch)
order, so their replicates are the same resamples and the agreement intervals are a joint
bootstrap.

Which attention types each metric covers:
- confidence, lrp, grad: all three;
- positional: self-attention (enc-self, dec-self; offsets need Tq == Tk);
- rare: attention whose keys are source tokens (enc-self, enc-dec), key frequency = the source
  dictionary's counts (``Dictionary.count``);
- syntactic: enc-self, with gold parses of the source side (``--conllu``, one sentence per
  source sentence, same order as the dataset; matched through ``sample["id"]``).
Queries and keys are real tokens: source positions that are not pad/EOS, and decoder positions
whose input token (``prev_output_tokens``) is not pad/EOS (the leading EOS is not a query).

Decoder-only language models (``--task language_modeling``; one attention type, dec-self, causal):
queries are real tokens with at least one earlier real token in their block (the first token's
attention is forced); rare-word heads ask for the least frequent token of each query's *prefix*;
previous_token, duplicate_token and induction (Olsson et al. 2022, on repeated random-token
probes) are LM-only; syntactic heads are not computed for LMs.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .analysis import grad_importance, lrp
from .analysis.agreement import agreement_report
from .analysis.capture import CapturedHeads, capture_heads
from .analysis.confidence import ConfidenceAccumulator
from .analysis.labels import PAPER_THRESHOLDS, LabelThresholds, head_labels
from .analysis.positional import DEFAULT_OFFSETS, PositionalAccumulator
from .analysis.duplicate_token import DuplicateTokenAccumulator
from .analysis.induction import (
    DEFAULT_LENGTHS,
    DEFAULT_PROBES,
    InductionAccumulator,
    probe_vocabulary,
    repeated_random_probes,
    uniform_induction_score,
)
from .analysis.previous_token import PreviousTokenAccumulator
from .analysis.rare import PrefixRareWordAccumulator, RareWordAccumulator
from .analysis.streaming import (
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    RatioAccumulator,
    RatioEstimate,
    percentile_interval,
)
from .analysis.syntactic import (
    DIRECTIONS,
    RELATIONS,
    SyntacticAccumulator,
    normalize_chars,
    prepare_sentence,
    word_characters,
)
from .modules.gated_attention import ATTENTION_TYPES, iter_attention

logger = logging.getLogger("fairseq_heads.stats")

METRICS = ("confidence", "lrp", "grad", "positional", "syntactic", "rare",
           "previous_token", "duplicate_token", "induction")
DEFAULT_METRICS = ("confidence", "lrp", "grad", "positional", "rare")  # + syntactic with --conllu
LM_METRICS = ("previous_token", "duplicate_token", "induction")  # decoder-only LMs only
DEFAULT_LM_METRICS = ("confidence", "lrp", "grad", "positional", "rare") + LM_METRICS
DEFAULT_LM_OFFSETS = (-3, -2, -1, 0)  # causal attention has no positive offsets
# need attention weights of the data pass (induction runs its own probes)
ATTENTION_METRICS = ("confidence", "positional", "syntactic", "rare", "previous_token",
                     "duplicate_token")
METRIC_TYPES = {
    "confidence": ATTENTION_TYPES,
    "lrp": ATTENTION_TYPES,
    "grad": ATTENTION_TYPES,
    "positional": ("enc-self", "dec-self"),
    "rare": ("enc-self", "enc-dec"),
    "syntactic": ("enc-self",),
    "previous_token": ("dec-self",),
    "duplicate_token": ("dec-self",),
    "induction": ("dec-self",),
}
# Metrics whose per-head values enter agreement.json (plus gate P(open) for gated models).
AGREEMENT_METRICS = ("confidence", "lrp", "grad")


class StatsError(ValueError):
    """A user-facing problem with the inputs (checkpoint, data, subset, parses)."""


@dataclass
class StatsOptions:
    metrics: Optional[Sequence[str]] = None  # None: DEFAULT_METRICS, plus syntactic with conllu
    conllu: Optional[str] = None
    lrp_normalise: str = "sentence"
    grad_normalise: str = "none"
    offsets: Optional[Sequence[int]] = None  # None: DEFAULT_OFFSETS, DEFAULT_LM_OFFSETS for LMs
    thresholds: LabelThresholds = PAPER_THRESHOLDS
    replicates: int = DEFAULT_REPLICATES
    seed: int = DEFAULT_SEED
    max_tokens: Optional[int] = 4096
    batch_size: Optional[int] = None
    cpu: bool = False
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    log_format: Optional[str] = None  # fairseq progress bar format; default tqdm/simple
    log_interval: int = 100
    induction_lengths: Sequence[int] = DEFAULT_LENGTHS
    induction_probes: int = DEFAULT_PROBES  # per length


@dataclass
class HeadStatistics:
    """The result: one row per head (dicts keyed by ``columns``), agreement and run metadata."""

    rows: List[Dict[str, object]]
    columns: List[str]
    agreement: Dict[str, object]
    meta: Dict[str, object] = field(default_factory=dict)


def parse_metrics(value: str) -> Tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in METRICS]
    if unknown or not names:
        raise StatsError(f"--metrics: unknown metric(s) {unknown or [value]}; "
                         f"choose a comma list of {', '.join(METRICS)}")
    return names


def check_options(options: StatsOptions) -> None:
    if "syntactic" in (options.metrics or ()) and not options.conllu:
        raise StatsError("the syntactic metric needs --conllu (gold parses of the source side)")
    if options.conllu and not os.path.isfile(options.conllu):
        raise StatsError(f"--conllu: file not found: {options.conllu}")
    if options.lrp_normalise not in lrp.LRP_MODES:
        raise StatsError(f"--lrp-normalise must be one of {', '.join(lrp.LRP_MODES)}")
    if options.grad_normalise not in grad_importance.GRAD_NORMALISATIONS:
        raise StatsError(f"--grad-normalise must be one of "
                         f"{', '.join(grad_importance.GRAD_NORMALISATIONS)}")


def options_for_model(options: StatsOptions, language_model: bool) -> StatsOptions:
    """Fill in the defaults that depend on the kind of model; refuse metrics it cannot have."""
    metrics, offsets = options.metrics, options.offsets
    if metrics is None:
        metrics = DEFAULT_LM_METRICS if language_model else (
            DEFAULT_METRICS + (("syntactic",) if options.conllu else ()))
    if offsets is None:
        offsets = DEFAULT_LM_OFFSETS if language_model else DEFAULT_OFFSETS
    if language_model and "syntactic" in metrics:
        raise StatsError("--metrics: syntactic heads are computed for translation models only "
                         "(this checkpoint is a language model)")
    if not language_model:
        lm_only = [m for m in metrics if m in LM_METRICS]
        if lm_only:
            raise StatsError(f"--metrics: {', '.join(lm_only)} need a decoder-only language model "
                             f"(this checkpoint is a translation model)")
    return dataclasses.replace(options, metrics=tuple(metrics), offsets=tuple(offsets))


# ---------------------------------------------------------------- loading


def is_language_model(model) -> bool:
    from fairseq.models import FairseqLanguageModel

    return isinstance(model, FairseqLanguageModel)


def load_translation_model(checkpoint: str, data_bin: str, source_lang: Optional[str] = None,
                           target_lang: Optional[str] = None):
    """(model in eval mode, task) via fairseq's checkpoint_utils, with ``data`` = data_bin.

    A translation checkpoint (encoder-decoder) or a decoder-only language model
    (``--task language_modeling``); see :func:`is_language_model`."""
    from fairseq import checkpoint_utils
    from fairseq.models import FairseqEncoderDecoderModel
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    from .compat import patch_fairseq_checkpoint_loading

    if not os.path.isfile(checkpoint):
        raise StatsError(f"checkpoint not found: {checkpoint}")
    if not os.path.isdir(data_bin):
        raise StatsError(f"data directory not found: {data_bin}")
    overrides = {"data": data_bin}
    if source_lang:
        overrides["source_lang"] = source_lang
    if target_lang:
        overrides["target_lang"] = target_lang
    patch_fairseq_checkpoint_loading()
    state = checkpoint_utils.load_checkpoint_to_cpu(checkpoint, overrides)
    cfg = state.get("cfg")
    task_name = cfg["task"]["_name"] if cfg is not None and cfg.get("task") is not None else None
    task_class = TASK_REGISTRY.get(task_name)
    # Check before building anything: another task would misread the data-bin.
    if task_class is None or not issubclass(task_class, (TranslationTask, LanguageModelingTask)):
        raise StatsError(f"{checkpoint}: neither a translation model nor a language model (its "
                         f"task is {task_name!r}); stats needs a translation or language_modeling "
                         f"checkpoint")
    try:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], state=state)
    except Exception as error:  # fairseq fails in many ways on mismatched data; name the inputs
        raise StatsError(f"cannot load {checkpoint} with data {data_bin}: "
                         f"{type(error).__name__}: {error}") from error
    model = models[0]
    if not isinstance(model, FairseqEncoderDecoderModel) and not is_language_model(model):
        raise StatsError(f"{checkpoint}: not an encoder-decoder Transformer or a Transformer LM "
                         f"({type(model).__name__})")
    if not any(True for _ in iter_attention(model)):
        raise StatsError(f"{checkpoint}: no fairseq attention blocks in {type(model).__name__}")
    model.eval()
    return model, task


def head_layout(model) -> Dict[str, Tuple[int, int]]:
    """{attention type: (layers, heads per layer)}; layers of a type must have equal heads."""
    heads: Dict[str, Dict[int, int]] = {}
    for attention_type, layer, attention in iter_attention(model):
        heads.setdefault(attention_type, {})[layer] = attention.num_heads
    layout = {}
    for attention_type in ATTENTION_TYPES:
        if attention_type in heads:
            per_layer = heads[attention_type]
            if sorted(per_layer) != list(range(len(per_layer))) or len(set(per_layer.values())) != 1:
                raise StatsError(f"{attention_type}: layers with different numbers of heads "
                                 f"({per_layer}) are not supported")
            if not any(per_layer.values()):  # every head pruned: nothing to measure
                logger.info("%s: 0 heads in each of its %d layers (all pruned); left out",
                            attention_type, len(per_layer))
                continue
            layout[attention_type] = (len(per_layer), next(iter(per_layer.values())))
    return layout


def empty_attention_types(model) -> Dict[str, int]:
    """{attention type: layers} of the types whose every head was pruned (not in head_layout)."""
    layers: Dict[str, List[int]] = {}
    for attention_type, _, attention in iter_attention(model):
        layers.setdefault(attention_type, []).append(attention.num_heads)
    return {t: len(heads) for t, heads in layers.items() if not any(heads)}


def gate_probabilities(model, layout: Mapping[str, Tuple[int, int]]) -> Dict[str, Tensor]:
    """{attention type: (L, H) P(gate open)} for the gated types (NaN for ungated layers)."""
    from .models.gated_transformer import iter_gates

    out: Dict[str, Tensor] = {}
    for attention_type, layer, gate in iter_gates(model):
        table = out.setdefault(attention_type, torch.full(layout[attention_type], float("nan"),
                                                          dtype=torch.float64))
        table[layer] = gate.prob_open().detach().to(torch.float64).cpu()
    return out


def batch_iterator(task, model, subset: str, options: StatsOptions):
    """A fairseq progress bar over the subset's batches (fixed order, no shuffling)."""
    from fairseq import utils
    from fairseq.logging import progress_bar

    try:
        task.load_dataset(subset, combine=False, epoch=1)
    except FileNotFoundError as error:
        raise StatsError(f"subset {subset!r} not found in {task.cfg.data}: {error}") from None
    dataset = task.dataset(subset)
    iterator = task.get_batch_iterator(
        dataset=dataset, max_tokens=options.max_tokens, max_sentences=options.batch_size,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ignore_invalid_inputs=False, required_batch_size_multiple=1, seed=options.seed,
        num_workers=0).next_epoch_itr(shuffle=False)
    bar = progress_bar.progress_bar(iterator, log_format=options.log_format,
                                    log_interval=options.log_interval,
                                    prefix=f"stats on '{subset}' subset",
                                    default_log_format="tqdm")
    return dataset, bar


# ---------------------------------------------------------------- accumulation


def fill_unknown_pieces(pieces: Sequence[str], tokenlist, unk_word: str) -> List[str]:
    """Replace ``<unk>`` pieces by the characters of the CoNLL-U text they stand for.

    The known pieces fix the rest of the text, so each run of consecutive unknown pieces
    covers the characters between its neighbours (the first piece of a run gets them all, the
    others none: they then belong to the next word).  Raises ``ValueError`` naming the sentence
    when the known pieces do not fit the text.
    """
    text, _ = word_characters(tokenlist)
    runs: List[Tuple[bool, List[str]]] = []  # (is an unknown run, pieces)
    for piece in pieces:
        unknown = piece == unk_word
        if runs and runs[-1][0] == unknown and unknown:
            runs[-1][1].append(piece)
        else:
            runs.append((unknown, [piece]))
    pattern = "".join("(.+?)" if unknown else re.escape(normalize_chars(run[0]))
                      for unknown, run in runs)
    match = re.fullmatch(pattern, text, flags=re.DOTALL)
    if match is None:
        sent_id = (tokenlist.metadata or {}).get("sent_id")
        raise ValueError(f"sent_id={sent_id}: the known subwords {pieces} do not fit the "
                         f"CoNLL-U text {text!r}")
    filled: List[str] = []
    groups = iter(match.groups())
    for unknown, run in runs:
        filled += [next(groups)] + [""] * (len(run) - 1) if unknown else run
    return filled


class _Collector:
    """All accumulators of one run; ``update(sample)`` per batch, ``finalize()`` at the end."""

    def __init__(self, model, task, layout, options: StatsOptions, conllu_index=None):
        self.model, self.task, self.layout, self.options = model, task, layout, options
        self.is_lm = is_language_model(model)
        self.metrics = tuple(options.metrics)
        self.conllu_index = conllu_index
        self.src_dict, self.tgt_dict = task.source_dictionary, task.target_dictionary
        self.src_pad, self.src_eos = self.src_dict.pad(), self.src_dict.eos()
        self.tgt_pad, self.tgt_eos = self.tgt_dict.pad(), self.tgt_dict.eos()
        self.src_counts = torch.tensor(self.src_dict.count, dtype=torch.float64)
        bootstrap = dict(replicates=options.replicates, seed=options.seed)
        self.acc: Dict[Tuple[str, str], object] = {}
        for metric in self.metrics:
            # an LM has one attention type, causal self-attention, and every metric covers it
            for attention_type in ("dec-self",) if self.is_lm else METRIC_TYPES[metric]:
                if attention_type not in layout:
                    continue
                shape = layout[attention_type]
                if metric == "confidence":
                    acc = ConfidenceAccumulator(shape, **bootstrap)
                elif metric == "positional":
                    acc = PositionalAccumulator(shape, offsets=options.offsets, **bootstrap)
                elif metric == "rare":
                    acc = (PrefixRareWordAccumulator if self.is_lm else RareWordAccumulator)(shape, **bootstrap)
                elif metric == "previous_token":
                    acc = PreviousTokenAccumulator(shape, **bootstrap)
                elif metric == "duplicate_token":
                    acc = DuplicateTokenAccumulator(shape, **bootstrap)
                elif metric == "induction":
                    acc = InductionAccumulator(shape, self.induction_lengths(), **bootstrap)
                elif metric == "syntactic":
                    acc = SyntacticAccumulator(shape, **bootstrap)
                else:  # lrp, grad: plain per-sentence ratios
                    acc = RatioAccumulator(shape, **bootstrap)
                self.acc[(metric, attention_type)] = acc
        self.keys = [(t, layer) for t in layout for layer in range(layout[t][0])]
        self.num_sentences = 0
        self.num_target_tokens = 0
        self.sentences_with_unk = 0  # syntactic: source sentences whose <unk> pieces were filled

    def induction_lengths(self) -> Tuple[int, ...]:
        """The probe lengths whose probes (1 + 2L tokens) fit the model's positions."""
        limit = self.model.max_positions()
        fits = tuple(n for n in self.options.induction_lengths if limit is None or 1 + 2 * n <= limit)
        if not fits:
            raise StatsError(f"--induction-lengths: no probe of 1 + 2L tokens fits the model's "
                             f"{limit} positions")
        return fits

    def _has(self, metric: str) -> bool:
        return metric in self.metrics

    def _masks(self, sample) -> Dict[str, Tuple[Tensor, Tensor]]:
        """{attention type: (query mask, key mask)}, each (B, T) bool."""
        net_input = sample["net_input"]
        src = net_input["src_tokens"]
        src_mask = (src != self.src_pad) & (src != self.src_eos)
        if self.is_lm:  # a query needs an earlier token to choose from: the first one's is forced
            return {"dec-self": (src_mask & (src_mask.long().cumsum(-1) >= 2), src_mask)}
        prev = net_input["prev_output_tokens"]
        dec_mask = (prev != self.tgt_pad) & (prev != self.tgt_eos)
        return {"enc-self": (src_mask, src_mask), "dec-self": (dec_mask, dec_mask),
                "enc-dec": (dec_mask, src_mask)}

    def update(self, sample) -> None:
        net_input = sample["net_input"]
        src, target = net_input["src_tokens"], sample["target"]
        masks = self._masks(sample)
        target_mask = target != self.tgt_pad
        self.num_sentences += src.shape[0]
        self.num_target_tokens += int(target_mask.sum())
        if not self.keys:  # every head pruned: nothing per head to measure
            return

        need_weights = any(self._has(m) for m in ATTENTION_METRICS)
        need_grad = self._has("grad")
        if need_weights or need_grad:
            with torch.set_grad_enabled(need_grad), \
                    capture_heads(self.model, weights=need_weights, head_outputs=need_grad) as captured:
                net_output = self.model(**net_input)
                if need_weights:
                    self._update_attention_metrics(captured, sample, masks)
                if need_grad:
                    lprobs = self.model.get_normalized_probs(net_output, log_probs=True)
                    loss = lrp.reference_nll(lprobs, target, self.tgt_pad)
                    importance = grad_importance.gradient_importance(loss, captured, self.keys)
                    self._update_per_sentence("grad", importance, torch.ones(src.shape[0]))
            del net_output, captured
        if self._has("lrp"):
            with lrp.conservative_lrp_rules(self.model), \
                    capture_heads(self.model, weights=False, head_outputs=True) as captured:
                logits, _ = self.model(**net_input)
                relevance, units = lrp.lrp_head_relevance(
                    logits, target_mask, captured, self.keys, self.options.lrp_normalise)
            self._update_per_sentence("lrp", relevance, units)

    def _update_per_sentence(self, metric: str, per_key: Mapping[Tuple[str, int], Tensor],
                             units: Tensor) -> None:
        """Stack (B, H) per layer into (B, L, H) per type and add to the ratio accumulators."""
        units = units.to(torch.float64).cpu()
        for attention_type, (num_layers, _) in self.layout.items():
            stacked = torch.stack([per_key[(attention_type, layer)].cpu()
                                   for layer in range(num_layers)], dim=1)
            self.acc[(metric, attention_type)].update(stacked, units[:, None, None].expand_as(stacked))

    def _update_attention_metrics(self, captured: CapturedHeads, sample, masks) -> None:
        src = sample["net_input"]["src_tokens"]
        src_mask = masks["dec-self" if self.is_lm else "enc-self"][1]
        for attention_type in self.layout:
            weights = [w.detach().float().cpu() for w in captured.type_weights(attention_type)]
            query_mask, key_mask = (m.cpu() for m in masks[attention_type])
            acc = self.acc.get(("confidence", attention_type))
            if acc is not None:
                acc.update(weights, query_mask, key_mask)
            acc = self.acc.get(("positional", attention_type))
            if acc is not None:
                acc.update(weights, query_mask, key_mask)
            acc = self.acc.get(("rare", attention_type))
            if acc is not None and self.is_lm:
                acc.update(weights, key_mask, self.src_counts[src.cpu()])
            elif acc is not None:
                acc.update(weights, query_mask, key_mask, self.src_counts[src.cpu()])
            acc = self.acc.get(("previous_token", attention_type))
            if acc is not None:
                acc.update(weights, key_mask)
            acc = self.acc.get(("duplicate_token", attention_type))
            if acc is not None:
                acc.update(weights, src.cpu(), key_mask)
            acc = self.acc.get(("syntactic", attention_type))
            if acc is not None:
                acc.update(*self._word_attention(torch.stack(weights, dim=1), src.cpu(),
                                                 src_mask.cpu(), sample["id"].tolist()))

    def _word_attention(self, enc_weights: Tensor, src: Tensor, src_mask: Tensor,
                        ids: List[int]) -> Tuple[List[Tensor], List[list]]:
        """Word-level attention and gold arcs of each source sentence of the batch."""
        word_attn, arcs = [], []
        for b, sentence_id in enumerate(ids):
            keep = src_mask[b]
            pieces = [self.src_dict[int(token)] for token in src[b][keep]]
            token_attn = enc_weights[b][..., keep, :][..., keep]  # (L, H, T, T)
            tokenlist = self.conllu_index[sentence_id]
            try:
                if self.src_dict.unk_word in pieces:
                    pieces = fill_unknown_pieces(pieces, tokenlist, self.src_dict.unk_word)
                    self.sentences_with_unk += 1
                attn_b, arcs_b = prepare_sentence(tokenlist, pieces, token_attn,
                                                  sentence_index=sentence_id)
            except ValueError as error:
                raise StatsError(f"--conllu {self.options.conllu} does not match the source "
                                 f"sentences (sentence index = dataset index, 0-based): {error}"
                                 ) from None
            word_attn.append(attn_b)
            arcs.append(arcs_b)
        return word_attn, arcs

    def score_induction(self) -> None:
        """Run the repeated random-token probes (see analysis/induction.py) through the model."""
        acc = self.acc.get(("induction", "dec-self"))
        if acc is None:
            return
        generator = torch.Generator().manual_seed(self.options.seed)
        vocabulary = probe_vocabulary(self.src_dict)
        device = next(self.model.parameters()).device
        for length in acc.lengths:
            probes = repeated_random_probes(vocabulary, length, self.options.induction_probes,
                                            self.src_eos, generator)
            for start in range(0, len(probes), 16):
                batch = probes[start:start + 16]
                with torch.no_grad(), capture_heads(self.model, weights=True, head_outputs=False,
                                                    attention_types=("dec-self",)) as captured:
                    net_output = self.model(batch.to(device))
                    lprobs = self.model.get_normalized_probs(net_output, log_probs=True)
                    weights = [w.detach().float().cpu() for w in captured.type_weights("dec-self")]
                acc.update(weights, lprobs.float().cpu(), batch, length)

    # ------------------------------------------------------------ results

    def finalize(self) -> Dict[Tuple[str, str], object]:
        return {key: acc.finalize() for key, acc in self.acc.items()}

    def replicates(self, metric: str, attention_type: str) -> Optional[Tensor]:
        acc = self.acc.get((metric, attention_type))
        return None if acc is None else acc.replicate_estimates()


# ---------------------------------------------------------------- the table


def _f(value) -> float:
    return float(value) if value is not None else float("nan")


def _estimate_columns(prefix: str, estimate: RatioEstimate, index) -> Dict[str, float]:
    return {prefix: _f(estimate.estimate[index]), f"{prefix}_ci_low": _f(estimate.ci_low[index]),
            f"{prefix}_ci_high": _f(estimate.ci_high[index]), f"{prefix}_count": _f(estimate.count[index])}


def offset_column(k: int) -> str:
    return f"positional_share_at_{k:+d}" if k else "positional_share_at_0"


def syntactic_column(relation: str, direction: str) -> str:
    return f"syntactic_{relation}_{direction.replace('->', '2')}"


def table_columns(metrics: Sequence[str], offsets: Sequence[int], gated: bool,
                  induction_lengths: Sequence[int] = DEFAULT_LENGTHS) -> List[str]:
    columns = ["type", "layer", "head"]
    if gated:
        columns.append("gate_p_open")
    stats = ("", "_ci_low", "_ci_high", "_count")
    for metric in ("confidence", "lrp", "grad"):
        if metric in metrics:
            columns += [metric + s for s in stats]
    if "positional" in metrics:
        columns += ["positional_offset"] + ["positional_share" + s for s in stats]
        columns += [offset_column(k) for k in offsets]
    if "rare" in metrics:
        columns += ["rare_share" + s for s in stats] + ["rare_two_share", "rare_chance"]
    if "syntactic" in metrics:
        columns += ["syntactic_best", "syntactic_best_gain"]
        for relation in RELATIONS:
            for direction in DIRECTIONS:
                name = syntactic_column(relation, direction)
                columns += [name + s for s in stats] + [name + "_baseline"]
    if "previous_token" in metrics:
        columns += ["previous_token_mass" + s for s in stats]
        columns += ["previous_token_share" + s for s in stats[:3]]
    if "duplicate_token" in metrics:
        columns += ["duplicate_token_mass" + s for s in stats] + ["duplicate_token_chance"]
    if "induction" in metrics:
        columns += ["induction" + s for s in stats] + ["induction_chance"]
        columns += [induction_column(n) for n in induction_lengths]
    columns.append("labels")
    return columns


def induction_column(length: int) -> str:
    return f"induction_L{length}"


def build_rows(layout, results, gates, offsets, thresholds
               ) -> Tuple[List[Dict[str, object]], Dict[str, object]]:
    """One row per head with every metric's columns, and per-type metadata (baselines, chance)."""
    rows = []
    extra: Dict[str, object] = {"syntactic_baselines": {}, "rare_chance": {}}
    for attention_type, (num_layers, num_heads) in layout.items():
        positional = results.get(("positional", attention_type))
        rare = results.get(("rare", attention_type))
        syntactic = results.get(("syntactic", attention_type))
        grad = results.get(("grad", attention_type))
        previous = results.get(("previous_token", attention_type))
        duplicate = results.get(("duplicate_token", attention_type))
        induction = results.get(("induction", attention_type))
        if induction is not None:
            extra["induction"] = induction_meta(induction)
        lm_labels = causal_head_labels(previous, duplicate, induction, thresholds)
        labels = head_labels(
            attention_type,
            positional=(positional.estimate, offsets) if positional is not None else None,
            rarest_share=rare.rarest.estimate if rare is not None else None,
            syntactic=({slot: (score.accuracy.estimate, score.baseline)
                        for slot, score in syntactic.items()} if syntactic is not None else None),
            thresholds=thresholds)
        if rare is not None:
            extra["rare_chance"][attention_type] = {"rarest": _f(rare.chance_rarest.estimate),
                                                    "two_rarest": _f(rare.chance_two_rarest.estimate)}
        if syntactic is not None:
            extra["syntactic_baselines"][attention_type] = {
                f"{rel},{direction}": {"baseline": score.baseline, "offset": score.baseline_offset,
                                       "queries": score.num_queries}
                for (rel, direction), score in syntactic.items()}
        for layer in range(num_layers):
            for head in range(num_heads):
                index = (layer, head)
                row: Dict[str, object] = {"type": attention_type, "layer": layer, "head": head}
                if gates is not None:
                    gate = gates.get(attention_type)
                    row["gate_p_open"] = _f(gate[index]) if gate is not None else float("nan")
                for metric in ("confidence", "lrp"):
                    result = results.get((metric, attention_type))
                    if result is not None:
                        row.update(_estimate_columns(metric, result, index))
                if grad is not None:
                    row.update(_estimate_columns("grad", grad, index))
                if positional is not None:
                    shares = positional.estimate[index]
                    best = int(torch.nan_to_num(shares, nan=-1.0).argmax())
                    row["positional_offset"] = int(offsets[best]) if not torch.isnan(shares[best]) else None
                    row.update(_estimate_columns("positional_share", positional, index + (best,)))
                    for j, k in enumerate(offsets):
                        row[offset_column(k)] = _f(shares[j])
                if rare is not None:
                    row.update(_estimate_columns("rare_share", rare.rarest, index))
                    row["rare_two_share"] = _f(rare.two_rarest.estimate[index])
                    row["rare_chance"] = _f(rare.chance_rarest.estimate)
                if syntactic is not None:
                    best_slot, best_gain = None, float("nan")
                    for (relation, direction), score in syntactic.items():
                        name = syntactic_column(relation, direction)
                        row.update(_estimate_columns(name, score.accuracy, index))
                        row[name + "_baseline"] = _f(score.baseline)
                        gain = _f(score.accuracy.estimate[index]) - _f(score.baseline)
                        if not math.isnan(gain) and (math.isnan(best_gain) or gain > best_gain):
                            best_slot, best_gain = f"{relation},{direction}", gain
                    row["syntactic_best"] = best_slot
                    row["syntactic_best_gain"] = best_gain
                if previous is not None:
                    row.update(_estimate_columns("previous_token_mass", previous[0], index))
                    share = _estimate_columns("previous_token_share", previous[1], index)
                    share.pop("previous_token_share_count")
                    row.update(share)
                if duplicate is not None:
                    row.update(_estimate_columns("duplicate_token_mass", duplicate[0], index))
                    row["duplicate_token_chance"] = _f(duplicate[1].estimate[index])
                if induction is not None:
                    row.update(_estimate_columns("induction", induction["all"][0], index))
                    row["induction_chance"] = extra["induction"]["chance"]["all"]
                    for key, (scores, _) in induction.items():
                        if key != "all":
                            row[induction_column(key)] = _f(scores.estimate[index])
                row["labels"] = (labels.get((attention_type, layer, head), [])
                                 + lm_labels.get((layer, head), []))
                rows.append(row)
    return rows, extra


def induction_meta(induction) -> Dict[str, object]:
    """The model-level numbers of the induction probes: loss drop (nats/token) with its interval
    per probe length, and the uniform-attention chance score."""
    meta: Dict[str, object] = {"loss_drop": {}, "chance": {}}
    for key, (_, drop) in induction.items():
        meta["loss_drop"][str(key)] = {"estimate": _f(drop.estimate), "ci_low": _f(drop.ci_low),
                                       "ci_high": _f(drop.ci_high), "probes": _f(drop.count)}
    lengths = [key for key in induction if key != "all"]
    for key in lengths:
        meta["chance"][str(key)] = uniform_induction_score(key)
    # the pooled score weighs each probe length by its L second-half positions
    meta["chance"]["all"] = (sum(k * meta["chance"][str(k)] for k in lengths) / sum(lengths)
                             if lengths else float("nan"))
    return meta


def causal_head_labels(previous, duplicate, induction, thresholds) -> Dict[Tuple[int, int], List[str]]:
    """{(layer, head): labels} from the LM head functions (thresholds in LabelThresholds)."""
    out: Dict[Tuple[int, int], List[str]] = {}
    for name, estimate, threshold in (
            ("previous-token", previous[0].estimate if previous else None, thresholds.previous_token),
            ("duplicate-token", duplicate[0].estimate if duplicate else None, thresholds.duplicate_token),
            ("induction", induction["all"][0].estimate if induction else None, thresholds.induction)):
        if estimate is None:
            continue
        for layer, head in (torch.nan_to_num(estimate, nan=-1.0) >= threshold).nonzero().tolist():
            out.setdefault((layer, head), []).append(name)
    return out


def normalise_grad_per_layer(results, collector: "_Collector", layout) -> None:
    """Replace each type's grad estimate by its layer-L2-normalised version; the interval is
    the percentile interval of the normalised replicates (normalising is not linear)."""
    for attention_type in layout:
        grad = results.get(("grad", attention_type))
        if grad is None:
            continue
        replicates = grad_importance.normalise_layers_l2(collector.replicates("grad", attention_type))
        low, high = percentile_interval(replicates)
        results[("grad", attention_type)] = RatioEstimate(
            grad_importance.normalise_layers_l2(grad.estimate), grad.count, low, high)


def agreement_inputs(collector: _Collector, results, gates, layout, grad_normalise):
    """{type: {metric: (estimate (L, H), replicates (R, L, H) or None)}} for agreement_report."""
    inputs: Dict[str, Dict[str, Tuple[Tensor, Optional[Tensor]]]] = {}
    for attention_type in layout:
        metrics: Dict[str, Tuple[Tensor, Optional[Tensor]]] = {}
        for metric in AGREEMENT_METRICS:
            result = results.get((metric, attention_type))
            if result is None:
                continue
            replicates = collector.replicates(metric, attention_type)
            if metric == "grad" and grad_normalise == "layer":
                replicates = grad_importance.normalise_layers_l2(replicates)
            metrics[metric] = (result.estimate, replicates)
        if gates is not None and attention_type in gates:
            metrics["gate_p_open"] = (gates[attention_type], None)
        if len(metrics) >= 2:
            inputs[attention_type] = metrics
    return inputs


# ---------------------------------------------------------------- entry point


def compute_head_statistics(data_bin: str, checkpoint: str, subset: str,
                            options: Optional[StatsOptions] = None) -> HeadStatistics:
    """Teacher-forced pass over ``subset`` of ``data_bin``; per-head table, agreement, metadata."""
    from fairseq import utils

    from .conllu_index import ConlluIndex

    options = options or StatsOptions()
    check_options(options)
    model, task = load_translation_model(checkpoint, data_bin, options.source_lang, options.target_lang)
    options = options_for_model(options, is_language_model(model))
    use_cuda = torch.cuda.is_available() and not options.cpu
    if use_cuda:
        model.cuda()
    layout = head_layout(model)
    gates = gate_probabilities(model, layout) or None
    dataset, progress = batch_iterator(task, model, subset, options)
    conllu_index = None
    if options.conllu:
        conllu_index = ConlluIndex(options.conllu)
        if len(conllu_index) != len(dataset):
            conllu_index.close()
            raise StatsError(f"--conllu {options.conllu} has {len(conllu_index)} sentences but "
                             f"subset {subset!r} has {len(dataset)}; they must match line by line")
    try:
        collector = _Collector(model, task, layout, options, conllu_index)
        for sample in progress:
            if not sample:
                continue
            if use_cuda:
                sample = utils.move_to_cuda(sample)
            collector.update(sample)
    finally:
        if conllu_index is not None:
            conllu_index.close()
    if collector.num_sentences != len(dataset):
        raise StatsError(f"only {collector.num_sentences} of {len(dataset)} sentences of "
                         f"{subset!r} were scored")
    collector.score_induction()
    results = collector.finalize()
    if options.grad_normalise == "layer":
        normalise_grad_per_layer(results, collector, layout)
    rows, extra = build_rows(layout, results, gates, tuple(options.offsets), options.thresholds)
    agreement = agreement_report(agreement_inputs(collector, results, gates, layout,
                                                  options.grad_normalise))
    meta = {
        "checkpoint": os.path.abspath(checkpoint),
        "data": os.path.abspath(data_bin),
        "subset": subset,
        "model_kind": "language_model" if collector.is_lm else "translation",
        "source_lang": getattr(task.cfg, "source_lang", None),
        "target_lang": getattr(task.cfg, "target_lang", None),
        "sentences": collector.num_sentences,
        "target_tokens": collector.num_target_tokens,
        "metrics": list(options.metrics),
        "layout": {t: list(shape) for t, shape in layout.items()},
        "pruned_types": empty_attention_types(model),  # {type: layers}, 0 heads in each
        "gated": gates is not None,
        "lrp_normalise": options.lrp_normalise,
        "grad_normalise": options.grad_normalise,
        "offsets": list(options.offsets),
        "thresholds": dataclasses.asdict(options.thresholds),
        "bootstrap": {"replicates": options.replicates, "seed": options.seed, "confidence": 0.95},
        "conllu": os.path.abspath(options.conllu) if options.conllu else None,
        "syntactic_sentences_with_unk_filled": collector.sentences_with_unk,
        "induction_probes": ({"lengths": list(collector.induction_lengths()),
                              "per_length": options.induction_probes, "seed": options.seed}
                             if "induction" in options.metrics else None),
        **extra,
    }
    columns = table_columns(options.metrics, tuple(options.offsets), gates is not None,
                            tuple(options.induction_lengths))
    return HeadStatistics(rows, columns, agreement, meta)
