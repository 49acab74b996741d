from . import language_modeling_heads, translation_heads  # noqa: F401
