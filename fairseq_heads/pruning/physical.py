"""Physical head pruning of a whole model: remove, in place, every head a head mask marks 0.

Block-level slicing and the saved layout are `models/head_layout.py` (the models rebuild pruned
shapes from it); this module checks a mask against a model and applies it to every block.
"""
from typing import List, Mapping

import torch
from torch import Tensor, nn

from ..gating.gated_attention import GatedMultiheadAttention
from ..gating.head_target import remove_head_target
from ..heads import ATTENTION_TYPES, iter_attention
from ..models.head_layout import (  # noqa: F401  (public here too: what pruning is about)
    HeadLayout,
    HeadlessAttention,
    HeadPruningError,
    apply_head_layout,
    head_layout,
    head_layout_json,
    prune_attention_heads,
)


def _mask_rows(head_mask: Mapping, attention_type: str) -> List[Tensor]:
    rows = head_mask[attention_type]
    return [torch.as_tensor(row).bool().flatten() for row in rows]


def check_prune_mask(model: nn.Module, head_mask: Mapping) -> None:
    """The mask must name known types and match the model's layers and heads per layer."""
    unknown = [t for t in head_mask if t not in ATTENTION_TYPES]
    if unknown:
        raise HeadPruningError(f"unknown attention type(s) {unknown}")
    blocks = list(iter_attention(model))
    for attention_type in head_mask:
        rows = _mask_rows(head_mask, attention_type)
        layers = [a for t, _, a in blocks if t == attention_type]
        if len(rows) != len(layers):
            raise HeadPruningError(f"{attention_type}: mask has {len(rows)} layers, "
                                   f"the model {len(layers)}")
        for layer, (row, attention) in enumerate(zip(rows, layers)):
            if row.numel() != attention.num_heads:
                raise HeadPruningError(f"{attention_type} layer {layer}: mask has {row.numel()} "
                                       f"heads, the model {attention.num_heads}")


def physically_prune(model: nn.Module, head_mask: Mapping) -> nn.Module:
    """Remove, in place, every head that `head_mask` marks 0.

    head_mask: {attention type: rows}, one 0/1 row per layer (a (layers, heads) tensor or a list
    of rows, which may differ in length for an already pruned model). Types left out are kept.
    The pruned model computes what the model computed before (eval mode) with the removed
    heads' outputs zeroed: a kept head keeps its gate value (its log-alpha), unless a fixed mask
    (`apply_head_mask`, `fix_gates`) had overridden its gate, in which case it stays fully open.
    """
    check_prune_mask(model, head_mask)
    blocks = list(iter_attention(model))
    # A head target (top-K rule) ranks heads the pruned model no longer has; the layout now
    # fixes the head count, so gates go back to the plain rule (see head_target.py).
    remove_head_target(model)
    for attention_type, layer, attention in blocks:
        if attention_type in head_mask:
            row = _mask_rows(head_mask, attention_type)[layer]
            prune_attention_heads(attention, row.nonzero().flatten().tolist())
    return model


def fix_gates(model: nn.Module, head_mask: Mapping) -> nn.Module:
    """Override the gates of gated blocks of the masked types with the mask (as `apply_head_mask`
    does, for any layout): pruning then gives exactly the masked model, whatever the gates had
    learnt. Ungated blocks are left alone (no gate to override)."""
    check_prune_mask(model, head_mask)
    for attention_type, layer, attention in iter_attention(model):
        if attention_type in head_mask and isinstance(attention, GatedMultiheadAttention):
            attention.gate.fix(_mask_rows(head_mask, attention_type)[layer].float())
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
