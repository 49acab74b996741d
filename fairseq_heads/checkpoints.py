"""Fairseq checkpoints: checking and loading a file, the model options it holds, and loading a
model with its task (data directory and languages overridden), as every command needs them.
"""
import copy
import os
import zipfile
from argparse import Namespace
from typing import Dict, NamedTuple, Optional, Tuple

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


def trained_head_mask_file(state: dict) -> Optional[str]:
    """The --head-mask a model was trained with (recorded in its task options), if any."""
    def field(options, name):
        if options is None:
            return None
        return options.get(name) if isinstance(options, dict) else getattr(options, name, None)

    return field(field(state.get("cfg"), "task"), "head_mask") or field(state.get("args"), "head_mask")


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


LM_BREAK_MODES = ("none", "complete", "complete_doc", "eos")  # fairseq's --sample-break-mode
BLOCK_STARTS = ("eos", "bos")  # gated_llama's --block-start


class LmBlocks(NamedTuple):
    """How a language model's data is cut into blocks and what their first token reads."""
    break_mode: str  # the task's --sample-break-mode
    block_start: str  # eos | bos
    chosen_by: str  # where they come from: "checkpoint" (the model's own record) or "command line"


def _option(options, name: str):
    if options is None:
        return None
    return getattr(options, name, None) if isinstance(options, Namespace) else options.get(name)


def _has_model_option(state: dict, name: str) -> bool:
    """Does the checkpoint's model (its architecture's registered config) have option `name`?"""
    from fairseq.models import ARCH_MODEL_REGISTRY

    options = model_args(state)
    arch = _option(options, "_name") or _option(options, "arch")
    config = getattr(ARCH_MODEL_REGISTRY.get(arch), "__dataclass", None)
    return config is not None and name in getattr(config, "__dataclass_fields__", {})


def _set_model_option(state: dict, name: str, value) -> None:
    from omegaconf import open_dict

    if state.get("args") is not None:
        setattr(state["args"], name, value)
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None and not isinstance(cfg["model"], Namespace):
        with open_dict(cfg):
            cfg.model[name] = value
    elif cfg is not None and isinstance(cfg.get("model"), Namespace):
        setattr(cfg["model"], name, value)


def is_language_model_state(state: dict) -> bool:
    """A checkpoint of fairseq's language_modeling task (or a subclass of it)."""
    from fairseq.tasks import TASK_REGISTRY
    from fairseq.tasks.language_modeling import LanguageModelingTask

    cfg = state.get("cfg")
    name = _option(cfg.get("task"), "_name") if cfg is not None and cfg.get("task") is not None \
        else _option(state.get("args"), "task")
    task_class = TASK_REGISTRY.get(name)
    return task_class is not None and issubclass(task_class, LanguageModelingTask)


def apply_lm_blocks(state: dict, break_mode: Optional[str] = None,
                    block_start: Optional[str] = None) -> Optional[LmBlocks]:
    """Read a language model's data as the model was trained, into the loaded `state` (None for
    another model): `break_mode` / `block_start` when given (the command line), else what the
    model records (`block_break_mode`, `block_start`: `import-hf` sets them for models trained
    with <s> at each document start), else the task's own break mode and </s>. ValueError of one
    line for an unknown mode, or <s> asked of a model that has no such option."""
    if not is_language_model_state(state):
        return None
    if break_mode is not None and break_mode not in LM_BREAK_MODES:
        raise CheckpointFileError(f"--sample-break-mode: expected one of {', '.join(LM_BREAK_MODES)}, "
                                  f"got {break_mode!r}")
    if block_start is not None and block_start not in BLOCK_STARTS:
        raise CheckpointFileError(f"--block-start: expected one of {', '.join(BLOCK_STARTS)}, "
                                  f"got {block_start!r}")
    if block_start == "bos" and not _has_model_option(state, "block_start"):
        raise CheckpointFileError("--block-start bos: only gated_llama models read <s> at a block's "
                                  "start (this model reads fairseq's </s>)")
    options = model_args(state)
    recorded_mode, recorded_start = _option(options, "block_break_mode"), _option(options, "block_start")
    chosen_by = "command line" if break_mode is not None or block_start is not None else "checkpoint"
    cfg, args = state.get("cfg"), state.get("args")
    task_mode = (_option(cfg.get("task"), "sample_break_mode") if cfg is not None and cfg.get("task")
                 is not None else _option(args, "sample_break_mode"))
    mode = str(break_mode or recorded_mode or task_mode or "none")
    start = block_start or recorded_start or "eos"
    set_task_option(state, "sample_break_mode", mode)
    if _has_model_option(state, "block_start"):
        _set_model_option(state, "block_start", start)
    return LmBlocks(mode, start, chosen_by)


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
