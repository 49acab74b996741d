"""`gated_transformer_lm`: fairseq's decoder-only Transformer LM with Hard Concrete head gates
(its attention blocks are `dec-self`).

Every architecture fairseq registers for `transformer_lm` has a gated counterpart named `gated_` +
its name (`gated_transformer_lm_gpt`, `gated_transformer_lm_gpt2_small`, ...), derived from
fairseq's registry.
"""
import dataclasses

from fairseq.models import register_model
from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig

from .gate_options import gate_fields
from .gated_transformer import (
    GatedCheckpointLoading,
    gate_built_model,
    parse_attention_types,
    register_gated_counterparts,
)


# fairseq's LM options + the gate options (gate_options.py; an LM's one type is dec-self) and
# head_layout (physical pruning); built from the one declaration of the gate options.
GatedTransformerLanguageModelConfig = dataclasses.make_dataclass(
    "GatedTransformerLanguageModelConfig",
    gate_fields({"gated_attention": "dec-self"}, leave_out=("freeze_decoder",)),
    bases=(TransformerLanguageModelConfig,))
GatedTransformerLanguageModelConfig.__module__ = __name__


@register_model("gated_transformer_lm", dataclass=GatedTransformerLanguageModelConfig)
class GatedTransformerLanguageModel(GatedCheckpointLoading, TransformerLanguageModel):
    @classmethod
    def build_model(cls, args, task):
        if parse_attention_types(args.gated_attention) != {"dec-self"}:
            raise ValueError("--gated-attention: a decoder-only language model has only dec-self attention")
        return gate_built_model(super().build_model(args, task), args)


def lm_gate_defaults(args) -> None:
    """The options this config adds to fairseq's, for callers that build from a Namespace (fairseq's
    own CLIs fill them in from the dataclass)."""
    plain = {f.name for f in dataclasses.fields(TransformerLanguageModelConfig)}
    for option in dataclasses.fields(GatedTransformerLanguageModelConfig):
        if option.name not in plain and getattr(args, option.name, None) is None:
            setattr(args, option.name, option.default)


GATED_ARCHITECTURES = register_gated_counterparts("transformer_lm", "gated_transformer_lm",
                                                  defaults=lm_gate_defaults)
