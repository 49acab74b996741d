"""Prune a fairseq checkpoint file into a smaller `gated_transformer` (or, for a decoder-only
language model, `gated_transformer_lm`) checkpoint.

The model is rebuilt from the checkpoint alone: a Transformer only needs its dictionaries'
sizes (and pad index, fairseq's default) to be built, and those are read off the embedding
matrices, so no data directory is needed. The saved checkpoint keeps the original options with
the arch switched to `gated_transformer` and the layout in `head_layout`; fairseq's CLIs with
`--user-dir fairseq_heads` rebuild its shapes (see `models/head_layout.apply_head_layout`).
Which heads go is the mask policy's choice (mask_policy.py).
"""
import copy
import os
from argparse import Namespace
from typing import Dict, List, NamedTuple

import torch
from fairseq import models
from fairseq.models import FairseqLanguageModel
from fairseq.modules import MultiheadAttention
from fairseq.data import Dictionary
from omegaconf import OmegaConf
from torch import nn

from ..files import atomic_path
from ..checkpoints import load_checkpoint, model_options
from ..gating.gated_attention import GatedMultiheadAttention
from ..heads import ATTENTION_TYPES, heads_per_layer, iter_attention
from ..models.gate_options import gate_defaults
from ..models.gated_transformer import GatedTransformerModel
from ..models.gated_transformer_lm import GatedTransformerLanguageModel, lm_gate_defaults
from ..models.gated_llama import GatedLlamaLanguageModel
from .gqa import AttentionCost, attention_cost, format_costs, model_context
from .physical import (
    HeadLayout,
    HeadPruningError,
    count_parameters,
    fix_gates,
    head_layout,
    head_layout_json,
    physically_prune,
)


def _placeholder_dictionary(size: int) -> Dictionary:
    dictionary = Dictionary()  # bos, pad=1, eos, unk: fairseq's defaults
    for i in range(size - len(dictionary)):
        dictionary.add_symbol(f"<placeholder{i}>")
    return dictionary


class _DictionariesOnly(Namespace):
    """What `TransformerModel.build_model` reads from a task."""


def is_language_model_state(state: dict) -> bool:
    """A decoder-only Transformer LM checkpoint (no encoder weights, a decoder embedding)."""
    weights = state["model"]
    return "decoder.embed_tokens.weight" in weights and not any(k.startswith("encoder.") for k in weights)


def _placeholder_task(weights: dict) -> _DictionariesOnly:
    """Dictionaries of the sizes a model's embeddings have: all that building it needs."""
    if is_language_model_state({"model": weights}):
        dictionary = _placeholder_dictionary(weights["decoder.embed_tokens.weight"].size(0))
        return _DictionariesOnly(source_dictionary=dictionary, target_dictionary=dictionary)
    if "encoder.embed_tokens.weight" not in weights or "decoder.embed_tokens.weight" not in weights:
        raise HeadPruningError("checkpoint is neither an encoder-decoder Transformer nor a Transformer LM")
    return _DictionariesOnly(
        source_dictionary=_placeholder_dictionary(weights["encoder.embed_tokens.weight"].size(0)),
        target_dictionary=_placeholder_dictionary(weights["decoder.embed_tokens.weight"].size(0)))


def _build_with_weights(args: Namespace, weights: dict) -> nn.Module:
    """fairseq's models.build_model for the arch `args` names, then the weights (strict)."""
    model = models.build_model(copy.deepcopy(args), _placeholder_task(weights))
    _gate_blocks_with_saved_gates(model, weights)
    model.load_state_dict(weights, strict=True, model_cfg=args)
    return model.eval()


def _gate_blocks_with_saved_gates(model: nn.Module, weights: dict) -> None:
    """A model trained with a --head-mask over attention types it does not gate (the converged
    protocol's fixed-mask phase of an encoder-only model) saved gates for those blocks too: the
    *_heads task gated them when it applied the mask (gating/head_masks.apply_head_mask). Gate
    them here as the task did, so that the weights load."""
    for name, module in model.named_modules():
        if type(module) is MultiheadAttention and f"{name}.gate.log_alpha" in weights:
            GatedMultiheadAttention.from_attention(module)


def build_model_from_state(state: dict, args: Namespace) -> nn.Module:
    return _build_with_weights(args, state["model"])


GATED_MODELS = (GatedTransformerModel, GatedTransformerLanguageModel, GatedLlamaLanguageModel)


