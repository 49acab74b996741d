"""Removing heads: physically (physical.py), from a checkpoint file (checkpoint.py), chosen by
importance scores of a heads table (importance.py), and Michel et al.'s curve (curve.py).

Training-time gating (Hard Concrete gates, head targets) is `fairseq_heads.gating`; rebuilding
a pruned model's shapes is `fairseq_heads.models.head_layout`.
"""
from .physical import (  # noqa: F401
    HeadlessAttention,
    HeadPruningError,
    apply_head_layout,
    head_layout,
    physically_prune,
)
