"""recipes/llama_toy/run.sh end to end on the toy grammar (docs/llama.md): every step's output,
and re-running skips them all."""
import csv
import json
import os
import re
import subprocess
import sys

import pytest
import torch

RECIPE = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "llama_toy", "run.sh")


def run_recipe(work):
    env = dict(os.environ, WORK=str(work), THREADS="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return subprocess.run(["bash", RECIPE], env=env, capture_output=True, text=True, timeout=1200)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    work = tmp_path_factory.mktemp("llama_toy")
    process = run_recipe(work)
    assert process.returncode == 0, process.stdout[-2000:] + process.stderr[-3000:]
    return work, process.stdout


def perplexity(path):
    return float(re.search(r"Perplexity: ([\d.]+)", path.read_text()).group(1))


def test_trains_analyses_prunes_by_kv_group(recipe):
    work, _ = recipe
    vocabulary = len((work / "data" / "bin" / "dict.txt").read_text().splitlines()) + 4
    assert 1 < perplexity(work / "baseline" / "perplexity.txt") < vocabulary
    rows = list(csv.DictReader(open(work / "stats" / "heads.csv")))
    assert len(rows) == 8 and all(r["lrp"] for r in rows)
    state = torch.load(work / "pruned_kv_group.pt", weights_only=False)
    layout = json.loads(state["cfg"]["model"].head_layout)["dec-self"]
    kept_groups = [sorted({h // 2 for h in row}) for row in layout]  # groups {0,1}, {2,3}
    assert sum(len(g) for g in kept_groups) == 2  # --target-heads 2 counts KV groups
    assert all(len(row) == 2 * len(g) for row, g in zip(layout, kept_groups))  # whole groups
    assert perplexity(work / "pruned_kv_group.perplexity.txt") > 1
    curve = list(csv.DictReader(open(work / "curve_kv_group.csv")))
    assert [int(r["heads_removed"]) for r in curve] == [0, 2, 4, 6]


def test_hugging_face_round_trip(recipe):
    pytest.importorskip("transformers")
    work, _ = recipe
    config = json.loads((work / "hf" / "export" / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (2, 1)


def test_rerun_skips_every_step(recipe):
    work, _ = recipe
    process = run_recipe(work)
    assert process.returncode == 0
    assert "== " not in process.stdout and process.stdout.count("skip: ") >= 7
