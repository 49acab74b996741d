"""Physical head pruning, head targets (exactly K heads) and importance-based head selection.

Kept free of `fairseq_heads.models` imports: `gated_transformer.build_model` calls into
`physical.apply_head_layout`. Checkpoint-level helpers live in `pruning.checkpoint`.
"""
from .head_target import install_head_target, parse_head_target, remove_head_target  # noqa: F401
from .physical import (  # noqa: F401
    HeadlessAttention,
    HeadPruningError,
    apply_head_layout,
    head_layout,
    physically_prune,
)
