"""The batch loop of a stats run: every registered metric's accumulators, fed batch by batch.

Per batch: one forward under `capture_heads` when a metric needs the attention weights or the
head outputs (the gradient of the reference NLL is taken on those), then one pass for each
metric that runs its own (LRP); after the last batch the metrics with their own probes
(induction). Which metric gets what is read off the registry (registry.py); nothing here names
a metric. All accumulators share one bootstrap seed and see the sentences in the same order,
so their replicates are the same resamples (a joint bootstrap, see streaming.py).

Queries and keys are real tokens: source positions that are not pad/EOS, and decoder positions
whose input token (`prev_output_tokens`) is not pad/EOS (the leading EOS is not a query). In a
decoder-only LM a query needs an earlier real token in its block (the first token's attention
is forced).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from .capture import CapturedHeads, capture_heads
from .metrics._batch import SharedReductions
from .registry import HEAD_OUTPUTS, OWN_PASS, PROBES, WEIGHTS, RunContext, metrics


@dataclass
class AttentionView:
    """What a WEIGHTS metric sees of one attention type in one batch (all on the CPU)."""

    run: RunContext
    attention_type: str
    weights: List[Tensor]  # per layer, (B, H, Tq, Tk) float
    query_mask: Tensor  # (B, Tq) bool
    key_mask: Tensor  # (B, Tk) bool
    tokens: Tensor  # (B, S) source tokens (an LM's input tokens)
    token_mask: Tensor  # (B, S) real source tokens (not pad / EOS)
    sentence_ids: List[int]  # dataset indices

    @property
    def language_model(self) -> bool:
        return self.run.language_model

    @cached_property
    def reductions(self) -> SharedReductions:
        """The masked max / argmax over keys that several metrics take of these weights, each
        computed once per batch, on first use (metrics/_batch.py)."""
        return SharedReductions(self.weights, self.key_mask)


@dataclass
class Batch:
    """What HEAD_OUTPUTS / OWN_PASS metrics see of one batch."""

    sample: dict
    target_mask: Tensor  # (B, T) reference positions that are not pad
    keys: List[Tuple[str, int]]  # every (attention type, layer) with heads
    captured: Optional[CapturedHeads] = None  # the data pass (HEAD_OUTPUTS)
    net_output: object = None  # the data pass's output (HEAD_OUTPUTS)

    @property
    def size(self) -> int:
        return self.sample["net_input"]["src_tokens"].shape[0]


class Outcome(NamedTuple):
    """A metric's finalized result for one attention type, and its agreement replicates."""

    result: object
    replicates: Optional[Tensor]  # (R, L, H), or None if the metric is not in agreement.json


