"""Make the last fairseq release work with the torch and numpy of today.

1. Checkpoints under torch >= 2.6.

torch 2.6 made `torch.load(weights_only=True)` the default; fairseq checkpoints hold argparse
Namespaces and OmegaConf configs, which that refuses. Upstream fairseq fixed this after its last
release (passing weights_only=False in checkpoint_utils); we do the same, scoped to fairseq's
checkpoint module, when the user dir is imported — which every fairseq CLI does for --user-dir
before it loads a checkpoint.

2. numpy 2 removed `np.compat`; fairseq's TokenBlockDataset (language-model data) still asks for
`np.compat.long`, which was int64 on the platforms we run on.
"""
import types

import numpy as np
import torch
from fairseq import checkpoint_utils


class _TorchLoadingTrustedCheckpoints(types.ModuleType):
    """torch, except that load() defaults to weights_only=False (fairseq checkpoints are pickles
    the user chose to load, as before torch 2.6)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def load(f, *args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return torch.load(f, *args, **kwargs)


def patch_fairseq_checkpoint_loading() -> None:
    if not isinstance(checkpoint_utils.torch, _TorchLoadingTrustedCheckpoints):
        checkpoint_utils.torch = _TorchLoadingTrustedCheckpoints("torch")


def patch_numpy_compat() -> None:
    if not hasattr(np, "compat"):
        np.compat = types.SimpleNamespace(long=np.int64)


def load_checkpoint(path: str) -> dict:
    """Load a fairseq checkpoint file to CPU (our own tools' entry point for raw state)."""
    patch_fairseq_checkpoint_loading()
    return checkpoint_utils.load_checkpoint_to_cpu(path)
