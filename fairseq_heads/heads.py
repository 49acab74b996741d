"""Addressing attention heads: the three attention types, which block is which, and the model's
head shape. Every module that names a head goes through these (no fairseq_heads imports here).

A head is addressed as (attention type, layer, head), all 0-based; a block as (type, layer).
"""
import re
from typing import Dict, Iterator, List, Optional, Tuple

from fairseq.modules import MultiheadAttention
from torch import nn

ATTENTION_TYPES = ("enc-self", "dec-self", "enc-dec")

BlockKey = Tuple[str, int]  # (attention type, layer)
HeadKey = Tuple[str, int, int]  # (attention type, layer, head)

# Module names fairseq's Transformer encoders/decoders give their attention blocks.
_ATTENTION_NAME = re.compile(r"(?:^|\.)(encoder|decoder)\.layers\.(\d+)\.(self_attn|encoder_attn)$")


def attention_type_of(module_name: str) -> Optional[BlockKey]:
    """('enc-self' | 'dec-self' | 'enc-dec', layer) for a fairseq attention module name, else None."""
    match = _ATTENTION_NAME.search(module_name)
    if match is None:
        return None
    side, layer, kind = match.groups()
    if side == "encoder":
        return ("enc-self", int(layer)) if kind == "self_attn" else None
    return ("dec-self" if kind == "self_attn" else "enc-dec"), int(layer)


def iter_attention(model: nn.Module) -> Iterator[Tuple[str, int, MultiheadAttention]]:
    """Every attention block of a fairseq Transformer (encoder-decoder or decoder-only) as
    (attention type, layer, module), in encoder, decoder order."""
    for name, module in model.named_modules():
        address = attention_type_of(name)
        if address is not None and isinstance(module, MultiheadAttention):
            yield address[0], address[1], module


def heads_per_layer(model: nn.Module) -> Dict[str, List[int]]:
    """{attention type: [heads in layer 0, heads in layer 1, ...]} (a pruned model's may differ)."""
    shape: Dict[str, Dict[int, int]] = {}
    for attention_type, layer, attention in iter_attention(model):
        shape.setdefault(attention_type, {})[layer] = attention.num_heads
    return {t: [layers[i] for i in sorted(layers)] for t, layers in shape.items()}
