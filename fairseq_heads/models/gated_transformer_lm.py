"""`gated_transformer_lm`: fairseq's decoder-only Transformer LM with Hard Concrete head gates
(its attention blocks are `dec-self`).

Every architecture fairseq registers for `transformer_lm` has a gated counterpart named `gated_` +
its name (`gated_transformer_lm_gpt`, `gated_transformer_lm_gpt2_small`, ...), derived from
fairseq's registry.
"""
import dataclasses
from dataclasses import dataclass, field
from typing import Optional

from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig

from ..modules.hard_concrete import DEFAULT_INIT_LOG_ALPHA, DEFAULT_STRETCH, DEFAULT_TEMPERATURE
from .gated_transformer import (
    add_gates,
    check_plain_checkpoint_heads,
    freeze_parameters,
    parse_attention_types,
    register_gated_counterparts,
)


@dataclass
class GatedTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    gated_attention: str = field(default="dec-self", metadata={"help": "attention types with gates (dec-self)"})
    gate_temperature: float = field(default=DEFAULT_TEMPERATURE, metadata={"help": "Hard Concrete temperature"})
    gate_stretch_low: float = field(default=DEFAULT_STRETCH[0], metadata={"help": "stretch, lower end"})
    gate_stretch_high: float = field(default=DEFAULT_STRETCH[1], metadata={"help": "stretch, upper end"})
    gate_init_log_alpha: float = field(default=DEFAULT_INIT_LOG_ALPHA, metadata={"help": "initial log-alpha (open)"})
    train_gates_only: bool = field(default=False, metadata={"help": "freeze everything but the gates"})
    # --- physical pruning (fairseq_heads/pruning) ---
    head_layout: Optional[str] = field(
        default=None, metadata={"help": "pruned attention shapes, written by `fairseq-heads prune` "
                                        "(kept original head indices per layer)"})


@register_model("gated_transformer_lm", dataclass=GatedTransformerLanguageModelConfig)
class GatedTransformerLanguageModel(TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        if parse_attention_types(args.gated_attention) != {"dec-self"}:
            raise ValueError("--gated-attention: a decoder-only language model has only dec-self attention")
        model = add_gates(super().build_model(args, task), args)
        # --- physical pruning: a pruned checkpoint's smaller blocks (see gated_transformer.py) ---
        from ..pruning.physical import apply_head_layout  # lazy: pruning.checkpoint imports this module
        model = apply_head_layout(model, args)
        freeze_parameters(model, args)
        return model

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        check_plain_checkpoint_heads(self, state_dict)
        return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)


def lm_gate_defaults(args) -> None:
    """The options this config adds to fairseq's, for callers that build from a Namespace (fairseq's
    own CLIs fill them in from the dataclass)."""
    plain = {f.name for f in dataclasses.fields(TransformerLanguageModelConfig)}
    for option in dataclasses.fields(GatedTransformerLanguageModelConfig):
        if option.name not in plain and getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


GATED_ARCHITECTURES = register_gated_counterparts("transformer_lm", "gated_transformer_lm",
                                                  defaults=lm_gate_defaults)
