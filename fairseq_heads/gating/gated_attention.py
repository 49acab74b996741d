"""fairseq MultiheadAttention whose head outputs are multiplied by per-head gates.

`GatedMultiheadAttention` has its own forward (same signature, same incremental-state format
and the same parameters as fairseq's, so plain checkpoints load and fairseq's beam reordering,
`set_beam_size` and `torch.jit.script` work unchanged). It computes attention one of two ways:

**Fused path** (the default): q, k, v from the module's own projections, then
`torch.nn.functional.scaled_dot_product_attention` (flash / memory-efficient kernels where the
device has them), each head's output times its gate, then `out_proj`. A causal `attn_mask`
becomes `is_causal`; key padding and float / bool / uint8 masks are folded into one additive
mask. Training, validation, incremental decoding and eval-lm run here, except the blocks
fairseq asks for weights (below): its decoder's alignment layer, and in eval mode every
encoder-decoder block unless `make_generation_fast_` (fairseq-generate) turned that off.

**Explicit path**: the attention probabilities are materialised (bmm, float32 softmax, the
module's `dropout_module`, bmm), computed exactly as fairseq's Python path computes them. It is
taken only when something needs the probabilities, which a fused kernel never forms:

- `need_weights=True` or `need_head_weights=True` (any attention weights returned: fairseq's
  decoder asks for them from its alignment layer; `stats.capture` for every block);
- `before_softmax=True` (the raw scores are returned);
- a forward (pre-)hook on `dropout_module`: the conservative LRP rules (`stats.metrics.lrp`) detach
  the probabilities there;
- `onnx_trace` (fairseq's ONNX export conventions);
- `use_sdpa = False` on the module (forces it, e.g. to compare the two paths);
- and, for speed only, fewer than `min_sdpa_queries_on_cpu` (5) queries on a CPU: incremental
  decoding's one-token steps, where the bmm arithmetic beats torch's CPU flash kernel.

The gate multiplies `out_proj`'s weight columns (out_proj(x * g) = x (W * g)^T + b, a d x d
product instead of one over every position), unless `out_proj` has forward (pre-)hooks or is not
a plain nn.Linear: then it is called as a module on the gated head outputs (T, B, H * D), so a
hook (`stats.capture`) sees, and may take gradients at, what each head contributes.

Where fairseq's own Python path is wrong, both paths here follow torch's `MultiheadAttention`
(which fairseq uses whenever it can): a bool / uint8 `attn_mask` blocks where True (fairseq adds
it as +1); `add_bias_kv` appends one learnt key / value (fairseq's Python path fails its length
assert); encoder-decoder attention projects `value` with `v_proj` (fairseq projects `key`, which
fails for kdim != vdim). With incremental decoding, the bias / zero keys are appended at each
step after the cache, not stored in it, so step t equals position t of the full sequence.

Scales: the fused path lets SDPA scale by 1 / sqrt(head_dim), the explicit path multiplies q by
`self.scaling` = head_dim ** -0.5, each as fairseq's corresponding path does; the two numbers
differ by at most one float64 ulp.
"""
from typing import Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from ..heads import iter_attention
from .attention_tensors import (
    additive_mask,
    attn_mask_4d,
    gate_columns,
    gate_heads,
    group_beams,
    is_causal_mask,
    pad_key_columns,
    split_heads,
    ungroup_beams,
)
from .hard_concrete import HardConcreteGate


# On CPU, for a handful of queries (incremental decoding feeds one), the bmm arithmetic is faster
# than torch's CPU flash kernel (measured: 118 vs 152 us for 1 query and 30 keys, batch 40,
# 8 heads; even from 8 queries on). A module's `min_sdpa_queries_on_cpu` starts at this value.
MIN_SDPA_QUERIES_ON_CPU = 5


