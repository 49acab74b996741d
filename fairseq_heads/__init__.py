"""fairseq-heads: what each attention head does, and pruning the heads that do nothing.

Importing this package (what `fairseq-* --user-dir` does) registers with fairseq:
- models `gated_transformer`, `gated_transformer_lm` and `gated_llama` (with their `gated_*`
  architectures),
- criteria `label_smoothed_cross_entropy_l0` and `cross_entropy_l0`,
- tasks `translation_heads` and `language_modeling_heads`,
- the optimizer `gate_adam`.
"""
__version__ = "0.1.0"

from .compat import patch_fairseq_checkpoint_loading, patch_numpy_compat

patch_fairseq_checkpoint_loading()
patch_numpy_compat()

from . import criterions, models, optim, tasks  # noqa: E402,F401  (registration)
