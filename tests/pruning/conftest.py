"""Checkpoints shared by the pruning tests: a --target-heads run and a plain transformer."""
import pytest
import torch
from fairseq import options

from core.helpers import TINY_SIZES, USER_DIR, build_model, run_cli

ALL_TYPES = "enc-self,dec-self,enc-dec"
TARGET = 10


@pytest.fixture(scope="session")
def target_run(toy_data_bin, tmp_path_factory):
    """(checkpoint, log) of 70 updates of a tiny gated model with --target-heads 10 (of 24)."""
    save_dir = tmp_path_factory.mktemp("target_heads")
    process = run_cli([
        "fairseq-train", str(toy_data_bin.data_bin), "--user-dir", USER_DIR, "--task", "translation_heads",
        "-s", "src", "-t", "tgt", "--cpu", "--num-workers", "0", "--seed", "1", *TINY_SIZES,
        "--share-all-embeddings", "--arch", "gated_transformer", "--gated-attention", ALL_TYPES,
        "--dropout", "0.1", "--criterion", "label_smoothed_cross_entropy_l0", "--label-smoothing", "0.1",
        "--target-heads", str(TARGET), "--optimizer", "gate_adam", "--lr", "1e-3", "--gate-lr-scale", "100",
        "--lr-scheduler", "fixed", "--max-update", "70", "--max-tokens", "1500", "--save-dir", str(save_dir),
        "--no-epoch-checkpoints", "--log-format", "json", "--log-interval", "10", "--no-progress-bar",
        "--max-valid-steps", "1"])
    assert process.returncode == 0, process.stderr[-3000:]
    return save_dir / "checkpoint_last.pt", process.stdout + process.stderr


@pytest.fixture(scope="session")
def plain_checkpoint(toy_data_bin, tmp_path_factory):
    """An untrained plain `transformer` saved in-process (legacy layout: options as `args`)."""
    path = tmp_path_factory.mktemp("plain") / "plain.pt"
    torch.manual_seed(0)
    extra = ["--share-all-embeddings", "--user-dir", USER_DIR]
    _, model = build_model(toy_data_bin.data_bin, "transformer", extra, task="translation")
    with torch.no_grad():  # non-zero out_proj biases, so that a removed layer is visible
        for name, parameter in model.named_parameters():
            if name.endswith("out_proj.bias"):
                parameter.normal_(0, 0.1)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(toy_data_bin.data_bin), "--task", "translation", "--arch", "transformer", "-s", "src",
        "-t", "tgt", "--cpu", "--dropout", "0", "--attention-dropout", "0", *TINY_SIZES, *extra])
    torch.save({"args": args, "model": model.state_dict(), "extra_state": {},
                "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion",
                                       "optimizer_name": "FairseqAdam", "num_updates": 0,
                                       "lr_scheduler_state": {"best": None}}]}, path)
    return path
