"""End to end: `fairseq-heads recipe multi30k_en_de --scale toy` (synthetic corpus, 2+2 layers
d=32, 20-30 updates per training) writes every table and figure; a re-run skips every step;
more λs run only their own steps; the converged protocol on the same folder; a step that fails
leaves no done marker and no result behind. `wmt_en_ru --scale toy` is the same config: its
selection and its missing-corpus check are tested here without a second run.

Takes a few minutes on 2 CPU cores (mostly the trainings, each its own Python process).
"""
import base64
import contextlib
import csv
import glob
import io
import json
import os
import re
import subprocess
import sys
import time

import pytest

LAMBDA = "0.01"  # the toy scale's: one lambda per sweep
MODELS = ("baseline", f"enc_l0_{LAMBDA}", f"all_l0_{LAMBDA}", f"scratch_all_l0_{LAMBDA}")
STEPS = ["data", "baseline", "bleu_baseline", "stats", "syntax_stats", "parsed_set_stats", f"enc_l0_{LAMBDA}",
         f"bleu_enc_l0_{LAMBDA}", f"all_l0_{LAMBDA}", f"bleu_all_l0_{LAMBDA}", "curve_grad", f"mask_all_l0_{LAMBDA}",
         f"scratch_all_l0_{LAMBDA}", f"bleu_scratch_all_l0_{LAMBDA}", "report"]
FIGURES = ("encoder_pruning.png", "heads_kept_by_type.png", "gate_trace.png", "open_heads.png", "survivors.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_recipe(results, *settings, recipe="multi30k_en_de"):
    started = time.monotonic()
    process = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", recipe, "--scale", "toy",
                              "--results", str(results), *settings], capture_output=True, text=True, timeout=1800,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
    return process, time.monotonic() - started


def recipe_in_process(*argv):
    """`fairseq-heads recipe ARGV` in this process: (exit status, stdout, stderr)."""
    from fairseq_heads.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["recipe", *map(str, argv)])
    return status, out.getvalue(), err.getvalue()


def ran(process):
    return re.findall(r"^run  (\S+)$", process.stdout, re.M)


@pytest.fixture(scope="module")
def toy_results(tmp_path_factory):
    results = tmp_path_factory.mktemp("recipe") / "multi30k_en_de_toy"
    process, _ = run_recipe(results)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return results, process


def test_every_step_ran_each_after_its_inputs(toy_results):
    results, process = toy_results
    order = ran(process)
    assert sorted(order) == sorted(STEPS)
    for before, after in (("data", "baseline"), ("baseline", "bleu_baseline"), ("stats", "curve_grad"),
                          (f"all_l0_{LAMBDA}", f"mask_all_l0_{LAMBDA}"),
                          (f"mask_all_l0_{LAMBDA}", f"scratch_all_l0_{LAMBDA}"),
                          (f"scratch_all_l0_{LAMBDA}", f"bleu_scratch_all_l0_{LAMBDA}")):
        assert order.index(before) < order.index(after), (before, after)
    assert order[-1] == "report"
    assert sorted(os.listdir(results / ".steps")) == sorted(f"{step}.json" for step in STEPS)
    assert not glob.glob(str(results / "**" / "*.partial"), recursive=True)
    assert not glob.glob(str(results / ".*tmp*")) and not glob.glob(str(results / "figures" / ".*"))


def test_result_files(toy_results):
    results, _ = toy_results
    found = {}
    for name in MODELS:
        with open(results / "results" / name / "result.json") as f:
            found[name] = json.load(f)
        result = found[name]
        assert isinstance(result["bleu"], float) and 0 <= result["bleu"] <= 100
        assert result["sacrebleu_signature"].startswith("nrefs:1|")
        assert result["sentences"] > 0
        assert set(result["heads_kept"]) == {"enc-self", "dec-self", "enc-dec"}
        assert all(result["heads_total"][t] == 8 for t in result["heads_total"])  # 2 layers x 4 heads
        assert result["checkpoint"].startswith(f"models/{name}/checkpoint_")  # relative to the results
    assert found["baseline"]["heads_source"] == "all"
    assert found[f"enc_l0_{LAMBDA}"]["kind"] == "encoder_l0"
    assert found[f"enc_l0_{LAMBDA}"]["heads_kept"]["dec-self"] == 8  # only the encoder is gated
    assert found[f"all_l0_{LAMBDA}"]["heads_source"] == "gates"
    # the from-scratch model was trained with exactly the heads the pruned model kept
    scratch, pruned = found[f"scratch_all_l0_{LAMBDA}"], found[f"all_l0_{LAMBDA}"]
    assert scratch["heads_source"] == "head_mask" and scratch["from_model"] == pruned["name"]
    assert scratch["kept"] == pruned["kept"] and scratch["protocol"] == "quick"
    assert scratch["head_mask"] == f"masks/all_l0_{LAMBDA}/head_mask.json"
    with open(results / "masks" / f"all_l0_{LAMBDA}" / "head_mask.json") as f:
        assert json.load(f) == pruned["kept"]


