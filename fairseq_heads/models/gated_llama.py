"""`gated_llama`: a LLaMA-family decoder-only language model (RMSNorm, RoPE, SwiGLU, grouped-query
attention, optional q/k/v biases as in Qwen2) as a fairseq model, with one Hard Concrete gate
per query head.

It is fairseq's `TransformerLanguageModel` with one hook each: the decoder builds LLaMA layers
(`build_decoder_layer`), its final norm is an RMSNorm, and `output_layer` can block symbols that
the imported vocabulary does not have (`--blocked-output-symbols`, set by `import-hf`: fairseq's
own <s> / <pad> / <unk> when the HF tokenizer has no such string, so that the softmax runs over
HF's vocabulary exactly); under `--block-start bos` (set by `import-hf` for models trained with
<s> at each document start) it reads a block's first token </s> as <s>. fairseq's decoder supplies the rest: embeddings (no positional
embedding, no scaling: `build_model` sets those options), the causal mask, padding masks,
incremental state, tied or untied output projection. The attention blocks are
`llama_attention.LlamaAttention` (a gated block), so the L0 criteria, `--target-heads`,
`--head-mask`, `--gate-trace`, `gates`, `prune` and `stats` work as for `gated_transformer_lm`.

Architectures: `gated_llama` (the config's defaults: fairseq's LM sizes), `gated_llama_tiny` (tests, toy recipe) and the
shapes of SmolLM-135M, TinyLlama-1.1B and Qwen2-0.5B (`import-hf` sets the options from a
checkpoint's config.json; these names are for training such shapes from scratch).
"""
import contextlib
import dataclasses
from typing import Optional

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import TransformerDecoder
from fairseq.models.transformer_lm import TransformerLanguageModel, base_lm_architecture
from fairseq.modules import FairseqDropout
from omegaconf import OmegaConf, open_dict
from torch import Tensor, nn

from ..gating.group_gate import GroupGate
from ..gating.hard_concrete import HardConcreteGate
from ..gating.head_target import attach_head_target_record, follow_recorded_target
from .gated_transformer import freeze_parameters, parse_attention_types
from .imported_translation import parse_blocked_symbols
from .gated_transformer_lm import GatedTransformerLanguageModelConfig, lm_gate_defaults
from .head_layout import apply_head_layout
from .llama_attention import LlamaAttention, query_groups
from .llama_layers import RMSNorm, SwiGLU


@dataclasses.dataclass
class GatedLlamaConfig(GatedTransformerLanguageModelConfig):
    decoder_kv_heads: Optional[int] = dataclasses.field(default=None, metadata={
        "help": "key/value heads (grouped-query attention); default: as many as query heads"})
    rope_theta: float = dataclasses.field(default=10000.0, metadata={"help": "RoPE base θ"})
    rms_norm_eps: float = dataclasses.field(default=1e-6, metadata={"help": "RMSNorm epsilon"})
    qkv_bias: bool = dataclasses.field(default=False, metadata={
        "help": "biases on the q, k, v projections (Qwen2)"})
    prune_unit: str = dataclasses.field(default="query", metadata={
        "help": "what a gate switches off: one query head (query) or a KV group's query heads "
                "together (kv-group: one gate per KV head; L0 and --target-heads count groups)"})
    dropout: float = dataclasses.field(default=0.0, metadata={"help": "dropout probability"})
    blocked_output_symbols: Optional[str] = dataclasses.field(default=None, metadata={
        "help": "comma list of dictionary indices that are never predicted (log-prob -inf); "
                "set by `fairseq-heads import-hf`"})
    block_start: str = dataclasses.field(default="eos", metadata={
        "help": "what the model reads at a block's first position when the data puts fairseq's "
                "</s> there: </s> (eos: fairseq's own LMs) or <s> (bos: models trained with <s> "
                "at each document start, as Hugging Face's LLaMA; set by `fairseq-heads import-hf`)"})
    block_break_mode: Optional[str] = dataclasses.field(default=None, metadata={
        "help": "the --sample-break-mode the model's data is read with by `fairseq-heads stats`, "
                "`lm-result` and `curve` (eos: one line, a document, a block; None: the task's "
                "own); set by `fairseq-heads import-hf`"})


# What makes fairseq's decoder a LLaMA decoder, whatever the command line says: positions come
# from RoPE inside attention, embeddings are not scaled, layers are pre-norm, no extra norms.
LLAMA_FIXED_OPTIONS = dict(no_token_positional_embeddings=True, no_scale_embedding=True,
                           decoder_normalize_before=True, no_decoder_final_norm=False,
                           layernorm_embedding=False, adaptive_input=False,
                           adaptive_softmax_cutoff=None, tie_adaptive_weights=False,
                           character_embeddings=False, cross_self_attention=False,
                           decoder_layerdrop=0.0, base_layers=0, checkpoint_activations=False)