def as_gated_transformer(model: nn.Module, args: Namespace) -> nn.Module:
    """A plain `transformer` becomes a `gated_transformer`, a plain `transformer_lm` a
    `gated_transformer_lm` (model, and options in place): built by the gated model's own
    build_model with the gate options' defaults (enc-self gates; dec-self for an LM), given the
    plain model's weights. New gates start open (deterministic gate 1: the function is
    unchanged; GatedMultiheadAttention.upgrade_state_dict_named). Gated models are returned as
    they are."""
    if isinstance(model, GATED_MODELS):
        return model
    if isinstance(model, FairseqLanguageModel):
        args.arch = args._name = "gated_transformer_lm"
        lm_gate_defaults(args)
    else:
        args.arch = args._name = "gated_transformer"
        gate_defaults(args)
    return _build_with_weights(args, model.state_dict())


def checkpoint_state_to_save(state: dict, model: nn.Module, args: Namespace) -> dict:
    """The checkpoint of the pruned model: its weights, the original options with the layout."""
    new_state = {k: v for k, v in state.items() if k != "last_optimizer_state"}  # wrong shapes now
    cfg = state["cfg"]
    cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True) if OmegaConf.is_config(cfg) else dict(cfg)
    args = copy.deepcopy(args)
    args.head_layout = head_layout_json(model)
    # every gated block is saved with its gate, those _gate_blocks_with_saved_gates added too:
    # the options must build them all
    gated = [t for t in ATTENTION_TYPES if any(isinstance(a, GatedMultiheadAttention)
                                               for t2, _, a in iter_attention(model) if t2 == t)]
    if gated and hasattr(args, "gated_attention"):
        args.gated_attention = ",".join(gated)
    cfg["model"] = args
    # The layout now fixes the head count: a --target-heads criterion saved with the run would
    # re-impose a target the pruned model may not have the heads for (fairseq-validate builds it).
    criterion = cfg.get("criterion")
    if isinstance(criterion, dict) and criterion.get("target_heads"):
        criterion["target_heads"] = None
    elif criterion is not None and getattr(criterion, "target_heads", None):
        criterion.target_heads = None
    # So does a --head-mask of the training run: it was for the unpruned shapes, whose masked
    # heads are gone now or kept whole (the *_heads tasks would apply it to every load).
    task = cfg.get("task")
    if isinstance(task, dict) and task.get("head_mask"):
        task["head_mask"] = None
    elif task is not None and getattr(task, "head_mask", None):
        task.head_mask = None
    new_state["cfg"] = cfg
    new_state["args"] = None
    new_state["model"] = model.state_dict()
    return new_state


def save_atomic(obj, path: str) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


class PruneResult(NamedTuple):
    heads_before: Dict[str, List[int]]
    layout: HeadLayout
    parameters_before: int
    parameters_after: int
    attention_before: AttentionCost
    attention_after: AttentionCost  # predicted from the shapes and the mask (gqa.attention_cost)
    context: int  # keys per query at which the attention FLOPs are counted: the model's maximum


def prune_checkpoint(path: str, out: str, policy) -> PruneResult:
    """Load `path`, prune the heads the mask `policy` chooses (mask_policy.py) marks 0, save to
    `out` atomically (nothing is written if anything fails)."""
    if not os.path.isfile(path):
        raise HeadPruningError(f"checkpoint not found: {path}")
    state = load_checkpoint(path)
    args = model_options(state)
    model = build_model_from_state(state, args)
    heads_before = heads_per_layer(model)
    mask = policy.choose(model, path)  # before the gated conversion: it may depend on gates (or their absence)
    parameters_before = count_parameters(model)
    context = model_context(model)
    costs = (attention_cost(model, context=context), attention_cost(model, mask, context))
    model = as_gated_transformer(model, args)
    if policy.override_gates:
        fix_gates(model, mask)
    physically_prune(model, mask)
    new_state = checkpoint_state_to_save(state, model, args)
    save_atomic(new_state, out)
    return PruneResult(heads_before, head_layout(model), parameters_before, count_parameters(model),
                       *costs, context)


def format_prune_result(result: PruneResult) -> str:
    lines = ["heads kept (type, layer: kept/total [original indices])"]
    for attention_type, rows in result.layout.items():
        total_kept = sum(len(r) for r in rows)
        total = sum(result.heads_before[attention_type])
        lines.append(f"{attention_type}: {total_kept}/{total}")
        for layer, kept in enumerate(rows):
            lines.append(f"  layer {layer}: {len(kept)}/{result.heads_before[attention_type][layer]} {kept}")
    ratio = result.parameters_after / result.parameters_before
    lines.append(f"parameters: {result.parameters_before:,} -> {result.parameters_after:,} ({ratio:.1%})")
    lines.append(format_costs(result.attention_before, result.attention_after, result.context))
    return "\n".join(lines)
