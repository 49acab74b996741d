"""`fairseq-heads stats`, the computation: a translation model or decoder-only language model,
one teacher-forced pass over a data subset, the heads table, agreement and run metadata.

load (checkpoints.py + the checks here) -> options for this model kind (options.py) -> fairseq's
batch iterator -> Collector (collect.py: every registered metric) -> HeadTable (table.py) and
agreement.json (agreement.py). Streaming: memory does not grow with the subset.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

from ..checkpoints import (
    check_checkpoint_file,
    data_overrides,
    is_language_model,
    load_model_and_task,
    load_state,
    place_model,
    apply_lm_blocks,
)
from ..heads import ATTENTION_TYPES, iter_attention
from ..precision import autocast
from .agreement import agreement_report
from .collect import Collector
from .options import StatsOptions, check_options, options_for_model
from .registry import LANGUAGE_MODEL, TRANSLATION, RunContext, StatsError
from .output import check_out_dir
from .syntax.conllu_index import ConlluIndex, check_conllu
from .table import GATE_COLUMN, HeadTable, build_table, metric_meta

logger = logging.getLogger("fairseq_heads.stats")


@dataclass
class HeadStatistics:
    """The result: the heads table (rows, columns, meta) and the agreement report."""

    table: HeadTable
    agreement: Dict[str, object]

    @property
    def rows(self) -> List[Dict[str, object]]:
        return self.table.rows

    @property
    def columns(self) -> List[str]:
        return self.table.columns

    @property
    def meta(self) -> Dict[str, object]:
        return self.table.meta


# ---------------------------------------------------------------- the model


LM_SENTENCE_BREAK_MODE = "eos"  # one block = one line of the subset (fairseq's TokenBlockDataset)


def check_inputs(out_dir: str, checkpoint: str, conllu: Optional[str] = None) -> None:
    """The one check of each input file, before any model is loaded or run (a ValueError of one
    line naming the file): the output folder (`output.check_out_dir`), the checkpoint (a readable
    fairseq checkpoint) and the CoNLL-U parses (every sentence). compute_head_statistics does not
    check them again; write_statistics looks at the folder once more just before replacing it,
    as files may have appeared there during the run."""
    check_out_dir(out_dir)
    check_checkpoint_file(checkpoint)
    if conllu:
        check_conllu(conllu)


def load_model(checkpoint: str, data_bin: str, source_lang: Optional[str] = None,
               target_lang: Optional[str] = None, sentence_blocks: bool = False,
               break_mode: Optional[str] = None, block_start: Optional[str] = None):
    """(model in eval mode, task): a translation checkpoint (encoder-decoder) or a decoder-only
    language model (`--task language_modeling`), reading its data from `data_bin`.

    An LM's blocks are read as the model was trained (`checkpoints.apply_lm_blocks`: the break
    mode and block start it records, e.g. an import's one document a block from <s>), or as
    `break_mode` / `block_start` say. sentence_blocks: `--sample-break-mode eos`, one line a
    block, whatever else is asked (gold parses are per sentence; translation unaffected)."""
    from fairseq.models import FairseqEncoderDecoderModel
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.language_modeling import LanguageModelingTask
    from fairseq.tasks.translation import TranslationTask

    if not os.path.isdir(data_bin):
        raise StatsError(f"data directory not found: {data_bin}")
    state = load_state(checkpoint, data_overrides(data_bin, source_lang, target_lang))
    cfg = state.get("cfg")
    task_name = cfg["task"]["_name"] if cfg is not None and cfg.get("task") is not None else None
    task_class = TASK_REGISTRY.get(task_name)
    # Check before building anything: another task would misread the data-bin.
    if task_class is None or not issubclass(task_class, (TranslationTask, LanguageModelingTask)):
        raise StatsError(f"{checkpoint}: neither a translation model nor a language model (its "
                         f"task is {task_name!r}); stats needs a translation or language_modeling "
                         f"checkpoint")
    try:
        apply_lm_blocks(state, LM_SENTENCE_BREAK_MODE if sentence_blocks else break_mode, block_start)
    except ValueError as error:
        raise StatsError(str(error)) from None
    try:
        model, task = load_model_and_task(checkpoint, state=state)
    except Exception as error:  # fairseq fails in many ways on mismatched data; name the inputs
        raise StatsError(f"cannot load {checkpoint} with data {data_bin}: "
                         f"{type(error).__name__}: {error}") from error
    if not isinstance(model, FairseqEncoderDecoderModel) and not is_language_model(model):
        raise StatsError(f"{checkpoint}: not an encoder-decoder Transformer or a Transformer LM "
                         f"({type(model).__name__})")
    if not any(True for _ in iter_attention(model)):
        raise StatsError(f"{checkpoint}: no fairseq attention blocks in {type(model).__name__}")
    model.eval()
    return model, task


def block_start_of(model) -> str:
    """What an LM reads at a block's first position: <s> (bos, gated_llama --block-start bos) or
    fairseq's </s> (eos)."""
    return getattr(getattr(model, "decoder", None), "block_start", "eos")