def test_statistics_and_curve(toy_results):
    results, _ = toy_results
    heads = {}
    for stats in ("baseline", "syntax", "parsed_set"):
        with open(results / "stats" / stats / "heads.csv") as f:
            heads[stats] = list(csv.DictReader(f))
        assert len(heads[stats]) == 24
    assert "syntactic_best" in heads["syntax"][0]  # the test split with its gold parses
    # syntax.compare: the in-domain metrics on the parsed set too, with their own values
    assert {"confidence", "lrp", "grad", "rare_share"} <= set(heads["parsed_set"][0])
    assert [r["confidence"] for r in heads["parsed_set"]] != [r["confidence"] for r in heads["baseline"]]
    with open(results / "curves" / "grad" / "curve.csv") as f:
        curve = list(csv.DictReader(f))
    assert [int(r["heads_kept"]) for r in curve] == [8, 6, 4, 2]  # encoder heads only


def test_tables_and_figures(toy_results):
    results, _ = toy_results
    markdown = (results / "tables.md").read_text()
    assert markdown.count("\n## ") == 7
    assert "_Skipped" not in markdown and ": skipped" not in markdown
    assert "**In domain and on the parsed set: how each metric ranks the heads**" in markdown
    for name in FIGURES:
        data = (results / "figures" / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 1000
        assert f"](figures/{name})" in markdown
    import matplotlib.image

    assert matplotlib.image.imread(str(results / "figures" / "gate_trace.png")).ndim == 3
    page = (results / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == len(FIGURES)
    assert all(base64.b64decode(image)[:8] == PNG_MAGIC for image in images)
    assert page.rstrip().endswith("</html>") and "Skipped" not in page


def test_rerun_skips_every_step(toy_results):
    results, _ = toy_results
    before = (results / "tables.md").stat().st_mtime_ns
    process, seconds = run_recipe(results)
    assert process.returncode == 0, process.stderr[-3000:]
    assert not ran(process)
    assert re.findall(r"^skip (\S+) \(done\)$", process.stdout, re.M) == STEPS
    assert (results / "tables.md").stat().st_mtime_ns == before
    assert seconds < 60


def test_more_lambdas_run_only_their_own_steps(toy_results):
    """Adding a λ to each sweep runs that λ's steps and the report, nothing else: the curve does
    not depend on the λs, and 0.02 is not in scratch_lambdas."""
    results, _ = toy_results
    process, _ = run_recipe(results, "--set", f"l0.encoder_lambdas={LAMBDA},0.02",
                            "--set", f"l0.all_lambdas={LAMBDA},0.02")
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert sorted(ran(process)) == sorted(["enc_l0_0.02", "bleu_enc_l0_0.02", "all_l0_0.02", "bleu_all_l0_0.02",
                                           "report"])
    assert "skip curve_grad (done)" in process.stdout
    assert not (results / "models" / "scratch_all_l0_0.02").exists()
    assert "λ=0.02" in (results / "tables.md").read_text()  # the report has the new points


def test_converged_protocol_stops_at_the_plateau_then_trains_the_fixed_mask(toy_results):
    """The converged protocol on the toy folder (its baseline, stats and curve reused): the L0
    phase stops where the plateau rule first holds (a loose rule, so that it holds within the
    toy's few updates), the mask is fixed, training goes on without the penalty, and the report
    leads with the converged model, the quick one labelled. (The from-scratch side and Michel's
    heuristic: tests/pipeline/test_converged_protocol.py.)"""
    from fairseq_heads.convergence import converged_at, read_validations

    results, _ = toy_results
    name = f"all_l0_{LAMBDA}_conv_s1"
    process, _ = run_recipe(results, "--set", "converged.seeds=1", "--set", "l0.encoder_lambdas=",
                            "--set", "converged.plateau_validations=1", "--set", "converged.plateau_loss_tolerance=0.05")
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert ran(process) == [f"{name}_l0", f"mask_{name}", name, f"bleu_{name}", "report"]
    l0 = read_validations(str(results / "models" / f"{name}_l0" / "validations.jsonl"))
    stop = converged_at(l0, 1, 0.05)
    assert stop == len(l0) - 1 and l0[-1].update < 40  # stopped by the rule, before the cap
    assert f"converged at update {l0[-1].update}" in (results / "logs" / f"{name}_l0.log").read_text()
    with open(results / "masks" / name / "head_mask.json") as f:
        kept = sum(map(sum, (row for rows in json.load(f).values() for row in rows)))
    assert kept == l0[-1].open_heads
    fixed = read_validations(str(results / "models" / name / "validations.jsonl"))
    assert fixed and {r.open_heads for r in fixed} == {kept}  # no gate moves any more
    with open(results / "results" / name / "result.json") as f:
        result = json.load(f)
    assert (result["protocol"], result["seed"], result["heads_source"]) == ("converged", 1, "head_mask")
    assert sum(result["heads_kept"].values()) == kept
    phases = result["training"]["phases"]
    assert phases["l0"]["converged_at"] == phases["l0"]["updates"] == l0[-1].update
    assert phases["fixed_mask"]["updates"] == fixed[-1].update
    assert result["training"]["updates"] == l0[-1].update + fixed[-1].update
    markdown = (results / "tables.md").read_text()
    assert re.search(rf"^\| λ={LAMBDA} \| converged, seed 1 \|", markdown, re.M)
    assert f"| λ={LAMBDA} (quick protocol) | quick, 20 updates |" in markdown


@pytest.mark.parametrize("argv, message", [
    (["--scale", "slow"], "--scale slow: recipe multi30k_en_de has"),
    (["--set", "converged.seeds=1,two"], "--set converged.seeds: expected int"),
    (["--set", "l0.gate_lr_scale=fast"], "--set l0.gate_lr_scale: expected float"),
    (["--set", "protocol=converged"], "--set protocol: no setting"),
    (["--jobs", "0"], "--jobs must be >= 1"),
])
def test_bad_settings_stop_before_any_step(tmp_path, argv, message):
    argv = ["--scale", "toy"] + argv if "--scale" not in argv else argv
    status, out, err = recipe_in_process("multi30k_en_de", "--results", tmp_path / "results", *argv)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "results").exists()


def test_failing_step_leaves_no_marker_and_no_result(toy_results):
    """Run last: it redoes (and breaks) the baseline's BLEU step."""
    results, _ = toy_results
    process, _ = run_recipe(results, "--set", "generate.subset=no_such_subset", "--only", "bleu_baseline")
    assert process.returncode != 0
    assert "redo bleu_baseline (its settings or inputs changed)" in process.stdout
    assert "FAILED bleu_baseline" in process.stderr
    assert not (results / ".steps" / "bleu_baseline.json").exists()
    assert not (results / "results" / "baseline").exists()
    assert not (results / "results" / "baseline.partial").exists()
    assert (results / ".steps" / "baseline.json").exists()  # earlier steps are untouched
    assert (results / "models" / "baseline" / "checkpoint_best.pt").exists()


def test_wmt_recipe_only_its_training_and_bleu(tmp_path):
    """The en-ru recipe at toy scale with --only bleu_baseline: the data, the baseline and its
    BLEU are what would run, no statistics, curve or report."""
    status, out, _ = recipe_in_process("wmt_en_ru", "--scale", "toy", "--results", tmp_path / "r",
                                       "--only", "bleu_baseline", "--dry-run")
    assert status == 0
    assert re.findall(r"^(\S+)\s+[0-9a-f]{16}  run$", out, re.M) == ["data", "baseline", "bleu_baseline"]
    assert len(re.findall(r"  -$", out, re.M)) == len(STEPS) - 3


def test_wmt_recipe_names_missing_newstest_files(tmp_path):
    """At its real scale the en-ru recipe checks for every newstest file before any step runs."""
    status, _, err = recipe_in_process("wmt_en_ru", "--scale", "base", "--results", tmp_path / "results",
                                       "--data-root", tmp_path / "no_data")
    assert status == 2 and err.count("\n") == 1
    assert f"{tmp_path}/no_data/wmt_newstest/en-ru/newstest2012.en-ru.en.gz not found" in err
    assert not (tmp_path / "results").exists()
