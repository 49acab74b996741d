"""One language model's result (`fairseq-heads lm-result`): its perplexity on a subset, each
block's loss and the dec-self heads it has. The file this makes is read by the LM recipe's
report (`report/lm_report.py`), which loads no model:

    {"name": "l0_0.01", "kind": "baseline" | "l0" | "from_scratch", "l0_lambda": 0.01,
     "from_model": null, "checkpoint": "models/l0_0.01/pruned.pt", "subset": "test",
     "perplexity": 123.4, "updates": 2300, "parameters": 5123456,
     "kept": [[0, 3, 5], [1, 2], ...],     # per layer, original indices of the dec-self heads left
     "heads_kept": 17, "heads_total": 24}
"""
import json
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ..files import write_text_atomic

MODEL_KINDS = ("baseline", "l0", "from_scratch")


class LMResultError(ValueError):
    pass


class BlockLosses(NamedTuple):
    """A model's loss on each block of a subset, in sample-id order (curve.block_losses); its file
    is report/block_losses.py's."""
    subset: str
    nll: np.ndarray      # summed NLL of each block, nats
    tokens: np.ndarray   # its target tokens


def lm_model_result(name: str, kind: str, checkpoint: str, data_bin: str, subset: str,
                    results_dir: str, l0_lambda: Optional[float] = None,
                    from_model: Optional[str] = None, batch_size: Optional[int] = 16,
                    max_tokens: Optional[int] = None, cpu: bool = False,
                    break_mode: Optional[str] = None,
                    block_start: Optional[str] = None) -> Tuple[Dict[str, object], BlockLosses]:
    """Perplexity of `checkpoint` on `subset` (teacher-forced blocks, as fairseq-eval-lm) and the
    dec-self heads it has (a pruned checkpoint's layout, less the heads closed by the --head-mask it
    was trained with, if any), and each block's loss (`block_losses.json`, for paired bootstraps
    over the test set). On CUDA when there is one, unless `cpu`. The blocks are read as the model
    was trained, or as `break_mode` / `block_start` say (`checkpoints.apply_lm_blocks`)."""
    from ..checkpoints import (apply_lm_blocks, data_overrides, is_language_model, load_model_and_task,
                               load_state, model_args, place_model, trained_head_mask_file)
    from ..gating.head_masks import load_head_mask
    from ..models.head_layout import head_layout
    from .curve import block_losses, perplexity_of_blocks

    if kind not in MODEL_KINDS:
        raise LMResultError(f"--kind: {kind!r} is not one of {', '.join(MODEL_KINDS)}")
    state = load_state(checkpoint, data_overrides(data_bin))
    blocks = apply_lm_blocks(state, break_mode, block_start)
    if blocks is None:
        raise LMResultError(f"{checkpoint}: not a decoder-only language model")
    model, task = load_model_and_task(checkpoint, state=state)
    if not is_language_model(model):
        raise LMResultError(f"{checkpoint}: not a decoder-only language model")
    layout = head_layout(model)["dec-self"]
    mask_file = trained_head_mask_file(state)
    if mask_file:  # trained with --head-mask (a layout from scratch): its masked heads are not kept
        layout = masked_layout(layout, load_head_mask(mask_file)["dec-self"])
    total_per_layer = int(model_args(state).decoder_attention_heads)  # before any pruning
    place_model(model, cpu)
    nll, tokens = block_losses(model, task, subset, batch_size, max_tokens=max_tokens)
    result = {
        "name": name, "kind": kind, "l0_lambda": l0_lambda, "from_model": from_model,
        "checkpoint": os.path.relpath(os.path.abspath(checkpoint), os.path.abspath(results_dir)),
        "subset": subset, "perplexity": perplexity_of_blocks(nll, tokens, subset),
        "blocks": {"sample_break_mode": blocks.break_mode, "block_start": blocks.block_start,
                   "chosen_by": blocks.chosen_by},
        "updates": (state.get("optimizer_history") or [{}])[-1].get("num_updates"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "kept": layout, "heads_kept": sum(len(row) for row in layout),
        "heads_total": len(layout) * int(total_per_layer),
    }
    return result, BlockLosses(subset, nll, tokens)


def masked_layout(layout: List[List[int]], mask_rows) -> List[List[int]]:
    """The heads of `layout` (original indices per layer) that a head mask keeps open."""
    return [[h for h in heads if bool(mask_rows[layer][h])] for layer, heads in enumerate(layout)]


def write_lm_result(result: Dict[str, object], path: str) -> None:
    write_text_atomic(path, json.dumps(result, indent=1) + "\n")
