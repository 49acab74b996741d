"""Fairseq checkpoints: checking and loading a file, the model options it holds, and loading a
model with its task (data directory and languages overridden), as every command needs them.
"""
import copy
import os
import zipfile
from argparse import Namespace
from typing import Dict, Optional, Tuple

import torch
from fairseq import checkpoint_utils

from .compat import patch_fairseq_checkpoint_loading


class CheckpointFileError(ValueError):
    """A checkpoint path that is missing or not a fairseq checkpoint (a user-facing error)."""


def check_checkpoint_file(path: str) -> None:
    """Raise CheckpointFileError unless `path` is a fairseq checkpoint (weights and options).

    Cheap: a memory-mapped load reads the pickled structure, not the tensors (files of torch's
    zip format; an old-format file is loaded whole)."""
    if not os.path.isfile(path):
        raise CheckpointFileError(f"checkpoint not found: {path}")
    if os.path.getsize(path) == 0:
        raise CheckpointFileError(f"{path}: not a checkpoint: the file is empty")
    try:  # a file cut short has lost the zip directory at its end: it takes the second branch
        state = torch.load(path, map_location="cpu", weights_only=False,
                           mmap=zipfile.is_zipfile(path))
    except Exception as error:  # torch / pickle / zipfile errors: all mean "unreadable"
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0].split(". ")[0]
        raise CheckpointFileError(f"{path}: not a readable checkpoint (truncated or not a torch "
                                  f"file: {reason})") from None
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise CheckpointFileError(f"{path}: not a fairseq checkpoint (no 'model' weights; "
                                  f"a {type(state).__name__})")
    if state.get("cfg") is None and state.get("args") is None:
        raise CheckpointFileError(f"{path}: not a fairseq checkpoint (no model options: "
                                  f"neither 'cfg' nor 'args')")


def load_checkpoint(path: str) -> dict:
    """Load a fairseq checkpoint file to CPU (our own tools' entry point for raw state)."""
    check_checkpoint_file(path)
    return load_state(path)


def model_args(state: dict):
    """The model options of a fairseq checkpoint (hydra `cfg.model` or legacy `args`)."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None:
        return cfg["model"]
    return state.get("args")


def model_options(state: dict) -> Namespace:
    """A copy of the checkpoint's model options as a Namespace (what fairseq saves for
    argparse-style models such as `transformer` and `gated_transformer`); ValueError if none."""
    from omegaconf import OmegaConf

    args = copy.deepcopy(model_args(state))
    if args is None:
        raise CheckpointFileError("checkpoint has no model options (cfg.model / args)")
    if not isinstance(args, Namespace):  # hydra-style model config
        args = Namespace(**OmegaConf.to_container(args, resolve=True))
    return args


def data_overrides(data_bin: str, source_lang: Optional[str] = None,
                   target_lang: Optional[str] = None) -> Dict[str, str]:
    """fairseq arg overrides: the task reads `data_bin` (and these languages, when given)."""
    overrides = {"data": data_bin}
    if source_lang:
        overrides["source_lang"] = source_lang
    if target_lang:
        overrides["target_lang"] = target_lang
    return overrides


def set_task_option(state: dict, name: str, value) -> None:
    """Set one task option of a loaded state, where fairseq builds the task from it: the legacy
    `args` when the checkpoint has them (`cfg` is rebuilt from those), else `cfg.task`."""
    from omegaconf import open_dict

    if state.get("args") is not None:
        setattr(state["args"], name, value)
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("task") is not None:
        with open_dict(cfg):
            cfg.task[name] = value


def load_state(path: str, overrides: Optional[Dict[str, str]] = None) -> dict:
    """fairseq's load_checkpoint_to_cpu, with our loading patches (compat.py)."""
    patch_fairseq_checkpoint_loading()
    return checkpoint_utils.load_checkpoint_to_cpu(path, overrides)


def load_model_and_task(path: str, overrides: Optional[Dict[str, str]] = None,
                        state: Optional[dict] = None) -> Tuple[object, object]:
    """(model, task) as fairseq's CLIs build them (state: an already loaded `load_state`)."""
    if state is None:
        state = load_state(path, overrides)
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], state=state)
    return models[0], task


def place_model(model, cpu: bool = False) -> bool:
    """Move `model` to CUDA unless `cpu` (--cpu) is set or there is no CUDA; True when it is on
    CUDA now (its batches must follow it there)."""
    use_cuda = torch.cuda.is_available() and not cpu
    if use_cuda:
        model.cuda()
    return use_cuda


def is_language_model(model) -> bool:
    """A decoder-only language model (fairseq's FairseqLanguageModel)."""
    from fairseq.models import FairseqLanguageModel

    return isinstance(model, FairseqLanguageModel)
