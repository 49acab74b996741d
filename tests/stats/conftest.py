"""A tiny translation model trained on the toy corpus, once per session (fairseq-train, CPU)."""
import os

import pytest
import torch

from tests.core.helpers import TINY_SIZES, USER_DIR, run_cli

TRAIN_UPDATES = 40


@pytest.fixture(scope="session")
def trained_checkpoint(toy_data_bin, tmp_path_factory):
    """checkpoint_last.pt of a 2+2-layer, d=32, 4-head `transformer` trained for a few updates."""
    save_dir = tmp_path_factory.mktemp("tiny_model")
    result = run_cli([
        "fairseq-train", str(toy_data_bin.data_bin), "--user-dir", USER_DIR,
        "--task", "translation_heads", "-s", "src", "-t", "tgt", "--arch", "transformer",
        *TINY_SIZES, "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.005",
        "--max-tokens", "1500", "--max-update", str(TRAIN_UPDATES), "--cpu", "--num-workers", "0",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--disable-validation",
        "--no-save-optimizer-state", "--seed", "1", "--log-format", "simple"])
    assert result.returncode == 0, result.stderr[-3000:]
    path = os.path.join(save_dir, "checkpoint_last.pt")
    assert os.path.isfile(path), os.listdir(save_dir)
    return path


def save_args_checkpoint(model, args, path) -> str:
    """Save an in-process model the way fairseq's loader accepts (args are upgraded to a cfg)."""
    torch.save({"args": args, "model": model.state_dict(), "extra_state": {},
                "optimizer_history": [{"criterion_name": "CrossEntropyCriterion", "best_loss": None,
                                       "optimizer_name": "Adam", "lr_scheduler_state": {},
                                       "num_updates": 0}]}, path)
    return str(path)
