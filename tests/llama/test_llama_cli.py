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


def lprobs_on(model, task, seed=0):
    from llama.helpers import full_lprobs, random_tokens

    return full_lprobs(model.eval(), random_tokens(len(task.dictionary), seed=seed, length=16))


def test_prune_from_gates_by_query_head_and_by_kv_group_and_eval_lm(trained_llama, lm_data_bin, tmp_path, capsys):
    from fairseq_heads.cli import main
    from fairseq_heads.gating.head_masks import apply_head_mask, head_mask_from_gates
    from fairseq_heads.pruning.gqa import kv_groups, whole_group_mask

    checkpoint = str(trained_llama / "checkpoint_last.pt")
    data = {"data": str(lm_data_bin)}
    model, task = load_model_and_task(checkpoint, data)
    by_head = head_mask_from_gates(model.eval())  # the target's 5 heads
    by_group = whole_group_mask(by_head, kv_groups(model))

    assert main(["prune", "--path", checkpoint, "--out", str(tmp_path / "query.pt"), "--from-gates"]) == 0
    assert main(["prune", "--path", checkpoint, "--out", str(tmp_path / "group.pt"), "--from-gates",
                 "--prune-unit", "kv-group"]) == 0
    printed = capsys.readouterr().out
    assert "KV-cache bytes per token" in printed and "query heads: 8 -> 5" in printed

    query_pruned, _ = load_model_and_task(str(tmp_path / "query.pt"), data)
    group_pruned, _ = load_model_and_task(str(tmp_path / "group.pt"), data)
    assert sum(b.self_attn.num_heads for b in query_pruned.decoder.layers) == 5
    assert [b.self_attn.num_heads for b in group_pruned.decoder.layers] == by_group["dec-self"].sum(1).tolist()
    # masked ≡ pruned: the gates' own decisions (query); the whole-group head mask (kv-group)
    tolerance = 1e-5
    assert (lprobs_on(query_pruned, task) - lprobs_on(model, task)).abs().max() <= tolerance
    group_masked = apply_head_mask(load_model_and_task(checkpoint, data)[0], by_group)
    assert (lprobs_on(group_pruned, task) - lprobs_on(group_masked, task)).abs().max() <= tolerance

    process = run_cli(["fairseq-eval-lm", str(lm_data_bin), "--user-dir", USER_DIR, "--path",
                       str(tmp_path / "group.pt"), "--tokens-per-sample", "64", "--max-tokens", "1024",
                       "--cpu", "--gen-subset", "valid"])
    assert process.returncode == 0, process.stderr[-3000:]
    assert re.search(r"Perplexity: [\d.]+", process.stderr + process.stdout)


def test_prune_by_importance_keeps_whole_kv_groups(trained_llama, tmp_path, capsys):
    from fairseq_heads.cli import main

    scores = tmp_path / "heads.csv"
    rows = ["type,layer,head,lrp"] + [f"dec-self,{layer},{head},{score}" for layer, head, score in
                                      [(0, 0, 0.1), (0, 1, 0.2), (0, 2, 0.9), (0, 3, 0.0),
                                       (1, 0, 0.5), (1, 1, 0.5), (1, 2, 0.05), (1, 3, 0.05)]]
    scores.write_text("\n".join(rows) + "\n")
    out = tmp_path / "pruned.pt"
    assert main(["prune", "--path", str(trained_llama / "checkpoint_last.pt"), "--out", str(out),
                 "--from-importance", str(scores), "--metric", "lrp", "--keep", "2",
                 "--prune-unit", "kv-group"]) == 0
    # group means: layer 0 (0.15, 0.45), layer 1 (0.5, 0.05): keep layer 0 group 1, layer 1 group 0
    state = torch.load(out, weights_only=False)
    layout = json.loads(state["cfg"]["model"].head_layout)
    assert layout == {"dec-self": [[2, 3], [0, 1]]}
    assert "KV heads: 4 -> 2 (50.0%)" in capsys.readouterr().out


def test_curve_removes_whole_kv_groups(trained_llama, lm_data_bin, tmp_path, capsys):
    import csv

    from fairseq_heads.cli import main

    scores = tmp_path / "heads.csv"
    values = [0.1, 0.2, 0.9, 0.0, 0.5, 0.5, 0.05, 0.05]  # group means 0.15, 0.45 | 0.5, 0.05
    scores.write_text("type,layer,head,lrp\n" + "".join(
        f"dec-self,{i // 4},{i % 4},{v}\n" for i, v in enumerate(values)))
    out = tmp_path / "curve.csv"
    assert main(["curve", str(lm_data_bin), "--path", str(trained_llama / "checkpoint_last.pt"),
                 "--scores", str(scores), "--metric", "lrp", "--steps", "0,1,2", "--prune-unit",
                 "kv-group", "--gen-subset", "valid", "--out", str(out), "--cpu"]) == 0
    rows = list(csv.DictReader(open(out)))
    assert [int(r["heads_removed"]) for r in rows] == [0, 2, 4]
    # lowest group first: layer 1's heads 2, 3 (mean 0.05), then layer 0's heads 0, 1 (0.15)
    assert rows[2]["removed_heads"] == "dec-self:1:2;dec-self:1:3;dec-self:0:0;dec-self:0:1"
    assert float(rows[0]["perplexity"]) != float(rows[2]["perplexity"])
