"""`SCALE=toy recipes/multi30k_en_de/gpu.sh`: the GPU script's steps (baseline, stats on a parsed
test set, an encoder-only L0 sweep, the curve, the report) end to end on the toy corpus, and the
committed subset it publishes: everything the report needs, no checkpoint, no absolute path.
(The GPU run itself needs a GPU; CI has none.)"""
import csv
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from fairseq_heads.report.model_result import parse_generate_output

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "recipes", "multi30k_en_de", "gpu.sh")
LAMBDAS = ("0.002", "0.05")  # the toy scale's sweep


def run_gpu_script(results, docs, **extra_env):
    env = dict(os.environ, SCALE="toy", RESULTS=str(results), DOCS=str(docs), THREADS="1")
    env.update(extra_env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for name in ("LAMBDAS_ENC", "LAMBDAS_ALL", "PROTOCOL", "ANALYSIS"):
        if name not in extra_env:
            env.pop(name, None)
    return subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_toy")
    # a user's PROTOCOL=converged or ANALYSIS=no does not change what the script runs
    process = run_gpu_script(root / "results", root / "docs", PROTOCOL="converged", ANALYSIS="no")
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return root / "results", root / "docs", process


def test_every_step_ran_and_no_translation_type_was_pruned(toy_run):
    results, _, process = toy_run
    ran = re.findall(r"^run  (\S+)$", process.stdout, re.M)
    sweep = [step for lam in LAMBDAS for step in (f"enc_l0_{lam}", f"bleu_enc_l0_{lam}")]
    assert ran == ["data", "baseline", "bleu_baseline", *sweep, "pud", "stats", "curve", "report"]
    for lam in LAMBDAS:
        with open(results / "results" / f"enc_l0_{lam}" / "result.json") as f:
            result = json.load(f)
        assert result["kind"] == "encoder_l0" and result["protocol"] == "quick"
        assert result["heads_kept"]["dec-self"] == result["heads_kept"]["enc-dec"] == 8


def test_the_committed_subset_holds_the_report_and_no_checkpoint(toy_run):
    results, docs, _ = toy_run
    files = sorted(os.path.relpath(os.path.join(d, f), docs) for d, _, fs in os.walk(docs) for f in fs)
    assert not [f for f in files if f.endswith(".pt") or f.startswith(("data/", "logs/"))]
    for name in ("tables.md", "report.html", "stats/baseline/heads.csv", "stats/baseline/heads.json",
                 "curve/curve.csv", "figures/encoder_pruning.png", "run_info.json",
                 "results/baseline/result.json", *(f"results/enc_l0_{lam}/result.json" for lam in LAMBDAS)):
        assert name in files
    assert (docs / "tables.md").read_text() == (results / "tables.md").read_text()
    # the translations travel too, as their T- and D- lines: the report renders again from docs
    with gzip.open(docs / "results" / "baseline" / "generate.txt.gz", "rt") as f:
        published = f.read()
    generated = (results / "results" / "baseline" / "generate.txt").read_text()
    assert published == "".join(line for line in generated.splitlines(True) if line[:2] in ("T-", "D-"))
    assert parse_generate_output(published)[:2] == parse_generate_output(generated)[:2]
    with open(docs / "stats" / "baseline" / "heads.csv") as f:
        assert "syntactic_best" in next(csv.DictReader(f))  # the parsed test set was used
    for name in files:
        if not name.endswith((".png", ".gz")):
            assert str(results) not in (docs / name).read_text(), name
    info = json.loads((docs / "run_info.json").read_text())
    assert info["scale"] == "toy" and info["wall_seconds"] > 0
    assert not os.path.exists(str(docs) + ".partial")


def test_bad_scale_exits_2_before_any_step(tmp_path):
    process = run_gpu_script(tmp_path / "results", tmp_path / "docs", SCALE="h200")
    assert process.returncode == 2
    assert process.stderr.strip() == "SCALE must be gpu or toy, got h200"
    assert not (tmp_path / "results").exists() and not (tmp_path / "docs").exists()


def test_publishing_a_folder_without_a_report_exits_2_and_writes_nothing(tmp_path):
    (tmp_path / "results").mkdir()
    process = subprocess.run(["bash", os.path.join(REPO, "recipes", "publish_results.sh"),
                              str(tmp_path / "results"), str(tmp_path / "docs")],
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 2
    assert process.stderr.count("\n") == 1 and "tables.md missing" in process.stderr
    assert sorted(os.listdir(tmp_path)) == ["results"]
