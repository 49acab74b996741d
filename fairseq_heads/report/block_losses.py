"""A language model's loss on each block of its test subset (`results/<model>/block_losses.json`,
written by `lm-result`): the units over which `significance.bootstrap_log_perplexity` resamples
the test set, so that perplexity differences get paired intervals as BLEU differences do."""
import json
import os
from typing import Optional

import numpy as np

from ..files import write_text_atomic
from ..pruning.lm_result import BlockLosses


BLOCK_LOSSES = "block_losses.json"


def write_block_losses(blocks: BlockLosses, path: str) -> None:
    write_text_atomic(path, json.dumps({"subset": blocks.subset, "nll": [round(float(x), 6) for x in blocks.nll],
                                        "tokens": [int(x) for x in blocks.tokens]}) + "\n")


def read_block_losses(results_dir: str, name: str) -> Optional[BlockLosses]:
    """RESULTS/results/NAME/block_losses.json; None for a result file written before it existed."""
    path = os.path.join(results_dir, "results", name, BLOCK_LOSSES)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    return BlockLosses(doc["subset"], np.asarray(doc["nll"], dtype=np.float64),
                       np.asarray(doc["tokens"], dtype=np.int64))
