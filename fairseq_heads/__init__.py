"""fairseq-heads: what each attention head does, and pruning the heads that do nothing.

Importing this package (what `fairseq-* --user-dir` does) registers the `gated_transformer`
model, the `label_smoothed_cross_entropy_l0` criterion and the `translation_heads` task.
"""
__version__ = "0.1.0"

from .compat import patch_fairseq_checkpoint_loading, patch_numpy_compat

patch_fairseq_checkpoint_loading()
patch_numpy_compat()

from . import criterions, models, optim, tasks  # noqa: E402,F401  (registration)
