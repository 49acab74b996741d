"""`gated_transformer_lm`: fairseq's decoder-only Transformer LM with Hard Concrete head gates
(its attention blocks are `dec-self`)."""
from dataclasses import dataclass, field

from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer_lm import (
    TransformerLanguageModel,
    TransformerLanguageModelConfig,
    transformer_lm_gpt,
)

from ..modules.hard_concrete import DEFAULT_INIT_LOG_ALPHA, DEFAULT_STRETCH, DEFAULT_TEMPERATURE
from .gated_transformer import add_gates, freeze_parameters, parse_attention_types


@dataclass
class GatedTransformerLanguageModelConfig(TransformerLanguageModelConfig):
    gated_attention: str = field(default="dec-self", metadata={"help": "attention types with gates (dec-self)"})
    gate_temperature: float = field(default=DEFAULT_TEMPERATURE, metadata={"help": "Hard Concrete temperature"})
    gate_stretch_low: float = field(default=DEFAULT_STRETCH[0], metadata={"help": "stretch, lower end"})
    gate_stretch_high: float = field(default=DEFAULT_STRETCH[1], metadata={"help": "stretch, upper end"})
    gate_init_log_alpha: float = field(default=DEFAULT_INIT_LOG_ALPHA, metadata={"help": "initial log-alpha (open)"})
    train_gates_only: bool = field(default=False, metadata={"help": "freeze everything but the gates"})


@register_model("gated_transformer_lm", dataclass=GatedTransformerLanguageModelConfig)
class GatedTransformerLanguageModel(TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        if parse_attention_types(args.gated_attention) != {"dec-self"}:
            raise ValueError("--gated-attention: a decoder-only language model has only dec-self attention")
        model = add_gates(super().build_model(args, task), args)
        freeze_parameters(model, args)
        return model


@register_model_architecture("gated_transformer_lm", "gated_transformer_lm_gpt")
def gated_transformer_lm_gpt(args):
    transformer_lm_gpt(args)