PRUNE_UNITS = ("query", "kv-group")
BLOCK_STARTS = ("eos", "bos")


def read_block_start(tokens: Tensor, start: str, eos: int, bos: int) -> Tensor:
    """The input tokens as the model reads them: under --block-start bos a block's first token
    </s> (fairseq puts the previous line's </s> there: a document start) is <s>, as a model
    trained with <s> at each document start saw it. Right-padded batches: column 0 is the first
    token; incremental decoding passes the whole prefix, so column 0 is always the block's."""
    if start != "bos" or tokens.size(1) == 0:
        return tokens
    tokens = tokens.clone()
    tokens[:, 0] = tokens[:, 0].masked_fill(tokens[:, 0] == eos, bos)
    return tokens


def head_gate(args, num_heads: int, num_kv_heads: int) -> HardConcreteGate:
    """The block's gates, with the model's gate options: one per query head, or under
    --prune-unit kv-group one per KV group (gating/group_gate.py)."""
    options = dict(temperature=args.gate_temperature, init_log_alpha=args.gate_init_log_alpha,
                   stretch=(args.gate_stretch_low, args.gate_stretch_high))
    if getattr(args, "prune_unit", "query") == "kv-group":
        return GroupGate(query_groups(num_heads, num_kv_heads), **options)
    return HardConcreteGate(num_heads, **options)


class LlamaDecoderLayer(nn.Module):
    """x + attn(rms(x)), then + swiglu(rms(x)): HF's LlamaDecoderLayer, fairseq's layer call."""

    def __init__(self, args):
        super().__init__()
        dim = args.decoder_embed_dim
        self.self_attn = LlamaAttention(
            dim, args.decoder_attention_heads, args.decoder_kv_heads, args.rope_theta,
            qkv_bias=args.qkv_bias, dropout=args.attention_dropout,
            gate=head_gate(args, args.decoder_attention_heads, args.decoder_kv_heads))
        self.self_attn_layer_norm = RMSNorm(dim, args.rms_norm_eps)
        self.final_layer_norm = RMSNorm(dim, args.rms_norm_eps)
        self.mlp = SwiGLU(dim, args.decoder_ffn_embed_dim)
        for linear in (self.mlp.gate_proj, self.mlp.up_proj, self.mlp.down_proj):
            nn.init.normal_(linear.weight, std=0.02)
        self.dropout_module = FairseqDropout(args.dropout, module_name=self.__class__.__name__)

    def forward(self, x: Tensor, encoder_out: Optional[Tensor] = None,
                encoder_padding_mask: Optional[Tensor] = None, incremental_state=None,
                prev_self_attn_state=None, prev_attn_state=None,
                self_attn_mask: Optional[Tensor] = None,
                self_attn_padding_mask: Optional[Tensor] = None,
                need_attn: bool = False, need_head_weights: bool = False):
        h = self.self_attn_layer_norm(x)
        # need_attn / need_head_weights are for encoder attention, which a decoder-only layer
        # lacks: as fairseq's own layer, no self-attention weights (the fused path stays on)
        h, _ = self.self_attn(query=h, key=h, value=h, key_padding_mask=self_attn_padding_mask,
                              incremental_state=incremental_state, need_weights=False,
                              attn_mask=self_attn_mask)
        x = x + self.dropout_module(h)
        x = x + self.dropout_module(self.mlp(self.final_layer_norm(x)))
        return x, None, None


class LlamaDecoder(TransformerDecoder):
    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=True)
        self.layer_norm = RMSNorm(args.decoder_embed_dim, args.rms_norm_eps)
        self.blocked_output_symbols = parse_blocked_symbols(args.blocked_output_symbols)
        if any(i >= len(dictionary) for i in self.blocked_output_symbols):
            raise ValueError(f"--blocked-output-symbols: index beyond the {len(dictionary)} symbols")
        self.block_start = getattr(args, "block_start", None) or "eos"
        if self.block_start not in BLOCK_STARTS:
            raise ValueError(f"--block-start: expected one of {', '.join(BLOCK_STARTS)}, got {self.block_start!r}")

    def extract_features(self, prev_output_tokens, *args, **kwargs):
        tokens = read_block_start(prev_output_tokens, self.block_start, self.dictionary.eos(),
                                  self.dictionary.bos())
        return super().extract_features(tokens, *args, **kwargs)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return LlamaDecoderLayer(self.args)

    def output_layer(self, features: Tensor) -> Tensor:
        logits = super().output_layer(features)
        if self.blocked_output_symbols:
            index = torch.tensor(self.blocked_output_symbols, device=logits.device)
            logits = logits.index_fill(-1, index, float("-inf"))
        return logits