class Collector:
    """The accumulators of one run; `update(sample)` per batch, `probe()`, then `finalize()`."""

    def __init__(self, run: RunContext):
        self.run = run
        self.specs = metrics(run.options.metrics)
        self.accumulators: Dict[Tuple[str, str], object] = {}
        for spec in self.specs:
            for attention_type in spec.types_for(run.language_model):
                if attention_type in run.shape:
                    self.accumulators[(spec.name, attention_type)] = spec.accumulator(
                        run.shape[attention_type], run)
        self.keys = [(t, layer) for t in run.shape for layer in range(run.shape[t][0])]
        self.num_sentences = 0
        self.num_target_tokens = 0
        source, target = run.task.source_dictionary, run.task.target_dictionary
        self.src_pad, self.src_eos = source.pad(), source.eos()
        self.tgt_pad, self.tgt_eos = target.pad(), target.eos()

    def _wanted(self, needs: str):
        return [s for s in self.specs if s.needs == needs
                and any(key[0] == s.name for key in self.accumulators)]

    def _masks(self, sample) -> Dict[str, Tuple[Tensor, Tensor]]:
        """{attention type: (query mask, key mask)}, each (B, T) bool (module doc)."""
        net_input = sample["net_input"]
        src = net_input["src_tokens"]
        src_mask = (src != self.src_pad) & (src != self.src_eos)
        if self.run.language_model:
            return {"dec-self": (src_mask & (src_mask.long().cumsum(-1) >= 2), src_mask)}
        prev = net_input["prev_output_tokens"]
        dec_mask = (prev != self.tgt_pad) & (prev != self.tgt_eos)
        return {"enc-self": (src_mask, src_mask), "dec-self": (dec_mask, dec_mask),
                "enc-dec": (dec_mask, src_mask)}

    def update(self, sample) -> None:
        """Feed one batch to every accumulator (module doc)."""
        net_input, target = sample["net_input"], sample["target"]
        target_mask = target != self.tgt_pad
        self.num_sentences += net_input["src_tokens"].shape[0]
        self.num_target_tokens += int(target_mask.sum())
        if not self.keys:  # every head pruned: nothing per head to measure
            return
        batch = Batch(sample, target_mask, self.keys)
        on_weights, on_outputs = self._wanted(WEIGHTS), self._wanted(HEAD_OUTPUTS)
        if on_weights or on_outputs:
            need_grad = bool(on_outputs)
            with torch.set_grad_enabled(need_grad), capture_heads(
                    self.run.model, weights=bool(on_weights), head_outputs=need_grad) as captured:
                if on_outputs:
                    batch.net_output = self.run.model(**net_input)
                else:  # only the captured weights are read
                    _forward_without_logits(self.run.model, net_input)
                batch.captured = captured
                if on_weights:
                    self._update_on_weights(on_weights, captured, sample)
                for spec in on_outputs:
                    self._update_per_sentence(spec.name, *spec.score(batch, self.run))
            batch.net_output = batch.captured = None  # free the graph before the next pass
        for spec in self._wanted(OWN_PASS):
            self._update_per_sentence(spec.name, *spec.score(batch, self.run))

    def _update_on_weights(self, specs, captured: CapturedHeads, sample) -> None:
        masks = self._masks(sample)
        src = sample["net_input"]["src_tokens"].cpu()
        token_mask = masks["dec-self" if self.run.language_model else "enc-self"][1].cpu()
        ids = sample["id"].tolist()
        for attention_type in self.run.shape:
            wanted = [(s, self.accumulators[(s.name, attention_type)]) for s in specs
                      if (s.name, attention_type) in self.accumulators]
            if not wanted:
                continue
            query_mask, key_mask = (m.cpu() for m in masks[attention_type])
            view = AttentionView(
                self.run, attention_type,
                [w.detach().float().cpu() for w in captured.type_weights(attention_type)],
                query_mask, key_mask, src, token_mask, ids)
            for spec, acc in wanted:
                spec.update(acc, view)

    def _update_per_sentence(self, name: str, per_block: Dict[Tuple[str, int], Tensor],
                             units: Tensor) -> None:
        """Stack (B, H) per layer into (B, L, H) per type and add to the ratio accumulators."""
        units = units.to(torch.float64).cpu()
        for attention_type, (num_layers, _) in self.run.shape.items():
            acc = self.accumulators.get((name, attention_type))
            if acc is None:
                continue
            stacked = torch.stack([per_block[(attention_type, layer)].cpu()
                                   for layer in range(num_layers)], dim=1)
            acc.update(stacked, units[:, None, None].expand_as(stacked))

    def probe(self) -> None:
        """Run the metrics that bring their own inputs (after the data pass)."""
        for spec in self._wanted(PROBES):
            for (name, _), acc in self.accumulators.items():
                if name == spec.name:
                    spec.probe(acc, self.run)

    def finalize(self) -> Dict[Tuple[str, str], Outcome]:
        """{(metric, attention type): Outcome}, in registry order."""
        outcomes = {}
        for spec in self.specs:
            for attention_type in self.run.shape:
                acc = self.accumulators.get((spec.name, attention_type))
                if acc is None:
                    continue
                replicates = spec.replicates(acc, self.run)
                outcomes[(spec.name, attention_type)] = Outcome(
                    spec.finalize(acc, self.run, replicates), replicates)
        return outcomes


def _forward_without_logits(model, net_input) -> None:
    """A forward pass for what it captures: a fairseq Transformer decoder's ``features_only``
    skips the projection to the vocabulary, a small model's largest matmul (the layers, and so
    the captured weights, are computed exactly as in the full forward)."""
    from fairseq.models.transformer import TransformerDecoderBase

    if isinstance(getattr(model, "decoder", None), TransformerDecoderBase):
        model(**net_input, features_only=True)
    else:
        model(**net_input)
