"""`gated_llama` through fairseq's own CLIs: fairseq-train (language_modeling_heads, the L0
criterion with --target-heads, a gate trace), fairseq-eval-lm, and `fairseq-heads gates`."""
import json
import re

import pytest
import torch

from core.helpers import USER_DIR, run_cli
from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.gating.gated_attention import iter_gates


@pytest.fixture(scope="module")
def trained_llama(lm_data_bin, tmp_path_factory):
    """gated_llama_tiny (4 query heads, 2 KV heads per layer) trained 40 updates with the L0
    penalty and a target of 5 heads."""
    save_dir = tmp_path_factory.mktemp("llama_train")
    process = run_cli([
        "fairseq-train", str(lm_data_bin), "--user-dir", USER_DIR, "--task", "language_modeling_heads",
        "--arch", "gated_llama_tiny", "--tokens-per-sample", "64", "--sample-break-mode", "none",
        "--max-tokens", "1024", "--criterion", "cross_entropy_l0", "--l0-lambda", "0.01",
        "--target-heads", "5", "--optimizer", "gate_adam", "--lr", "3e-3", "--gate-lr-scale", "10",
        "--max-update", "40", "--cpu", "--num-workers", "0", "--save-dir", str(save_dir),
        "--no-epoch-checkpoints", "--disable-validation", "--no-save-optimizer-state", "--seed", "1",
        "--log-format", "simple", "--log-interval", "10",
        "--gate-trace", str(save_dir / "gates.jsonl"), "--gate-trace-interval", "10"])
    assert process.returncode == 0, process.stderr[-3000:]
    return save_dir


def test_trains_with_l0_and_target_heads_and_traces_gates(trained_llama, lm_data_bin):
    model, _ = load_model_and_task(str(trained_llama / "checkpoint_last.pt"), {"data": str(lm_data_bin)})
    gates = [g for _, _, g in iter_gates(model.eval())]
    assert [g.num_gates for g in gates] == [4, 4]
    assert sum(int(g.is_open().sum()) for g in gates) == 5  # the target's top-K rule
    trace = [json.loads(line) for line in open(trained_llama / "gates.jsonl")]
    assert trace and len(json.dumps(trace[-1])) > 0
    assert model.decoder.layers[0].self_attn.num_kv_heads == 2


def test_eval_lm_scores_it(trained_llama, lm_data_bin):
    process = run_cli(["fairseq-eval-lm", str(lm_data_bin), "--user-dir", USER_DIR, "--path",
                       str(trained_llama / "checkpoint_last.pt"), "--tokens-per-sample", "64",
                       "--max-tokens", "1024", "--cpu", "--gen-subset", "valid"])
    assert process.returncode == 0, process.stderr[-3000:]
    perplexity = float(re.search(r"Perplexity: ([\d.]+)", process.stderr + process.stdout).group(1))
    vocabulary = len(open(lm_data_bin / "dict.txt").readlines()) + 4
    assert 1 < perplexity < vocabulary  # it learnt something in 40 updates


def test_gates_command_lists_every_query_head(trained_llama):
    process = run_cli(["fairseq-heads", "gates", str(trained_llama / "checkpoint_last.pt")])
    assert process.returncode == 0, process.stderr
    assert len(re.findall(r"^dec-self\s+\d", process.stdout, re.M)) == 8
