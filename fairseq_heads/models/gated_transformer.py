"""`gated_transformer`: fairseq's Transformer with Hard Concrete gates on attention heads.

Every architecture fairseq registers for its `transformer` model has a gated counterpart named
`gated_` + its name (`gated_transformer_wmt_en_de_big`, ...), derived from fairseq's registry
(`register_gated_counterparts`). One name was ours first: `gated_transformer_tiny` is the size of
the demo and the tests (d=64, ffn 128, 4 heads), so fairseq's `transformer_tiny` (ffn 64, 2 heads)
is `gated_transformer_tiny_fairseq`.
"""
import sys
from typing import Callable, Dict, FrozenSet, List, Tuple

import torch
from fairseq.models import (
    ARCH_CONFIG_REGISTRY,
    ARCH_MODEL_NAME_REGISTRY,
    ARCH_MODEL_REGISTRY,
    register_model,
    register_model_architecture,
)
from fairseq.models.transformer import TransformerModel, base_architecture
from torch import nn

from ..gating.gated_attention import GatedMultiheadAttention, iter_gates
from ..heads import ATTENTION_TYPES, iter_attention
from ..gating.hard_concrete import HardConcreteGate
from ..gating.head_target import attach_head_target_record, follow_recorded_target
from .gate_options import add_gate_args, gate_defaults
from .head_layout import apply_head_layout
from .imported_translation import add_imported_translation_args, apply_model_options, build_decoder


def parse_attention_types(value: str, option: str = "--gated-attention") -> FrozenSet[str]:
    """'enc-self,enc-dec' -> {'enc-self', 'enc-dec'}; unknown names are an error naming `option`."""
    names = [name.strip() for name in str(value).split(",") if name.strip()]
    unknown = [name for name in names if name not in ATTENTION_TYPES]
    if unknown or not names:
        raise ValueError(f"{option}: unknown attention type(s) {unknown or [value]}; "
                         f"choose a comma list of {', '.join(ATTENTION_TYPES)}")
    return frozenset(names)


def add_gates(model: nn.Module, args) -> nn.Module:
    """Gate the heads of every attention block of the types named in args.gated_attention."""
    gated_types = parse_attention_types(args.gated_attention)
    for attention_type, _, attention in iter_attention(model):
        if attention_type in gated_types:
            gate = HardConcreteGate(attention.num_heads, temperature=args.gate_temperature,
                                    stretch=(args.gate_stretch_low, args.gate_stretch_high),
                                    init_log_alpha=args.gate_init_log_alpha)
            GatedMultiheadAttention.from_attention(attention, gate)
    return model


def freeze_parameters(model: nn.Module, args) -> None:
    """--train-gates-only: only the gates learn; --freeze-decoder: the decoder but its gates stay."""
    if getattr(args, "train_gates_only", False):
        for name, parameter in model.named_parameters():
            parameter.requires_grad = name.endswith("gate.log_alpha")
    if getattr(args, "freeze_decoder", False):
        for name, parameter in model.decoder.named_parameters():
            if not name.endswith("gate.log_alpha"):
                parameter.requires_grad = False


def expected_l0(model: nn.Module) -> torch.Tensor:
    """Σ over gated heads of P(gate != 0), differentiable in the log-alphas."""
    terms = [gate.expected_l0() for _, _, gate in iter_gates(model)]
    return torch.stack(terms).sum() if terms else torch.zeros(())


def open_heads_per_type(model: nn.Module) -> Dict[str, Tuple[int, int]]:
    """{attention type: (heads open, heads gated)} by the deterministic-gate > 0 rule."""
    counts: Dict[str, List[int]] = {}
    for attention_type, _, gate in iter_gates(model):
        opened, total = counts.setdefault(attention_type, [0, 0])
        counts[attention_type] = [opened + int(gate.is_open().sum()), total + gate.num_gates]
    return {t: (c[0], c[1]) for t, c in counts.items()}