class GatedMultiheadAttention(MultiheadAttention):
    """MultiheadAttention with a HardConcreteGate on its heads: each head's context vector is
    multiplied by its gate before the output projection (see the module doc for the two paths).
    Parameter names are fairseq's plus `gate.log_alpha`, so plain `transformer` checkpoints load.
    """

    def __init__(self, *args, gate: Optional[HardConcreteGate] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._attach_gate(gate if gate is not None else HardConcreteGate(self.num_heads))

    @classmethod
    def from_attention(cls, attention: MultiheadAttention,
                       gate: Optional[HardConcreteGate] = None) -> "GatedMultiheadAttention":
        """Gate a module fairseq already built, in place. Re-classing keeps every option fairseq
        chose for it (dims, dropout, quant-noise, ...) without restating its constructor here."""
        if isinstance(attention, cls):
            raise ValueError("attention module is already gated")
        if type(attention) is not MultiheadAttention:
            # A subclass's own forward / apply_sparse_mask would be silently replaced by ours.
            raise ValueError(f"can only gate fairseq's MultiheadAttention, not {type(attention).__name__}")
        attention.__class__ = cls
        attention._attach_gate(gate if gate is not None else HardConcreteGate(attention.num_heads))
        return attention

    def _attach_gate(self, gate: HardConcreteGate) -> None:
        if gate.num_gates != self.num_heads:
            raise ValueError(f"gate has {gate.num_gates} gates for {self.num_heads} heads")
        if self.use_xformers:
            raise ValueError("gated attention does not support xformers attention")
        self.gate = gate.to(self.out_proj.weight.device)
        self.use_sdpa = True  # False forces the explicit path (module doc)
        self.min_sdpa_queries_on_cpu = MIN_SDPA_QUERIES_ON_CPU
        self._eval_gate_cache: Optional[Tuple[Tensor, Tensor, bool]] = None

    def _adaptive_prune_heads(self, reserve_head_index: List[Tuple[int, int]]):
        """fairseq's head pruning, plus what it leaves out: the gate and bias_k / bias_v keep the
        kept heads (in the order given), and out_proj's in_features is updated."""
        kept = [start // self.head_dim for start, _ in reserve_head_index]
        super()._adaptive_prune_heads(reserve_head_index)
        self.out_proj.in_features = self.embed_dim
        self.gate.keep_only(kept)
        columns = torch.cat([torch.arange(start, end) for start, end in reserve_head_index])
        if self.bias_k is not None and self.bias_v is not None:
            self.bias_k = nn.Parameter(self.bias_k.detach()[..., columns.to(self.bias_k.device)].clone())
            self.bias_v = nn.Parameter(self.bias_v.detach()[..., columns.to(self.bias_v.device)].clone())

    @torch.jit.unused
    def _gate_values(self) -> Tuple[Tensor, bool]:
        """self.gate(), and whether every gate is exactly 1 (then gating is skipped). Where it
        is a pure function of log_alpha (eval mode, the plain rule, no fixed mask, no gradient
        wanted) it is recomputed only when log_alpha's values change, compared by value:
        optimizers write parameters through .data, which no version counter sees. (In one-token
        decoding steps the gate's tiny ops and the gating of W each cost ~5% of a block.)"""
        gate = self.gate
        alpha = gate.log_alpha
        if (gate.training or gate.top_k_group is not None or gate.fixed_mask is not None
                or (alpha.requires_grad and torch.is_grad_enabled())):
            return gate(), False
        cached = self._eval_gate_cache
        if (cached is None or cached[0].dtype != alpha.dtype or cached[0].device != alpha.device
                or not torch.equal(cached[0], alpha)):
            value = gate()
            cached = (alpha.detach().clone(), value, bool((value == 1).all()))
            self._eval_gate_cache = cached
        return cached[1], cached[2]

    @torch.jit.unused
    def _out_proj_is_hooked(self) -> bool:
        out_proj = self.out_proj
        return type(out_proj) is not nn.Linear or bool(out_proj._forward_hooks or out_proj._forward_pre_hooks)

    @torch.jit.unused
    def _probabilities_are_hooked(self) -> bool:
        dropout = self.dropout_module
        return bool(dropout._forward_hooks or dropout._forward_pre_hooks)

    def _project_keys_values(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                             key_padding_mask: Optional[Tensor]
                             ) -> Tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
        """k, v (S, kv_bsz, H * D) of this call (None when only cached ones are used)."""
        if self.self_attention:
            return self.k_proj(query), self.v_proj(query), key_padding_mask
        if key is None:
            assert value is None
            return None, None, key_padding_mask
        if value is None:
            value = key
        if self.encoder_decoder_attention and self.beam_size > 1 and query.size(1) == key.size(1):
            # fairseq's beamable enc-dec attention: the beam's copies of a source are equal,
            # keep one of them per sentence.
            key = key.view(key.size(0), -1, self.beam_size, key.size(2))[:, :, 0, :]
            value = value.view(value.size(0), -1, self.beam_size, value.size(2))[:, :, 0, :]
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.view(-1, self.beam_size, key_padding_mask.size(1))[:, 0, :]
        return self.k_proj(key), self.v_proj(value), key_padding_mask

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
        """fairseq's MultiheadAttention.forward contract (Time x Batch x Channel); key_padding_mask
        (B, S) is nonzero at pads; attn_mask (T, S) or (B * H, T, S), float (added) or bool /
        uint8 (nonzero = blocked)."""
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, embed_dim = query.size()
        if not self.skip_embed_dim_check:
            assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"
        explicit = (need_weights or before_softmax or self.onnx_trace or not self.use_sdpa
                    or (tgt_len < self.min_sdpa_queries_on_cpu and query.device.type == "cpu"))
        if not torch.jit.is_scripting():
            explicit = explicit or self._probabilities_are_hooked()

        saved_state: Optional[Dict[str, Optional[Tensor]]] = None
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if static_kv and "prev_key" in saved_state:
                key = value = None  # static keys / values are cached: no need to project again
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, T, D)
        k_new, v_new, key_padding_mask = self._project_keys_values(query, key, value, key_padding_mask)
        k: Optional[Tensor] = None
        v: Optional[Tensor] = None
        kv_bsz = bsz
        if k_new is not None and v_new is not None:
            kv_bsz = k_new.size(1)
            k = split_heads(k_new, self.num_heads)
            v = split_heads(v_new, self.num_heads)

        if saved_state is not None:
            # cached as fairseq caches: (kv_bsz, H, S, D) keys / values, (kv_bsz, S) padding
            if "prev_key" in saved_state:
                prev_key = saved_state["prev_key"]
                assert prev_key is not None
                kv_bsz = prev_key.size(0)
                if static_kv or k is None:
                    k = prev_key
                else:
                    k = torch.cat([prev_key, k], dim=2)
            if "prev_value" in saved_state:
                prev_value = saved_state["prev_value"]
                assert prev_value is not None
                if static_kv or v is None:
                    v = prev_value
                else:
                    v = torch.cat([prev_value, v], dim=2)
            prev_key_padding_mask: Optional[Tensor] = None
            if "prev_key_padding_mask" in saved_state:
                prev_key_padding_mask = saved_state["prev_key_padding_mask"]
            assert k is not None and v is not None
            key_padding_mask = GatedMultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask, prev_key_padding_mask=prev_key_padding_mask,
                batch_size=kv_bsz, src_len=k.size(2), static_kv=static_kv)
            if static_kv and key_padding_mask is not None:
                # fairseq's helper returns floats; cached as bool, no step converts it again
                key_padding_mask = key_padding_mask.to(torch.bool)
            saved_state["prev_key"] = k
            saved_state["prev_value"] = v
            saved_state["prev_key_padding_mask"] = key_padding_mask
            assert incremental_state is not None
            self._set_input_buffer(incremental_state, saved_state)
        assert k is not None and v is not None
        # fork/join in scripted generators passes "no mask" as a 0-dim tensor
        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None

        k, v, extra_keys = self._append_extra_keys(k, v, kv_bsz)
        key_padding_mask = pad_key_columns(key_padding_mask, extra_keys)
        if attn_mask is not None:
            attn_mask = pad_key_columns(attn_mask, extra_keys)

        weights: Optional[Tensor] = None
        if explicit:
            out, probs, v_flat = self._explicit_attention(
                q, k, v, attn_mask, key_padding_mask, bsz, kv_bsz, before_softmax)
            if before_softmax:
                return out, v_flat  # the scores (B * H, T, S), ungated: out_proj is not reached
            if need_weights and probs is not None:
                weights = probs.view(bsz, self.num_heads, tgt_len, -1).transpose(1, 0)
                if not need_head_weights:
                    weights = weights.mean(dim=0)  # average over heads
        else:
            out = self._fused_attention(q, k, v, attn_mask, key_padding_mask, bsz, kv_bsz,
                                        extra_keys)
        heads = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.num_heads * self.head_dim)
        if torch.jit.is_scripting():
            gate, all_open, hooked = self.gate(), False, False
        else:
            gate, all_open = self._gate_values()
            hooked = self._out_proj_is_hooked()
        if hooked:  # whoever hooked out_proj sees (and may take gradients at) the gated heads
            return self.out_proj(heads if all_open else gate_heads(heads, gate)), weights
        # out_proj(heads * g) = heads @ (W * g)^T + b: gating W costs O(d^2), not O(B T d)
        weight = self.out_proj.weight if all_open else gate_columns(self.out_proj.weight, gate)
        return F.linear(heads, weight, self.out_proj.bias), weights

    def _append_extra_keys(self, k: Tensor, v: Tensor, kv_bsz: int) -> Tuple[Tensor, Tensor, int]:
        """bias_kv's learnt key / value, then add_zero_attn's zero one, after the real keys."""
        extra = 0
        if self.bias_k is not None and self.bias_v is not None:
            bias_k = self.bias_k.view(1, self.num_heads, 1, self.head_dim).expand(kv_bsz, -1, -1, -1)
            bias_v = self.bias_v.view(1, self.num_heads, 1, self.head_dim).expand(kv_bsz, -1, -1, -1)
            k = torch.cat([k, bias_k.to(k.dtype)], dim=2)
            v = torch.cat([v, bias_v.to(v.dtype)], dim=2)
            extra += 1
        if self.add_zero_attn:
            zeros = torch.zeros((kv_bsz, self.num_heads, 1, self.head_dim), dtype=k.dtype, device=k.device)
            k = torch.cat([k, zeros], dim=2)
            v = torch.cat([v, zeros], dim=2)
            extra += 1
        return k, v, extra

    def _fused_attention(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor],
                         key_padding_mask: Optional[Tensor], bsz: int, kv_bsz: int,
                         extra_keys: int) -> Tensor:
        """SDPA on (B, H, T, D) heads; returns the (B, H, T, D) head outputs, ungated."""
        is_causal = False
        mask: Optional[Tensor] = None
        if attn_mask is not None:
            if (key_padding_mask is None and extra_keys == 0 and bsz == kv_bsz
                    and is_causal_mask(attn_mask)):
                is_causal = True
            else:
                mask = additive_mask(attn_mask_4d(attn_mask, bsz, self.num_heads), q.dtype)
        if bsz != kv_bsz:
            q = group_beams(q, kv_bsz, bsz // kv_bsz)
            if mask is not None:
                mask = group_beams(mask, kv_bsz, bsz // kv_bsz)
        if key_padding_mask is not None:
            padded = key_padding_mask.to(torch.bool).view(kv_bsz, 1, 1, -1)
            if mask is None:
                mask = torch.zeros(padded.shape, dtype=q.dtype, device=q.device)
            mask = torch.where(padded, torch.tensor(float("-inf"), dtype=q.dtype, device=q.device), mask)
        dropout_p = 0.0
        if self.training or self.dropout_module.apply_during_inference:
            dropout_p = self.dropout_module.p
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                             is_causal=is_causal)
        if bsz != kv_bsz:
            out = ungroup_beams(out, bsz)
        return out

    def _explicit_attention(self, q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor],
                            key_padding_mask: Optional[Tensor], bsz: int, kv_bsz: int,
                            before_softmax: bool) -> Tuple[Tensor, Optional[Tensor], Tensor]:
        """fairseq's Python-path arithmetic on (B * H, T, D): returns (B, H, T, D) head outputs,
        the float32 probabilities (B * H, T, S) and the values (B * H, S, D); with
        before_softmax, the scores in place of the outputs."""
        num_heads, head_dim = self.num_heads, self.head_dim
        tgt_len, src_len = q.size(2), k.size(2)
        q = (q * self.scaling).reshape(bsz * num_heads, tgt_len, head_dim)
        k = k.reshape(kv_bsz * num_heads, src_len, head_dim)
        v = v.reshape(kv_bsz * num_heads, src_len, head_dim)
        if bsz != kv_bsz:
            scores = torch.einsum("bxhtd,bhsd->bxhts",
                                  q.view(kv_bsz, -1, num_heads, tgt_len, head_dim),
                                  k.view(kv_bsz, num_heads, src_len, head_dim))
            scores = scores.reshape(bsz * num_heads, tgt_len, src_len)
        else:
            scores = torch.bmm(q, k.transpose(1, 2))
        if attn_mask is not None:
            added = attn_mask if attn_mask.is_floating_point() else additive_mask(attn_mask, scores.dtype)
            scores += added.unsqueeze(0) if added.dim() == 2 else added
        if key_padding_mask is not None:
            scores = scores.view(kv_bsz, -1, num_heads, tgt_len, src_len).masked_fill(
                key_padding_mask.view(kv_bsz, 1, 1, 1, src_len).to(torch.bool), float("-inf"))
            scores = scores.view(bsz * num_heads, tgt_len, src_len)
        if before_softmax:
            return scores, None, v
        probs_float = utils.softmax(scores, dim=-1, onnx_trace=self.onnx_trace)
        probs = self.dropout_module(probs_float.type_as(scores))
        if bsz != kv_bsz:
            out = torch.einsum("bxhts,bhsd->bxhtd",
                               probs.view(kv_bsz, -1, num_heads, tgt_len, src_len),
                               v.view(kv_bsz, num_heads, src_len, head_dim))
        else:
            out = torch.bmm(probs, v)
        return out.reshape(bsz, num_heads, tgt_len, head_dim), probs_float, v

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        # A checkpoint of a plain transformer has no gates: start them as initialised (open).
        prefix = name + "." if name != "" else ""
        key = prefix + "gate.log_alpha"
        if key not in state_dict:
            state_dict[key] = self.gate.log_alpha.detach().clone()


def iter_gates(model: nn.Module) -> Iterator[Tuple[str, int, HardConcreteGate]]:
    """(attention type, layer, gate) for every gated attention block of any fairseq model."""
    for attention_type, layer, attention in iter_attention(model):
        if isinstance(attention, GatedMultiheadAttention):
            yield attention_type, layer, attention.gate
