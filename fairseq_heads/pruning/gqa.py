"""Grouped-query attention and the prune unit (`--prune-unit query|kv-group`).

Under `query` every query head is kept or removed on its own; a KV head goes once its whole
group is gone (models/llama_attention.py). Under `kv-group` a group's query heads are kept or
removed together: the unit that frees KV-cache memory. These pure functions turn per-head masks
and scores into per-group ones, and count what a layout costs.
"""
from typing import Dict, List, Mapping, NamedTuple

import torch
from torch import nn

from ..gating.hard_concrete import top_k_mask
from ..heads import iter_attention
from .physical import HeadPruningError

PRUNE_UNITS = ("query", "kv-group")
HeadGroups = Dict[str, List[List[int]]]  # type -> per layer, the KV group of each query head


def kv_groups(model: nn.Module) -> HeadGroups:
    """The KV group of every head (blocks without GQA: each head is its own group)."""
    groups: Dict[str, Dict[int, List[int]]] = {}
    for attention_type, layer, attention in iter_attention(model):
        # (a block left without heads keeps its last kv_head_of: it has no heads to group)
        row = list(getattr(attention, "kv_head_of", range(attention.num_heads)))[:attention.num_heads]
        groups.setdefault(attention_type, {})[layer] = row
    return {t: [rows[i] for i in sorted(rows)] for t, rows in groups.items()}


def _mask_rows(rows: List[torch.Tensor]):
    """A (layers, heads) tensor where the layers have equal head counts (what head masks take),
    else the list of rows (a pruned model's; physical pruning takes both)."""
    return torch.stack(rows) if len({r.numel() for r in rows}) == 1 else rows


def whole_group_mask(mask: Mapping, groups: HeadGroups) -> Dict[str, torch.Tensor]:
    """A group is kept whole when any of its heads is kept, else removed whole."""
    out = {}
    for attention_type, rows in mask.items():
        kept_rows = []
        for row, group_of in zip(rows, groups[attention_type]):
            row = torch.as_tensor(row).bool().flatten()
            kept_groups = {g for g, keep in zip(group_of, row.tolist()) if keep}
            kept_rows.append(torch.tensor([g in kept_groups for g in group_of]))
        out[attention_type] = _mask_rows(kept_rows)
    return out


def group_mean_scores(scores: Mapping[str, List[List[float]]], groups: HeadGroups) -> Dict[str, List[List[float]]]:
    """Every head scored by its group's mean score (a group's importance)."""
    out = {}
    for attention_type, rows in scores.items():
        out[attention_type] = []
        for row, group_of in zip(rows, groups[attention_type]):
            means = {g: sum(s for s, h in zip(row, group_of) if h == g) / group_of.count(g)
                     for g in set(group_of)}
            out[attention_type].append([means[g] for g in group_of])
    return out


def keep_top_k_groups(scores: Mapping[str, List[List[float]]], groups: HeadGroups,
                      k: int) -> Dict[str, List[torch.Tensor]]:
    """Head mask keeping the k KV groups of highest mean score over the scored types (ties: the
    earlier type, layer, group), each group whole."""
    keys, values = [], []
    for attention_type, rows in scores.items():
        for layer, (row, group_of) in enumerate(zip(rows, groups[attention_type])):
            for g in sorted(set(group_of)):
                keys.append((attention_type, layer, g))
                values.append(sum(s for s, h in zip(row, group_of) if h == g) / group_of.count(g))
    if not 0 <= k <= len(keys):
        raise HeadPruningError(f"--keep {k}: the scores cover {len(keys)} KV groups (--prune-unit kv-group)")
    kept = {key for key, keep in zip(keys, top_k_mask(torch.tensor(values, dtype=torch.float64), k).tolist()) if keep}
    return {t: _mask_rows([torch.tensor([(t, layer, g) in kept for g in group_of])
                           for layer, group_of in enumerate(groups[t])]) for t in scores}


class AttentionCost(NamedTuple):
    query_heads: int
    kv_heads: int
    attention_parameters: int  # q, k, v, o weights and biases (gates not counted)
    flops_per_token: int  # at `context` keys: projections + scores + weighted values
    kv_cache_bytes_per_token: int


