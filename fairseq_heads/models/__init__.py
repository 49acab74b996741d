from . import gated_llama, gated_transformer, gated_transformer_lm  # noqa: F401
