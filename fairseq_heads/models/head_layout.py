"""A pruned model's shapes: attention blocks that keep only some of their heads.

A pruned block keeps `kept_heads`, the indices (in the original, unpruned model) of the heads it
still has. The whole model's layout, {type: [kept_heads per layer]}, is saved in pruned
checkpoints as the model option `head_layout` (a JSON string); `apply_head_layout`, called by the
models' build_model, rebuilds those smaller shapes before fairseq loads a pruned state dict, so
fairseq's CLIs (`-generate`, `-eval-lm`, `-interactive`) read pruned checkpoints.

Slicing reuses fairseq's `MultiheadAttention._adaptive_prune_heads`. A block left with no heads
becomes a `HeadlessAttention`: its output is what the masked block gives, out_proj's bias.
Choosing which heads to remove, and pruning a whole model, is `fairseq_heads.pruning`.
"""
import json
import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from ..gating.gated_attention import GatedMultiheadAttention
from ..gating.hard_concrete import HardConcreteGate, mark_gate_parameter
from ..heads import ATTENTION_TYPES, iter_attention

HeadLayout = Dict[str, List[List[int]]]  # type -> per layer, original indices of kept heads


class HeadPruningError(ValueError):
    pass


class HeadlessAttention(MultiheadAttention):
    """An attention block all of whose heads were pruned.

    With every head masked, the block's output is out_proj(0) = out_proj's bias at every
    position, whatever the input; this class returns exactly that without computing anything.
    It caches nothing, so incremental decoding and beam reordering have nothing to do. The
    zero-sized q/k/v/out weights stay as parameters so the state dict keeps its usual keys.
    """

    # annotated as fairseq's forward, so that torch.jit.script compiles it
    def forward(self, query: Tensor, key: Optional[Tensor] = None, value: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                need_weights: bool = True, static_kv: bool = False,
                attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        tgt_len, bsz, _ = query.size()
        out = query.new_zeros(tgt_len, bsz, self.out_proj.out_features)
        bias = self.out_proj.bias
        if bias is not None:
            out = out + bias
        return out, None  # no heads, no attention weights

    @torch.jit.export
    def reorder_incremental_state(self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]],
                                  new_order: Tensor):
        return incremental_state


def head_slices(attention: MultiheadAttention, heads: Sequence[int]):
    return [(h * attention.head_dim, (h + 1) * attention.head_dim) for h in heads]


def _remove_all_heads(attention: MultiheadAttention) -> None:
    # _adaptive_prune_heads cannot build empty projections (it concatenates the kept slices).
    for proj in (attention.q_proj, attention.k_proj, attention.v_proj):
        proj.weight = nn.Parameter(proj.weight.detach()[:0].clone())
        if proj.bias is not None:
            proj.bias = nn.Parameter(proj.bias.detach()[:0].clone())
        proj.out_features = 0
    attention.out_proj.weight = nn.Parameter(attention.out_proj.weight.detach()[:, :0].clone())
    attention.out_proj.in_features = 0
    if isinstance(attention, GatedMultiheadAttention):
        del attention.gate
    attention.num_heads = 0
    attention.embed_dim = 0
    attention.__class__ = HeadlessAttention


def _keep_fully_open(gate: HardConcreteGate) -> None:
    """A fixed mask overrode this gate and kept its heads: raise their log-alphas to where the
    deterministic gate is exactly 1, so that the saved model (fixed masks are not saved)
    computes what the masked one did."""
    fully_open = math.log((1.0 - gate.low) / (gate.high - 1.0)) + 0.5  # margin for rounding
    gate.log_alpha = mark_gate_parameter(nn.Parameter(gate.log_alpha.detach().clamp(min=fully_open)))
    gate.unfix()


def prune_attention_heads(attention: MultiheadAttention, keep: Sequence[int]) -> None:
    """Keep only heads `keep` (current indices, any order; kept in increasing order)."""
    if isinstance(attention, HeadlessAttention):
        if keep:
            raise HeadPruningError("cannot keep heads of a block that has none")
        return
    keep = sorted(set(int(h) for h in keep))
    if any(h < 0 or h >= attention.num_heads for h in keep):
        raise HeadPruningError(f"head index out of range 0..{attention.num_heads - 1}: {keep}")
    kept_heads = getattr(attention, "kept_heads", list(range(attention.num_heads)))
    gate_overridden = isinstance(attention, GatedMultiheadAttention) and attention.gate.fixed_mask is not None
    if not keep:
        _remove_all_heads(attention)
    elif len(keep) < attention.num_heads:
        # a gated block's override also shrinks its gate (and bias_k / bias_v)
        attention._adaptive_prune_heads(head_slices(attention, keep))
        attention.out_proj.in_features = attention.embed_dim  # fairseq leaves it stale
    if keep and gate_overridden:
        _keep_fully_open(attention.gate)
    if len(keep) == len(kept_heads):
        attention.kept_heads = list(kept_heads)
        return
    # Smaller projections than the layer's width break fairseq's dimension check and the
    # fused kernel's; fairseq's own pruning sets this flag for the same reason.
    attention._set_skip_embed_dim_check()
    attention.kept_heads = [kept_heads[h] for h in keep]


def head_layout(model: nn.Module) -> HeadLayout:
    """{type: [original indices of the kept heads, per layer]} (unpruned blocks: all heads)."""
    layout: Dict[str, Dict[int, List[int]]] = {}
    for attention_type, layer, attention in iter_attention(model):
        kept = getattr(attention, "kept_heads", list(range(attention.num_heads)))
        layout.setdefault(attention_type, {})[layer] = list(kept)
    return {t: [layers[i] for i in sorted(layers)] for t, layers in layout.items()}


def head_layout_json(model: nn.Module) -> str:
    """The layout as the value of the model option `head_layout` (see pruning.checkpoint)."""
    return json.dumps(head_layout(model), separators=(",", ":"))


def parse_head_layout(text: str) -> HeadLayout:
    try:
        layout = json.loads(text)
    except json.JSONDecodeError as error:
        raise HeadPruningError(f"--head-layout: not valid JSON ({error})") from None
    if not isinstance(layout, dict) or any(t not in ATTENTION_TYPES for t in layout) or not all(
            isinstance(rows, list) and all(isinstance(r, list) and all(isinstance(h, int) for h in r)
                                           for r in rows) for rows in layout.values()):
        raise HeadPruningError("--head-layout: expected {attention type: [[kept head, ...] per layer]}")
    return layout


def apply_head_layout(model: nn.Module, args) -> nn.Module:
    """Give a freshly built model the pruned shapes named by args.head_layout (if any).

    Called by `gated_transformer.gate_built_model` (both models' build_model) so that
    fairseq's CLIs can load pruned state dicts: the weights that survive slicing here are
    overwritten by the checkpoint's.
    """
    text = getattr(args, "head_layout", None)
    if text:
        layout = parse_head_layout(text)
        for attention_type, layer, attention in iter_attention(model):
            if attention_type not in layout:
                continue
            if layer >= len(layout[attention_type]):
                raise HeadPruningError(f"--head-layout: no row for {attention_type} layer {layer}")
            kept = layout[attention_type][layer]
            if len(kept) > attention.num_heads:
                raise HeadPruningError(f"--head-layout: {attention_type} layer {layer} keeps "
                                       f"{len(kept)} heads of {attention.num_heads}")
            # the original indices (a fresh block has them all): a GQA block keeps the KV
            # heads of these query heads' groups (models/llama_attention.py)
            prune_attention_heads(attention, kept)
            attention.kept_heads = list(kept)
    return model
