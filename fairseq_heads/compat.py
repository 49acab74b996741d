"""Make the last fairseq release work with the torch and numpy of today.

1. Checkpoints under torch >= 2.6.

torch 2.6 made `torch.load(weights_only=True)` the default; fairseq checkpoints hold argparse
Namespaces and OmegaConf configs, which that refuses. Upstream fairseq fixed this after its last
release (passing weights_only=False in checkpoint_utils); we do the same, scoped to fairseq's
checkpoint module, when the user dir is imported — which every fairseq CLI does for --user-dir
before it loads a checkpoint. Data-parallel workers other than rank 0 receive the checkpoint
state from rank 0 as a pickle (fairseq.distributed.utils.broadcast_object, torch.load of a byte
buffer), so that module's torch.load gets weights_only=False too.

2. numpy 2 removed `np.compat`; fairseq's TokenBlockDataset (language-model data) still asks for
`np.compat.long`, which was int64 on the platforms we run on.

3. The head counts a checkpoint was trained with are noted on its weights when fairseq loads it
(`CHECKPOINT_HEADS`), so that a gated model refuses plain weights of other head counts (the
weight shapes do not show how q/k/v are split into heads; see models/gated_transformer.py).

4. A file that is not a checkpoint (empty, truncated by a kill, or some other torch file) makes
torch raise deep inside fairseq; `checkpoints.check_checkpoint_file` says so in one line naming
the file, before any work, at the entry of each command that takes a checkpoint.
"""
import argparse
import types

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq.distributed import utils as distributed_utils


CHECKPOINT_HEADS = "fairseq_heads_checkpoint_heads"  # attribute of a loaded state["model"]


def _option(options, name):
    if options is None or isinstance(options, argparse.Namespace):
        return getattr(options, name, None)
    try:
        return options.get(name)  # dict, OmegaConf DictConfig
    except Exception:
        return getattr(options, name, None)


def record_checkpoint_heads(state, source: str = "") -> None:
    """Note {"encoder"/"decoder": heads, "path": source} of a loaded checkpoint on its weights."""
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        return
    cfg = state.get("cfg")
    options = _option(cfg, "model") if cfg is not None else None
    options = options if options is not None else state.get("args")
    heads = {side: _option(options, f"{side}_attention_heads") for side in ("encoder", "decoder")}
    try:
        setattr(state["model"], CHECKPOINT_HEADS, dict(heads, path=source))
    except AttributeError:  # a plain dict takes no attributes: nothing to check against
        pass


class _TorchLoadingTrustedPickles(types.ModuleType):
    """torch, except that load() defaults to weights_only=False (fairseq checkpoints are pickles
    the user chose to load, as before torch 2.6; rank 0's broadcasts are those pickles)."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def load(f, *args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return torch.load(f, *args, **kwargs)


class _TorchLoadingTrustedCheckpoints(_TorchLoadingTrustedPickles):
    """The same, noting the head counts of each loaded checkpoint (3. above)."""

    @staticmethod
    def load(f, *args, **kwargs):
        state = _TorchLoadingTrustedPickles.load(f, *args, **kwargs)
        record_checkpoint_heads(state, getattr(f, "name", f if isinstance(f, str) else ""))
        return state


def patch_fairseq_checkpoint_loading() -> None:
    if not isinstance(checkpoint_utils.torch, _TorchLoadingTrustedCheckpoints):
        checkpoint_utils.torch = _TorchLoadingTrustedCheckpoints("torch")
    if not isinstance(distributed_utils.torch, _TorchLoadingTrustedPickles):
        distributed_utils.torch = _TorchLoadingTrustedPickles("torch")


def patch_numpy_compat() -> None:
    if not hasattr(np, "compat"):
        np.compat = types.SimpleNamespace(long=np.int64)
