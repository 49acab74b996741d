"""The converged protocol on the pipeline (nmt_converged.py), at toy scale: L0 until the plateau
rule, its mask, the fixed-mask phase until patience, the layout from scratch, the result files
the report reads (both phases' update counts, seeds, the from-scratch model's origin), Michel et
al.'s heuristic at the L0 model's size with the same fine-tune, and a second seed that re-runs
nothing of the first."""
import csv
import json
import os
import re
import subprocess
import sys

import pytest

SETTINGS = ["--set", "l0.encoder_lambdas=0.002", "--set", "l0.all_lambdas=0.01", "--set", "converged.seeds=1",
            "--set", "converged.michel_metrics=grad", "--set", "converged.decode_speed=true",
            "--set", "converged.scratch_lambdas=0.01", "--set", "l0.control=false", "--set", "curve.metrics="]


def recipe(results, *extra):
    process = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "europarl_en_it",
                              "--scale", "toy", "--results", str(results), *SETTINGS, *extra],
                             capture_output=True, text=True, timeout=1500, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return re.findall(r"^run  (\S+)$", process.stdout, re.M)


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    results = tmp_path_factory.mktemp("converged") / "results"
    return results, recipe(results, "--jobs", "2")


def test_the_protocols_steps_run_in_order_of_their_inputs(converged):
    results, ran = converged
    name = "all_l0_0.01_conv_s1"
    for step in (f"{name}_l0", f"mask_{name}", name, f"bleu_{name}", f"scratch_{name}", f"bleu_scratch_{name}"):
        assert step in ran, step
    assert ran.index(f"{name}_l0") < ran.index(f"mask_{name}") < ran.index(name) < ran.index(f"bleu_{name}")
    assert ran.index(f"mask_{name}") < ran.index(f"scratch_{name}") < ran.index(f"bleu_scratch_{name}")


def test_the_result_files_carry_what_the_report_reads(converged):
    results, _ = converged
    name = "all_l0_0.01_conv_s1"
    trained = json.loads((results / "results" / name / "result.json").read_text())
    assert trained["protocol"] == "converged" and trained["seed"] == 1 and trained["kind"] == "all_l0"
    phases = trained["training"]["phases"]
    assert set(phases) == {"l0", "fixed_mask"} and trained["training"]["updates"] == sum(
        p["updates"] for p in phases.values())
    mask = json.loads((results / "masks" / name / "head_mask.json").read_text())
    kept = sum(v for rows in mask.values() for row in rows for v in row)
    assert sum(trained["heads_kept"].values()) == kept  # the fixed mask is the layout scored
    scratch = json.loads((results / "results" / f"scratch_{name}" / "result.json").read_text())
    assert scratch["kind"] == "from_scratch" and scratch["from_model"] == name
    assert scratch["heads_kept"] == trained["heads_kept"] and set(scratch["training"]["phases"]) == {"from_scratch"}
    # the L0 phase's traces travel with the model: the heads-dying figure
    assert (results / "models" / name / "gate_trace.jsonl").read_text() == \
        (results / "models" / f"{name}_l0" / "gate_trace.jsonl").read_text()
    assert "Trained vs from scratch, converged protocol, per seed" in (results / "tables.md").read_text()


def test_the_heuristic_keeps_as_many_encoder_heads_the_top_ones_by_its_metric(converged):
    results, _ = converged
    l0, heuristic = "enc_l0_0.002_conv_s1", "michel_grad_as_enc_l0_0.002_conv_s1"
    l0_mask = json.loads((results / "masks" / l0 / "head_mask.json").read_text())["enc-self"]
    mask = json.loads((results / "masks" / heuristic / "head_mask.json").read_text())["enc-self"]
    kept = sum(map(sum, mask))
    assert kept == sum(map(sum, l0_mask))
    with open(results / "stats" / "baseline" / "heads.csv") as f:
        grad = {(int(r["layer"]), int(r["head"])): float(r["grad"]) for r in csv.DictReader(f) if r["type"] == "enc-self"}
    chosen = {(layer, head) for layer, row in enumerate(mask) for head, on in enumerate(row) if on}
    assert chosen == set(sorted(grad, key=grad.get, reverse=True)[:kept])
    result = json.loads((results / "results" / heuristic / "result.json").read_text())
    assert result["kind"] == "heuristic" and result["from_model"] == l0 and result["heads_kept"]["enc-self"] == kept
    assert "L0 against heuristic pruning at equal heads, the same fine-tune" in (results / "tables.md").read_text()


def test_the_pruned_models_decoding_speed_is_measured_against_it_masked(converged):
    # also prune_checkpoint on a model trained with a --head-mask over types it does not gate
    # (its fixed gates are saved; the pruned checkpoint drops the mask and loads in fairseq)
    results, _ = converged
    report = json.loads((results / "speed" / "enc_l0_0.002_conv_s1" / "decode_speed.json").read_text())
    (result,) = report["results"]
    assert result["same_translations"] and result["predicted_speedup_flops"] >= 1
    # the sentences decoded, not the cap on them
    assert report["sentences"] == report["runs"]["unpruned"][0]["sentences"] <= report["sentence_limit"]
    assert set(result["tokens_per_s"]) == {"masked_enc_l0_0.002_conv_s1", "pruned_enc_l0_0.002_conv_s1"}
    assert not [p for p in os.listdir(results / "speed" / "enc_l0_0.002_conv_s1") if p.endswith(".pt")]
    assert "Decoding speed of the pruned models" in (results / "tables.md").read_text()


def test_a_second_seed_adds_its_models_and_reruns_nothing_of_the_first(converged):
    results, _ = converged
    ran = recipe(results, "--set", "converged.seeds=1,2")
    s2 = [f"{step}_conv_s2" for step in ("all_l0_0.01", "mask_all_l0_0.01", "bleu_all_l0_0.01", "scratch_all_l0_0.01",
                                         "bleu_scratch_all_l0_0.01", "enc_l0_0.002", "mask_enc_l0_0.002",
                                         "bleu_enc_l0_0.002", "speed_enc_l0_0.002", "mask_michel_grad_as_enc_l0_0.002",
                                         "michel_grad_as_enc_l0_0.002", "bleu_michel_grad_as_enc_l0_0.002")]
    assert sorted(ran) == sorted(s2 + ["all_l0_0.01_conv_s2_l0", "enc_l0_0.002_conv_s2_l0", "report"])
