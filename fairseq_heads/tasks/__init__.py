from . import translation_heads  # noqa: F401
