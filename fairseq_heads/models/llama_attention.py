"""LLaMA-family self-attention with a Hard Concrete gate per query head: rotary positions and
grouped-query attention (GQA: several query heads share one key/value head).

`LlamaAttention` is a `GatedMultiheadAttention`, so everything that finds, masks, targets,
traces or prunes gated heads (`iter_gates`, head masks, `--target-heads`, `physically_prune`,
`stats.capture`) treats it as any other gated block. What it changes is one method each:

- `forward`: q from `q_proj` (H heads), k and v from `k_proj` / `v_proj` (H_kv heads), RoPE on q
  and k at positions offset by the cached length, the KV cache holds the H_kv rotated keys and
  values (fairseq's `prev_key` / `prev_value` format, so beam reordering works unchanged), then
  SDPA with `enable_gqa` (or the KV heads repeated, once pruning made the groups unequal), each
  query head's output times its gate, `out_proj` (HF's `o_proj`). The explicit path (attention
  probabilities materialised, for `need_weights` and the statistics' hooks) does the same
  arithmetic with a float32 softmax.
- `_adaptive_prune_heads` (physical pruning, models/head_layout.py): removes q-proj rows,
  o-proj columns and gates of the removed query heads, and a KV head's k/v rows once every
  query head of its group is gone (`kv_heads_kept`).

Query head h reads KV head `kv_head_of[h]` (current indices): h // (H / H_kv) before pruning.
"""
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..gating.attention_tensors import gate_columns, gate_heads, is_causal_mask, split_heads
from ..gating.gated_attention import GatedMultiheadAttention
from ..gating.hard_concrete import HardConcreteGate
from .llama_layers import apply_rotary, rotary_cos_sin


def query_groups(num_heads: int, num_kv_heads: int) -> List[int]:
    """The KV head each query head reads in an unpruned GQA block (HF's `repeat_kv` order)."""
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"--decoder-kv-heads {num_kv_heads} must divide the "
                         f"{num_heads} query heads")
    size = num_heads // num_kv_heads
    return [h // size for h in range(num_heads)]


def kv_heads_kept(kv_head_of: List[int], keep: List[int]) -> List[int]:
    """The KV heads still read by the kept query heads (a KV head goes with its whole group)."""
    return sorted({kv_head_of[h] for h in keep})


def uniform_group_size(kv_head_of: List[int], num_kv_heads: int) -> int:
    """g when query head h reads KV head h // g for every h (SDPA's enable_gqa layout), else 0."""
    if num_kv_heads == 0 or len(kv_head_of) % num_kv_heads:
        return 0
    size = len(kv_head_of) // num_kv_heads
    return size if kv_head_of == [h // size for h in range(len(kv_head_of))] else 0


def head_rows(heads: List[int], head_dim: int) -> Tensor:
    """The weight rows (or columns) of these heads in a (heads * head_dim)-wide projection."""
    if not heads:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in heads])


def _slice_linear(linear: nn.Linear, index: Tensor, dim: int) -> None:
    index = index.to(linear.weight.device)
    linear.weight = nn.Parameter(linear.weight.detach().index_select(dim, index).clone())
    if dim == 0 and linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias.detach().index_select(0, index).clone())
    if dim == 0:
        linear.out_features = index.numel()
    else:
        linear.in_features = index.numel()