def _linear_parameters(linear: nn.Linear, rows_per_head: int, heads: int, by_rows: bool) -> int:
    """Parameters of the slices of `heads` heads: rows (q/k/v, with their bias) or columns (o)."""
    if by_rows:
        return heads * rows_per_head * (linear.in_features + (linear.bias is not None))
    return heads * rows_per_head * linear.out_features


DEFAULT_CONTEXT = 1024  # keys per query where a model states no maximum


def model_context(model: nn.Module) -> int:
    """The most keys a query of `model` attends to: its maximum positions (fairseq's
    `max_positions()`; of an encoder-decoder, its longer side)."""
    positions = model.max_positions() if hasattr(model, "max_positions") else None
    values = [int(p) for p in (positions if isinstance(positions, (tuple, list)) else [positions])
              if p is not None]
    return max(values) if values else DEFAULT_CONTEXT


def attention_cost(model: nn.Module, mask: Mapping = None, context: int = 1024,
                   bytes_per_value: int = 4) -> AttentionCost:
    """What the attention blocks cost, or would cost once the heads `mask` marks 0 are removed
    (a KV head with its last query head; a prediction, from the shapes alone). A multiply-add
    is 2 FLOPs (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", table 1: 2 N per
    token for the projections, 2 n_ctx d_attn each for the scores and the weighted values); the
    KV cache holds one key and one value vector per KV head, layer and token."""
    heads = kv = parameters = flops = cache = 0
    for attention_type, layer, attention in iter_attention(model):
        group_of = list(getattr(attention, "kv_head_of", range(attention.num_heads)))
        keep = list(range(attention.num_heads))
        if mask is not None and attention_type in mask:
            row = torch.as_tensor(mask[attention_type][layer]).bool().flatten().tolist()
            keep = [h for h, kept in enumerate(row) if kept]
        block_kv = len({group_of[h] for h in keep})
        d = attention.head_dim
        block_parameters = 0
        if attention.num_heads:
            block_parameters = (_linear_parameters(attention.q_proj, d, len(keep), True)
                                + _linear_parameters(attention.k_proj, d, block_kv, True)
                                + _linear_parameters(attention.v_proj, d, block_kv, True)
                                + _linear_parameters(attention.out_proj, d, len(keep), False))
        if attention.out_proj.bias is not None:
            block_parameters += attention.out_proj.bias.numel()  # stays, also in a headless block
        heads, kv, parameters = heads + len(keep), kv + block_kv, parameters + block_parameters
        flops += 2 * block_parameters + 2 * 2 * context * len(keep) * d
        cache += 2 * block_kv * d * bytes_per_value
    return AttentionCost(heads, kv, parameters, flops, cache)


def format_costs(before: AttentionCost, after: AttentionCost, context: int) -> str:
    def line(name, a, b):
        return f"{name}: {a:,} -> {b:,} ({b / a:.1%})" if a else f"{name}: {a} -> {b}"
    return "\n".join([
        line("query heads", before.query_heads, after.query_heads),
        line("KV heads", before.kv_heads, after.kv_heads),
        line("attention parameters", before.attention_parameters, after.attention_parameters),
        line(f"attention FLOPs per token (context {context})", before.flops_per_token, after.flops_per_token),
        line("KV-cache bytes per token (float32)", before.kv_cache_bytes_per_token,
             after.kv_cache_bytes_per_token)])


def curve_scores_by_group(scores: Mapping[str, List[List[float]]], groups: HeadGroups):
    """(scores, group size) for a pruning curve that removes whole KV groups: each head scored
    by its group's mean, so the curve (lowest first, ties to the earlier head) takes a group's
    heads one after the other; its steps are multiples of the group size, which must be one
    size for every scored layer."""
    sizes = {group_of.count(g) for t in scores for group_of in groups[t] for g in set(group_of)}
    if len(sizes) != 1:
        raise HeadPruningError(f"--prune-unit kv-group: KV groups of different sizes {sorted(sizes)} "
                               f"(a pruned model); the curve needs one size")
    return group_mean_scores(scores, groups), sizes.pop()
