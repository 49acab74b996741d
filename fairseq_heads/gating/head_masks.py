"""Head masks: which heads of which attention type and layer are kept (1) or removed (0).

On disk a mask is JSON: {"enc-self": [[1, 0, ...], ...], "dec-self": ..., "enc-dec": ...},
one list of 0/1 per layer (0-based, in order), one entry per head. Types left out are kept whole.
"""
import json
import os
from typing import Dict, List

import torch
from torch import nn

from ..files import write_text_atomic
from .gated_attention import GatedMultiheadAttention
from ..heads import ATTENTION_TYPES, heads_per_layer, iter_attention

HeadMask = Dict[str, torch.Tensor]  # attention type -> (layers, heads) bool tensor


class HeadMaskError(ValueError):
    pass


def parse_head_mask(obj, source: str) -> HeadMask:
    """A head mask from its JSON object; HeadMaskError naming `source` if malformed."""
    if not isinstance(obj, dict):
        raise HeadMaskError(f"{source}: a head mask is a JSON object keyed by attention type")
    mask = {}
    for key, rows in obj.items():
        if key not in ATTENTION_TYPES:
            raise HeadMaskError(f"{source}: unknown attention type {key!r}; "
                                f"expected one of {', '.join(ATTENTION_TYPES)}")
        if (not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows)
                or len({len(r) for r in rows}) != 1
                or not all(v in (0, 1) and not isinstance(v, float) for r in rows for v in r)):
            raise HeadMaskError(f"{source}: {key!r} must be a non-empty list of equally long "
                                f"lists of 0/1 (one list per layer, one entry per head)")
        mask[key] = torch.tensor(rows, dtype=torch.bool)
    return mask


def load_head_mask(path: str) -> HeadMask:
    if not os.path.isfile(path):
        raise HeadMaskError(f"--head-mask: file not found: {path}")
    with open(path, encoding="utf-8") as f:
        try:
            obj = json.load(f)
        except json.JSONDecodeError as error:
            raise HeadMaskError(f"{path}: not valid JSON ({error})") from None
    return parse_head_mask(obj, path)


def head_mask_to_json(mask: HeadMask) -> Dict[str, List[List[int]]]:
    return {t: mask[t].int().tolist() for t in ATTENTION_TYPES if t in mask}


def save_head_mask(mask: HeadMask, path: str) -> None:
    write_text_atomic(path, json.dumps(head_mask_to_json(mask), indent=1) + "\n")


def check_head_mask(mask: HeadMask, model: nn.Module, source: str) -> None:
    shape = heads_per_layer(model)
    for attention_type, tensor in mask.items():
        if attention_type not in shape:
            raise HeadMaskError(f"{source}: the model has no {attention_type} attention")
        expected = shape[attention_type]
        if len(set(expected)) != 1 or list(tensor.shape) != [len(expected), expected[0]]:
            raise HeadMaskError(f"{source}: {attention_type} mask has shape (layers, heads) = "
                                f"{tuple(tensor.shape)}, the model has {len(expected)} layers "
                                f"with {expected} heads")


def apply_head_mask(model: nn.Module, mask: HeadMask, source: str = "head mask") -> nn.Module:
    """Fix the heads of `model` to `mask` (in every mode). Gated blocks keep their gates'
    parameters; plain blocks get a fixed gate."""
    check_head_mask(mask, model, source)
    for attention_type, layer, attention in iter_attention(model):
        if attention_type not in mask:
            continue
        if not isinstance(attention, GatedMultiheadAttention):
            GatedMultiheadAttention.from_attention(attention)
        attention.gate.fix(mask[attention_type][layer].float())
    return model


def head_mask_from_gates(model: nn.Module) -> HeadMask:
    """The gated heads kept by the rule 'deterministic gate > 0' (types without gates: all kept)."""
    rows: Dict[str, Dict[int, torch.Tensor]] = {}
    for attention_type, layer, attention in iter_attention(model):
        keep = (attention.gate.is_open() if isinstance(attention, GatedMultiheadAttention)
                else torch.ones(attention.num_heads, dtype=torch.bool))
        rows.setdefault(attention_type, {})[layer] = keep.detach().cpu().bool()
    return {t: torch.stack([layers[i] for i in sorted(layers)]) for t, layers in rows.items()}