def head_shape(model) -> Dict[str, Tuple[int, int]]:
    """{attention type: (layers, heads per layer)} of the types that have heads; the layers of
    a type must have equal numbers of heads."""
    heads: Dict[str, Dict[int, int]] = {}
    for attention_type, layer, attention in iter_attention(model):
        heads.setdefault(attention_type, {})[layer] = attention.num_heads
    shape = {}
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
            shape[attention_type] = (len(per_layer), next(iter(per_layer.values())))
    return shape


def empty_attention_types(model) -> Dict[str, int]:
    """{attention type: layers} of the types whose every head was pruned (not in head_shape)."""
    layers: Dict[str, List[int]] = {}
    for attention_type, _, attention in iter_attention(model):
        layers.setdefault(attention_type, []).append(attention.num_heads)
    return {t: len(heads) for t, heads in layers.items() if not any(heads)}


def gate_probabilities(model, shape: Mapping[str, Tuple[int, int]]) -> Dict[str, Tensor]:
    """{attention type: (L, H) P(gate open)} for the gated types (NaN for ungated layers)."""
    from ..gating.gated_attention import iter_gates

    out: Dict[str, Tensor] = {}
    for attention_type, layer, gate in iter_gates(model):
        table = out.setdefault(attention_type, torch.full(shape[attention_type], float("nan"),
                                                          dtype=torch.float64))
        table[layer] = gate.prob_open().detach().to(torch.float64).cpu()
    return out


def task_option(task, name: str):
    """One option of the task: fairseq's legacy tasks (language_modeling) keep theirs in
    `task.args`, the dataclass ones (translation) in `task.cfg`."""
    options = getattr(task, "args", None) or task.cfg
    return getattr(options, name, None)


def load_subset(task, subset: str):
    """The subset's fairseq dataset (StatsError if the data-bin has no such subset)."""
    try:
        task.load_dataset(subset, combine=False, epoch=1)
    except FileNotFoundError as error:
        raise StatsError(f"subset {subset!r} not found in {task_option(task, 'data')}: {error}") from None
    return task.dataset(subset)


def max_positions(task, model):
    """The longest block (tokens) that the task and the model both take."""
    from fairseq import utils

    return utils.resolve_max_positions(task.max_positions(), model.max_positions())


def check_lm_sentence_blocks(sizes, num_parses: int, subset: str, conllu: str,
                             limit: Optional[int]) -> None:
    """An LM with gold parses: its blocks (the subset's lines, --sample-break-mode eos; a size
    counts the line's EOS) must be the CoNLL-U sentences, one each, and fit the model. Checked
    before the pass, so that a paragraph- or document-level subset fails in one line."""
    if len(sizes) != num_parses or any(int(n) <= 1 for n in sizes):
        empty = sum(1 for n in sizes if int(n) <= 1)
        raise StatsError(
            f"--conllu {conllu} has {num_parses} sentences but subset {subset!r} has {len(sizes)} "
            f"lines ({empty} empty); a language model is read one line a block "
            f"(--sample-break-mode {LM_SENTENCE_BREAK_MODE}), so --gen-subset must hold the "
            f"CoNLL-U sentences one a line (python -m fairseq_heads.data.lm_conllu_subset)")
    too_long = [i for i, n in enumerate(sizes) if limit is not None and int(n) > limit]
    if too_long:
        i = too_long[0]
        raise StatsError(f"subset {subset!r}: line {i} (0-based) has {int(sizes[i])} tokens with its "
                         f"EOS, more than the model's {limit} positions (--tokens-per-sample); "
                         f"{len(too_long)} lines are too long for one block")


def check_parses_match(dataset, parses, subset: str, conllu: str, language_model: bool,
                       limit: Optional[int]) -> None:
    """One gold parse per sentence of the subset: translation sentences, or an LM's blocks
    (`limit`: the longest block the LM takes)."""
    if language_model:
        check_lm_sentence_blocks(dataset.sizes, len(parses), subset, conllu, limit)
    elif len(parses) != len(dataset):
        raise StatsError(f"--conllu {conllu} has {len(parses)} sentences but subset {subset!r} "
                         f"has {len(dataset)}; they must match line by line")