class LlamaAttention(GatedMultiheadAttention):
    """Causal self-attention of one LLaMA / Qwen2 / Mistral layer, gated per query head.
    Parameter names: fairseq's (q_proj, k_proj, v_proj, out_proj) + gate.log_alpha."""

    def __init__(self, embed_dim: int, num_heads: int, num_kv_heads: int, rope_theta: float,
                 qkv_bias: bool = False, dropout: float = 0.0,
                 gate: Optional[HardConcreteGate] = None):
        super().__init__(embed_dim, num_heads, dropout=dropout, bias=False, self_attention=True,
                         gate=gate)
        self.kv_head_of = query_groups(num_heads, num_kv_heads)
        self.num_kv_heads = num_kv_heads
        self.rope_theta = float(rope_theta)
        # fairseq built q/k/v as wide as the model, without bias: GQA's k/v are narrower
        self.q_proj = nn.Linear(embed_dim, num_heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * self.head_dim, bias=qkv_bias)
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.normal_(linear.weight, std=0.02)  # HF's initializer_range
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def extra_repr(self) -> str:
        return f"heads={self.num_heads}, kv_heads={self.num_kv_heads}, rope_theta={self.rope_theta:g}"

    # ------------------------------------------------------------------ pruning

    def _adaptive_prune_heads(self, reserve_head_index: List[Tuple[int, int]]):
        keep = [start // self.head_dim for start, _ in reserve_head_index]
        kv_keep = kv_heads_kept(self.kv_head_of, keep)
        _slice_linear(self.q_proj, head_rows(keep, self.head_dim), 0)
        _slice_linear(self.k_proj, head_rows(kv_keep, self.head_dim), 0)
        _slice_linear(self.v_proj, head_rows(kv_keep, self.head_dim), 0)
        _slice_linear(self.out_proj, head_rows(keep, self.head_dim), 1)
        self.kv_head_of = [kv_keep.index(self.kv_head_of[h]) for h in keep]
        self.num_heads, self.num_kv_heads = len(keep), len(kv_keep)
        self.embed_dim = self.num_heads * self.head_dim  # what fairseq's pruning sets
        self.gate.keep_only(keep)

    def upgrade_state_dict_named(self, state_dict, name):
        """Gates saved for the other prune unit (fine-tuning an imported or query-gated model
        with --prune-unit kv-group, or back): a group's log-alpha is the mean of its heads',
        a head's is its group's."""
        super().upgrade_state_dict_named(state_dict, name)
        key = (name + "." if name else "") + "gate.log_alpha"
        saved, ours = state_dict.get(key), self.gate.log_alpha
        if saved is None or saved.numel() == ours.numel():
            return
        group_of = torch.tensor(self.kv_head_of, device=saved.device)
        if saved.numel() == self.num_heads and ours.numel() == self.num_kv_heads:
            sums = torch.zeros(self.num_kv_heads, dtype=saved.dtype, device=saved.device)
            sums.index_add_(0, group_of, saved)
            state_dict[key] = sums / torch.bincount(group_of, minlength=self.num_kv_heads).to(saved.dtype)
        elif saved.numel() == self.num_kv_heads and ours.numel() == self.num_heads:
            state_dict[key] = saved.index_select(0, group_of)

    # ------------------------------------------------------------------ attention

    def _cached(self, incremental_state, k: Tensor, v: Tensor,
                key_padding_mask: Optional[Tensor]) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """Append this step's keys / values to the cache (fairseq's buffer format)."""
        saved = self._get_input_buffer(incremental_state)
        prev_key, prev_value = saved.get("prev_key"), saved.get("prev_value")
        if prev_key is not None and prev_value is not None:
            k = torch.cat([prev_key, k], dim=2)
            v = torch.cat([prev_value, v], dim=2)
        key_padding_mask = GatedMultiheadAttention._append_prev_key_padding_mask(
            key_padding_mask=key_padding_mask,
            prev_key_padding_mask=saved.get("prev_key_padding_mask"),
            batch_size=k.size(0), src_len=k.size(2), static_kv=False)
        saved["prev_key"], saved["prev_value"] = k, v
        saved["prev_key_padding_mask"] = key_padding_mask
        self._set_input_buffer(incremental_state, saved)
        return k, v, key_padding_mask

    def _cache_length(self, incremental_state) -> int:
        if incremental_state is None:
            return 0
        prev_key = self._get_input_buffer(incremental_state).get("prev_key")
        return 0 if prev_key is None else prev_key.size(2)

    def _score_mask(self, attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor],
                    tgt_len: int, src_len: int, offset: int, dtype: torch.dtype,
                    device: torch.device) -> Tuple[Optional[Tensor], bool]:
        """(additive mask (B | 1, 1, T, S) or None, is_causal) for the scores."""
        if (attn_mask is not None and key_padding_mask is None and tgt_len == src_len
                and is_causal_mask(attn_mask)):
            return None, True  # the decoder's future mask over the whole sequence
        mask = None
        if attn_mask is None and tgt_len > 1:  # several new tokens after a cache: causal, offset
            future = torch.ones(tgt_len, src_len, dtype=torch.bool, device=device).triu(offset + 1)
            attn_mask = future
        if attn_mask is not None:
            if attn_mask.is_floating_point():
                mask = attn_mask.to(dtype).view(1, 1, tgt_len, src_len)
            else:
                mask = torch.zeros(tgt_len, src_len, dtype=dtype, device=device).masked_fill(
                    attn_mask.to(torch.bool), float("-inf")).view(1, 1, tgt_len, src_len)
        if key_padding_mask is not None:
            padded = key_padding_mask.to(torch.bool).view(key_padding_mask.size(0), 1, 1, src_len)
            base = mask if mask is not None else torch.zeros(1, 1, 1, src_len, dtype=dtype, device=device)
            mask = base.masked_fill(padded, float("-inf"))
        return mask, False

    def _expand_kv(self, x: Tensor) -> Tensor:
        """(B, H_kv, S, D) -> (B, H, S, D): each query head's KV head."""
        index = torch.tensor(self.kv_head_of, dtype=torch.long, device=x.device)
        return x.index_select(1, index)

    def _grouped_matmul(self, x: Tensor, kv: Tensor, group: int) -> Tensor:
        """(B, H, T, X) @ (B, H_kv, X, Y) per query head's KV head -> (B, H, T, Y). With equal
        groups the group's queries are stacked along T, so the cached keys / values are read in
        place, not copied per query head (what makes one-token decoding steps cheap)."""
        if not group:
            return torch.matmul(x, self._expand_kv(kv))
        b, h, t, width = x.shape
        stacked = x.reshape(b, h // group, group * t, width)
        return torch.matmul(stacked, kv).view(b, h, t, kv.size(-1))

    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """fairseq's MultiheadAttention contract (T x B x C, self-attention only; key / value are
        ignored: they are the query)."""
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, _ = query.size()
        offset = self._cache_length(incremental_state)
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(query), self.num_kv_heads)  # (B, H_kv, T, D)
        v = split_heads(self.v_proj(query), self.num_kv_heads)
        positions = torch.arange(offset, offset + tgt_len, device=query.device)
        cos, sin = rotary_cos_sin(positions, self.head_dim, self.rope_theta, q.dtype)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if incremental_state is not None:
            k, v, key_padding_mask = self._cached(incremental_state, k, v, key_padding_mask)
        if key_padding_mask is not None and not key_padding_mask.any():
            key_padding_mask = None
        mask, is_causal = self._score_mask(attn_mask, key_padding_mask, tgt_len, k.size(2),
                                           offset, q.dtype, q.device)
        explicit = (need_weights or before_softmax or not self.use_sdpa
                    or (tgt_len < self.min_sdpa_queries_on_cpu and query.device.type == "cpu")
                    or self._probabilities_are_hooked())
        weights: Optional[Tensor] = None
        group = uniform_group_size(self.kv_head_of, self.num_kv_heads)
        if explicit:
            scores = self._grouped_matmul(q * self.scaling, k.transpose(2, 3), group)
            if mask is not None:
                scores = scores + mask
            elif is_causal:
                future = torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=q.device).triu(1)
                scores = scores.masked_fill(future, float("-inf"))
            if before_softmax:
                return scores.view(bsz * self.num_heads, tgt_len, -1), v
            probs_float = F.softmax(scores.float(), dim=-1)
            probs = self.dropout_module(probs_float.to(q.dtype))
            out = self._grouped_matmul(probs, v, group)
            if need_weights:
                weights = probs_float.transpose(0, 1)  # (H, B, T, S), fairseq's per-head layout
                if not need_head_weights:
                    weights = weights.mean(dim=0)
        else:
            if not group:
                k, v = self._expand_kv(k), self._expand_kv(v)
            dropout_p = self.dropout_module.p if (self.training or self.dropout_module.apply_during_inference) else 0.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                 is_causal=is_causal, enable_gqa=group > 1)
        heads = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.num_heads * self.head_dim)
        gate, all_open = self._gate_values()
        if self._out_proj_is_hooked():  # the statistics see the gated head outputs
            return self.out_proj(heads if all_open else gate_heads(heads, gate)), weights
        weight = self.out_proj.weight if all_open else gate_columns(self.out_proj.weight, gate)
        return F.linear(heads, weight, self.out_proj.bias), weights