@register_model("gated_llama", dataclass=GatedLlamaConfig)
class GatedLlamaLanguageModel(TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        if parse_attention_types(args.gated_attention) != {"dec-self"}:
            raise ValueError("--gated-attention: a decoder-only language model has only dec-self attention")
        llama_defaults(args)
        fixed = dict(LLAMA_FIXED_OPTIONS, decoder_input_dim=args.decoder_embed_dim,
                     decoder_output_dim=args.decoder_embed_dim)
        if getattr(args, "max_target_positions", None) is None:
            fixed["max_target_positions"] = getattr(args, "tokens_per_sample", 1024)
        if args.decoder_kv_heads is None:
            fixed["decoder_kv_heads"] = args.decoder_attention_heads
        with open_dict(args) if OmegaConf.is_config(args) else contextlib.nullcontext():
            for name, value in fixed.items():  # a checkpoint's config is a closed DictConfig
                setattr(args, name, value)
        if args.prune_unit not in PRUNE_UNITS:
            raise ValueError(f"--prune-unit: expected one of {', '.join(PRUNE_UNITS)}, got {args.prune_unit!r}")
        if args.decoder_embed_dim % args.decoder_attention_heads:
            raise ValueError(f"--decoder-embed-dim {args.decoder_embed_dim} is not a multiple of "
                             f"--decoder-attention-heads {args.decoder_attention_heads}")
        dictionary = task.target_dictionary
        embed_tokens = cls.build_embedding(args, task.source_dictionary, args.decoder_embed_dim)
        nn.init.normal_(embed_tokens.weight, std=0.02)
        decoder = LlamaDecoder(args, dictionary, embed_tokens)
        model = cls(decoder)
        model = apply_head_layout(model, args)  # a pruned checkpoint's shapes
        attach_head_target_record(model)  # where a --target-heads run keeps its target
        freeze_parameters(model, args)
        return model

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        loaded = super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        follow_recorded_target(self)  # the gates follow the head target the weights recorded
        return loaded


LLAMA_DEFAULTS = dict(decoder_embed_dim=512, decoder_ffn_embed_dim=1376, decoder_layers=8,
                      decoder_attention_heads=8, decoder_kv_heads=None, rope_theta=10000.0,
                      rms_norm_eps=1e-6, qkv_bias=False, blocked_output_symbols=None, dropout=0.0,
                      attention_dropout=0.0, share_decoder_input_output_embed=False, prune_unit="query",
                      gated_attention="dec-self", block_start="eos")


def llama_defaults(args, **sizes) -> None:
    """Fill in what the user did not set: `sizes` first, then LLAMA_DEFAULTS, the gate options,
    then fairseq's LM defaults."""
    for name, value in {**LLAMA_DEFAULTS, **sizes}.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    lm_gate_defaults(args)
    base_lm_architecture(args)


def _architecture(name: str, **sizes):
    def architecture(args):
        llama_defaults(args, **sizes)
    architecture.__name__ = name
    architecture.__doc__ = f"gated_llama with {sizes or 'the defaults'}"
    register_model_architecture("gated_llama", name)(architecture)
    return architecture


# `gated_llama` itself is the model's own architecture: the config's defaults (fairseq's LM sizes)
# 2 layers, d=64, 4 query heads sharing 2 KV heads: the tests' and the toy recipe's size
gated_llama_tiny = _architecture("gated_llama_tiny", decoder_embed_dim=64, decoder_ffn_embed_dim=128,
                                 decoder_layers=2, decoder_attention_heads=4, decoder_kv_heads=2,
                                 share_decoder_input_output_embed=True)
# the shapes of HuggingFaceTB/SmolLM-135M, TinyLlama/TinyLlama-1.1B and Qwen/Qwen2-0.5B (config.json)
gated_llama_smollm_135m = _architecture(
    "gated_llama_smollm_135m", decoder_embed_dim=576, decoder_ffn_embed_dim=1536, decoder_layers=30,
    decoder_attention_heads=9, decoder_kv_heads=3, rms_norm_eps=1e-5,
    share_decoder_input_output_embed=True)
gated_llama_tinyllama_1b = _architecture(
    "gated_llama_tinyllama_1b", decoder_embed_dim=2048, decoder_ffn_embed_dim=5632,
    decoder_layers=22, decoder_attention_heads=32, decoder_kv_heads=4, rms_norm_eps=1e-5)
gated_qwen2_0_5b = _architecture(
    "gated_qwen2_0_5b", decoder_embed_dim=896, decoder_ffn_embed_dim=4864, decoder_layers=24,
    decoder_attention_heads=14, decoder_kv_heads=2, rope_theta=1000000.0, rms_norm_eps=1e-6,
    qkv_bias=True, share_decoder_input_output_embed=True)