def batch_iterator(task, model, dataset, subset: str, options: StatsOptions):
    """A fairseq progress bar over the subset's batches (fixed order, no shuffling)."""
    from fairseq.logging import progress_bar

    iterator = task.get_batch_iterator(
        dataset=dataset, max_tokens=options.max_tokens, max_sentences=options.batch_size,
        max_positions=max_positions(task, model),
        ignore_invalid_inputs=False, required_batch_size_multiple=1, seed=options.seed,
        num_workers=0).next_epoch_itr(shuffle=False)
    bar = progress_bar.progress_bar(iterator, log_format=options.log_format,
                                    log_interval=options.log_interval,
                                    prefix=f"stats on '{subset}' subset",
                                    default_log_format="tqdm")
    return bar


# ---------------------------------------------------------------- the run


def agreement_inputs(outcomes, gates, shape):
    """{type: {metric: (estimate (L, H), replicates (R, L, H) or None)}} for agreement_report:
    the metrics that give replicates, plus gate P(open) for gated types."""
    inputs: Dict[str, Dict[str, Tuple[Tensor, Optional[Tensor]]]] = {}
    for attention_type in shape:
        metrics = {name: (outcome.result.estimate, outcome.replicates)
                   for (name, t), outcome in outcomes.items()
                   if t == attention_type and outcome.replicates is not None}
        if gates is not None and attention_type in gates:
            metrics[GATE_COLUMN] = (gates[attention_type], None)
        if len(metrics) >= 2:
            inputs[attention_type] = metrics
    return inputs


def _collect(collector: Collector, progress, use_cuda: bool) -> None:
    from fairseq import utils

    for sample in progress:
        if not sample:
            continue
        if use_cuda:
            sample = utils.move_to_cuda(sample)
        collector.update(sample)


def compute_head_statistics(data_bin: str, checkpoint: str, subset: str,
                            options: Optional[StatsOptions] = None) -> HeadStatistics:
    """Teacher-forced pass over ``subset`` of ``data_bin``; per-head table, agreement, metadata."""
    options = options or StatsOptions()
    check_options(options)
    model, task = load_model(checkpoint, data_bin, options.source_lang, options.target_lang,
                             sentence_blocks=bool(options.conllu),
                             break_mode=options.sample_break_mode, block_start=options.block_start)
    language_model = is_language_model(model)
    options = options_for_model(options, language_model)
    use_cuda = place_model(model, options.cpu)
    shape = head_shape(model)
    gates = gate_probabilities(model, shape) or None
    dataset = load_subset(task, subset)
    run = RunContext(options, language_model, model, task, shape, subset=subset)
    if options.conllu:
        run.conllu_index = ConlluIndex(options.conllu)
    try:
        if options.conllu:
            check_parses_match(dataset, run.conllu_index, subset, options.conllu, language_model,
                               max_positions(task, model))
        progress = batch_iterator(task, model, dataset, subset, options)
        collector = Collector(run)
        with autocast(options.autocast, "cuda" if use_cuda else "cpu"):
            _collect(collector, progress, use_cuda)
    finally:
        if run.conllu_index is not None:
            run.conllu_index.close()
    if collector.num_sentences != len(dataset):
        raise StatsError(f"only {collector.num_sentences} of {len(dataset)} sentences of "
                         f"{subset!r} were scored")
    with autocast(options.autocast, "cuda" if use_cuda else "cpu"):
        collector.probe()
    outcomes = collector.finalize()
    meta = {
        "checkpoint": os.path.abspath(checkpoint),
        "data": os.path.abspath(data_bin),
        "subset": subset,
        "model_kind": LANGUAGE_MODEL if language_model else TRANSLATION,
        "source_lang": getattr(task.cfg, "source_lang", None),
        "target_lang": getattr(task.cfg, "target_lang", None),
        "sentences": collector.num_sentences,
        "target_tokens": collector.num_target_tokens,
        "metrics": list(options.metrics),
        "layout": {t: list(s) for t, s in shape.items()},
        "pruned_types": empty_attention_types(model),  # {type: layers}, 0 heads in each
        "gated": gates is not None,
        "autocast": options.autocast,
        "lrp_normalise": options.lrp_normalise,
        "grad_normalise": options.grad_normalise,
        "offsets": list(options.offsets),
        "thresholds": dataclasses.asdict(options.thresholds),
        "bootstrap": {"replicates": options.replicates, "seed": options.seed, "confidence": 0.95},
        "conllu": os.path.abspath(options.conllu) if options.conllu else None,
        # an LM's blocks: as the model records (apply_lm_blocks) or asked; eos with --conllu
        **({"sample_break_mode": str(task_option(task, "sample_break_mode")),
            "block_start": block_start_of(model)} if language_model else {}),
        **metric_meta(run, outcomes),
    }
    table = build_table(run, outcomes, gates, meta)
    return HeadStatistics(table, agreement_report(agreement_inputs(outcomes, gates, shape)))
