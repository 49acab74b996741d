from . import gated_transformer  # noqa: F401