class HeadCountMismatchError(SystemExit):
    """Plain weights of other head counts than the gated model's: a usage error, so it exits as
    argparse's do (status 2, one line on stderr). Not an Exception: fairseq's trainer replaces any
    Exception from load_state_dict by "Cannot load model parameters", which hides the option."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message
        print(f"error: {message}", file=sys.stderr, flush=True)

    def __str__(self) -> str:
        return self.message


def gate_built_model(model: nn.Module, args) -> nn.Module:
    """What every gated model adds to its plain parent's build_model: the gates, then (physical
    pruning, fairseq_heads/pruning) a pruned checkpoint's smaller attention blocks, rebuilt
    before fairseq loads its state dict (model option head_layout), the record of a
    --target-heads run's target (its state dict keeps it: gating/head_target.py), then
    --train-gates-only / --freeze-decoder."""
    model = apply_head_layout(add_gates(model, args), args)
    attach_head_target_record(model)
    freeze_parameters(model, args)
    return model


def check_plain_checkpoint_heads(model: nn.Module, state_dict) -> None:
    """Refuse weights trained with other head counts than `model` has (a plain checkpoint, or
    the ungated side of a gated one).

    Attention weights have the same shapes whatever the number of heads, so fairseq would load
    them and silently split q/k/v into other heads. The trained counts are noted on the weights
    by our checkpoint loading (compat.CHECKPOINT_HEADS)."""
    from ..compat import CHECKPOINT_HEADS

    recorded = getattr(state_dict, CHECKPOINT_HEADS, None)
    if not recorded:
        return
    heads = {}
    for attention_type, _, attention in iter_attention(model):
        side = "encoder" if attention_type == "enc-self" else "decoder"
        # the configured count, also for a pruned block (which keeps its head size)
        heads[side] = attention.out_proj.out_features // attention.head_dim
    for side, ours in heads.items():
        theirs = recorded.get(side)
        if theirs is not None and theirs != ours:
            raise HeadCountMismatchError(
                f"{recorded.get('path') or 'the checkpoint'} was trained with "
                f"--{side}-attention-heads {theirs}, this gated model has {ours}: its attention "
                f"weights would be split into other heads; use --{side}-attention-heads {theirs}")


class GatedCheckpointLoading:
    """The loading hook of the gated fairseq models (put first among the bases): refuse weights
    trained with other head counts, then let the gates follow the head target the weights
    recorded (gating/head_target.py)."""

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        check_plain_checkpoint_heads(self, state_dict)
        loaded = super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        follow_recorded_target(self)
        return loaded


@register_model("gated_transformer")
class GatedTransformerModel(GatedCheckpointLoading, TransformerModel):
    """Transformer whose attention heads (of the types in --gated-attention) carry Hard
    Concrete gates. Loads plain `transformer` checkpoints of the same sizes (gates start open)."""

    @classmethod
    def add_args(cls, parser):
        super().add_args(parser)
        add_gate_args(parser)  # and --head-layout (physical pruning)
        add_imported_translation_args(parser)  # what imported HF models need (import-hf)

    @classmethod
    def build_model(cls, args, task):
        gate_defaults(args)
        parse_attention_types(args.gated_attention)  # fail before building anything
        model = super().build_model(args, task)
        apply_model_options(model, args)
        return gate_built_model(model, args)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return build_decoder(args, tgt_dict, embed_tokens)


def gated_base_architecture(args):
    gate_defaults(args)
    base_architecture(args)


@register_model_architecture("gated_transformer", "gated_transformer")
def gated_transformer(args):
    gated_base_architecture(args)


@register_model_architecture("gated_transformer", "gated_transformer_tiny")
def gated_transformer_tiny(args):
    """2+2 layers, d=64, 4 heads: the size of the demo and the tests."""
    for side in ("encoder", "decoder"):
        setattr(args, f"{side}_layers", getattr(args, f"{side}_layers", 2))
        setattr(args, f"{side}_embed_dim", getattr(args, f"{side}_embed_dim", 64))
        setattr(args, f"{side}_ffn_embed_dim", getattr(args, f"{side}_ffn_embed_dim", 128))
        setattr(args, f"{side}_attention_heads", getattr(args, f"{side}_attention_heads", 4))
    gated_base_architecture(args)


def gated_architecture(fairseq_architecture: Callable, defaults: Callable = gate_defaults) -> Callable:
    """The gated counterpart of a fairseq architecture function: the gate options' defaults
    (none for dataclass models, whose config has them), then fairseq's sizes; both only fill in
    options the user did not give."""
    def architecture(args):
        if defaults is not None:
            defaults(args)
        fairseq_architecture(args)

    architecture.__doc__ = f"gate defaults + fairseq's `{fairseq_architecture.__name__}`"
    return architecture


def register_gated_counterparts(fairseq_model: str, gated_model: str, renamed: Dict[str, str] = None,
                                defaults: Callable = gate_defaults) -> Dict[str, str]:
    """Register `gated_` + name for every architecture fairseq has for `fairseq_model`, unless
    that name is taken (then renamed[name]); returns {fairseq arch: gated arch}."""
    renamed = renamed or {}
    counterparts = {}
    for arch, model_name in sorted(ARCH_MODEL_NAME_REGISTRY.items()):
        if model_name != fairseq_model:
            continue
        name = renamed.get(arch, "gated_" + arch)
        if name not in ARCH_MODEL_REGISTRY:
            register_model_architecture(gated_model, name)(
                gated_architecture(ARCH_CONFIG_REGISTRY[arch], defaults))
        counterparts[arch] = name
    return counterparts


# `transformer` itself is `gated_transformer` above (same function: gate defaults + base).
GATED_ARCHITECTURES = register_gated_counterparts(
    "transformer", "gated_transformer", {"transformer_tiny": "gated_transformer_tiny_fairseq"})
