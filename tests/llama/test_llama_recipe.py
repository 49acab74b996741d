"""`fairseq-heads recipe llama_toy --scale toy` end to end on the toy grammar (docs/llama.md):
every step's output, and re-running skips them all."""
import csv
import json
import os
import re
import subprocess
import sys

import pytest
import torch


def run_recipe(results):
    return subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "llama_toy", "--scale", "toy",
                           "--results", str(results)], capture_output=True, text=True, timeout=1200,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    results = tmp_path_factory.mktemp("llama_toy")
    process = run_recipe(results)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-3000:]
    return results, process.stdout


def perplexity(path):
    return json.loads(path.read_text())["perplexity"]


def test_trains_analyses_prunes_by_kv_group(recipe):
    results, _ = recipe
    vocabulary = len((results / "data" / "bin" / "dict.txt").read_text().splitlines()) + 4
    assert 1 < perplexity(results / "results" / "baseline" / "result.json") < vocabulary
    rows = list(csv.DictReader(open(results / "stats" / "baseline" / "heads.csv")))
    assert len(rows) == 8 and all(r["lrp"] for r in rows)
    state = torch.load(results / "models" / "pruned_l0_0.05" / "checkpoint.pt", weights_only=False)
    layout = json.loads(state["cfg"]["model"].head_layout)["dec-self"]
    kept_groups = [sorted({h // 2 for h in row}) for row in layout]  # groups {0,1}, {2,3}
    assert sum(len(g) for g in kept_groups) == 2  # --target-heads 2 counts KV groups
    assert all(len(row) == 2 * len(g) for row, g in zip(layout, kept_groups))  # whole groups
    assert perplexity(results / "results" / "l0_0.05" / "result.json") > 1
    query = torch.load(results / "models" / "pruned_query" / "checkpoint.pt", weights_only=False)
    assert sum(map(len, json.loads(query["cfg"]["model"].head_layout)["dec-self"])) == 4  # top 4 by LRP
    assert perplexity(results / "perplexity" / "pruned_query" / "result.json") > 1
    curve = list(csv.DictReader(open(results / "curves" / "lrp" / "curve.csv")))
    assert [int(r["heads_removed"]) for r in curve] == [0, 2, 4, 6]


def test_hugging_face_round_trip(recipe):
    pytest.importorskip("transformers")
    results, _ = recipe
    config = json.loads((results / "hf" / "export" / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (2, 1)


def test_rerun_skips_every_step(recipe):
    results, first = recipe
    process = run_recipe(results)
    assert process.returncode == 0
    assert not re.findall(r"^run ", process.stdout, re.M)
    assert sorted(re.findall(r"^skip (\S+) \(done\)$", process.stdout, re.M)) == sorted(
        re.findall(r"^run  (\S+)$", first, re.M))
