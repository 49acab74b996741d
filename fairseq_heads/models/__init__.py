from . import gated_transformer, gated_transformer_lm  # noqa: F401
