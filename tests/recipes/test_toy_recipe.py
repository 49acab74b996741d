"""End to end: `SCALE=toy recipes/multi30k_en_de/run.sh` (synthetic corpus, 2+2 layers d=32,
20-30 updates per training) writes every table and figure; a re-run skips every step; a step
that fails leaves no done marker and no result behind. The other recipes share its steps
(recipes/paper_tables.sh, toy_scale.sh): `wmt_en_ru/run.sh` runs its first steps here, with
ANALYSIS=no.

Takes a few minutes on 2 CPU cores (mostly starting ~17 Python processes).
"""
import base64
import csv
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPES = ("multi30k_en_de",)
LAMBDA = "0.01"  # the toy scale's default: one lambda per sweep
MODELS = ("baseline", f"enc_l0_{LAMBDA}", f"all_l0_{LAMBDA}", f"scratch_all_l0_{LAMBDA}")
FIGURES = ("encoder_pruning.png", "heads_kept_by_type.png", "gate_trace.png", "open_heads.png", "survivors.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def recipe_script(recipe):
    return os.path.join(REPO, "recipes", recipe, "run.sh")


def run_recipe(results, recipe="multi30k_en_de", **extra_env):
    env = dict(os.environ, SCALE="toy", RESULTS=str(results), THREADS="1", **extra_env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for name in ("LAMBDAS_ENC", "LAMBDAS_ALL", "SCRATCH_LAMBDAS", "RECIPE_EXTRA_TRAIN_ARGS", "RECIPE_EXTRA_GENERATE_ARGS",
                 "ANALYSIS", "PROTOCOL", "PUBLISHED"):
        if name not in extra_env:
            env.pop(name, None)
    started = time.monotonic()
    process = subprocess.run(["bash", recipe_script(recipe)], env=env, capture_output=True, text=True, timeout=1800)
    return process, time.monotonic() - started


@pytest.fixture(scope="module", params=RECIPES)
def toy_results(request, tmp_path_factory):
    results = tmp_path_factory.mktemp("recipe") / f"{request.param}_toy"
    process, _ = run_recipe(results, request.param)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return results, process


def test_every_step_ran(toy_results):
    results, process = toy_results
    ran = re.findall(r"^run  (\S+)$", process.stdout, re.M)
    assert ran == ["data", "baseline", "bleu_baseline", f"enc_l0_{LAMBDA}", f"bleu_enc_l0_{LAMBDA}",
                   f"all_l0_{LAMBDA}", f"bleu_all_l0_{LAMBDA}", f"mask_all_l0_{LAMBDA}",
                   f"scratch_all_l0_{LAMBDA}", f"bleu_scratch_all_l0_{LAMBDA}", "pud", "stats",
                   "curve", "report"]
    assert sorted(os.listdir(results / ".done")) == sorted(ran)
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
        assert result["checkpoint"] == f"models/{name}/checkpoint.pt"  # relative to RESULTS
    assert found["baseline"]["heads_source"] == "all"
    assert found[f"enc_l0_{LAMBDA}"]["kind"] == "encoder_l0"
    assert found[f"enc_l0_{LAMBDA}"]["heads_kept"]["dec-self"] == 8  # only the encoder is gated
    assert found[f"all_l0_{LAMBDA}"]["heads_source"] == "gates"
    # the from-scratch model was trained with exactly the heads the pruned model kept
    scratch, pruned = found[f"scratch_all_l0_{LAMBDA}"], found[f"all_l0_{LAMBDA}"]
    assert scratch["heads_source"] == "head_mask" and scratch["from_model"] == pruned["name"]
    assert scratch["kept"] == pruned["kept"]
    assert scratch["head_mask"] == f"masks/all_l0_{LAMBDA}/head_mask.json"
    with open(results / "masks" / f"all_l0_{LAMBDA}" / "head_mask.json") as f:
        assert json.load(f) == pruned["kept"]


def test_statistics_and_curve(toy_results):
    results, _ = toy_results
    with open(results / "stats" / "baseline" / "heads.csv") as f:
        heads = list(csv.DictReader(f))
    assert len(heads) == 24 and "syntactic_best" in heads[0]  # PUD-style subset with parses
    with open(results / "curve" / "curve.csv") as f:
        curve = list(csv.DictReader(f))
    assert [int(r["heads_kept"]) for r in curve] == [8, 6, 4, 2]  # encoder heads only


def test_tables_and_figures(toy_results):
    results, _ = toy_results
    markdown = (results / "tables.md").read_text()
    assert markdown.count("\n## ") == 7
    assert "_Skipped" not in markdown
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


def test_rerun_skips_every_step(toy_results, request):
    results, _ = toy_results
    before = (results / "tables.md").stat().st_mtime_ns
    process, seconds = run_recipe(results, request.node.callspec.params["toy_results"])
    assert process.returncode == 0, process.stderr[-3000:]
    assert not re.findall(r"^run  ", process.stdout, re.M)
    assert len(re.findall(r"^skip \S+ \(done\)$", process.stdout, re.M)) == 14
    assert (results / "tables.md").stat().st_mtime_ns == before
    assert seconds < 60


def test_more_lambdas_run_only_their_own_steps(toy_results):
    """Adding a lambda to each sweep runs that lambda's steps and the report, nothing else: the
    curve does not depend on the lambdas, and SCRATCH_LAMBDAS="" skips the from-scratch run."""
    results, _ = toy_results
    process, _ = run_recipe(results, LAMBDAS_ENC=f"{LAMBDA} 0.02", LAMBDAS_ALL=f"{LAMBDA} 0.02",
                            SCRATCH_LAMBDAS="")
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert re.findall(r"^run  (\S+)$", process.stdout, re.M) == [
        "enc_l0_0.02", "bleu_enc_l0_0.02", "all_l0_0.02", "bleu_all_l0_0.02", "mask_all_l0_0.02", "report"]
    assert "skip curve (done)" in process.stdout
    assert not (results / "models" / "scratch_all_l0_0.02").exists()
    # the report has the new points
    assert "λ=0.02" in (results / "tables.md").read_text()


def test_converged_protocol_stops_at_the_plateau_then_trains_the_fixed_mask(toy_results):
    """PROTOCOL=converged on the toy folder (its baseline, stats and curve reused): the L0 phase
    stops where the plateau rule first holds (a loose rule, so that it holds within the toy's
    few updates), the mask is fixed, training goes on without the penalty, and the report leads
    with the converged model, the quick one labelled. (The from-scratch side is left out to keep
    CI short: ~5 fairseq starts here; its table is tested on hand-made files.)"""
    from fairseq_heads.convergence import converged_at, read_validations

    results, _ = toy_results
    name = f"all_l0_{LAMBDA}_conv_s1"
    process, _ = run_recipe(results, PROTOCOL="converged", LAMBDAS_ENC="", LAMBDAS_ALL=LAMBDA,
                            SCRATCH_LAMBDAS="", SEEDS="1", PLATEAU_VALIDATIONS="1",
                            PLATEAU_LOSS_TOLERANCE="0.05")
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert re.findall(r"^run  (\S+)$", process.stdout, re.M) == [
        f"{name}_l0", f"mask_{name}", name, f"bleu_{name}", "report"]
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


def test_a_published_model_is_not_trained_again_only_its_from_scratch_side(toy_results, tmp_path):
    """PUBLISHED (a results folder of an earlier session, recipes/publish_results.sh): a
    converged model whose result and mask are there is skipped, and its layout is trained from
    scratch with the published mask; once that is published too, nothing is left to run. (On a
    copy of the toy folder: its data and baseline steps are reused, the shared one is untouched.)"""
    import shutil

    results, _ = toy_results
    copy = tmp_path / "results"
    shutil.copytree(results, copy, symlinks=True)
    name = f"all_l0_{LAMBDA}_conv_s2"
    published = tmp_path / "published"
    (published / "masks" / name).mkdir(parents=True)
    (published / "results" / name).mkdir(parents=True)
    mask = json.loads((results / "masks" / f"all_l0_{LAMBDA}" / "head_mask.json").read_text())
    (published / "masks" / name / "head_mask.json").write_text(json.dumps(mask))
    (published / "results" / name / "result.json").write_text("{}")
    settings = dict(PROTOCOL="converged", LAMBDAS_ENC="", LAMBDAS_ALL=LAMBDA, SCRATCH_LAMBDAS=LAMBDA,
                    SEEDS="2", ANALYSIS="no", PUBLISHED=str(published))
    process, _ = run_recipe(copy, **settings)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert f"skip {name} (published in {published})" in process.stdout
    assert re.findall(r"^run  (\S+)$", process.stdout, re.M) == [f"scratch_{name}", f"bleu_scratch_{name}"]
    with open(copy / "results" / f"scratch_{name}" / "result.json") as f:
        scratch = json.load(f)
    kept = {t: sum(map(sum, rows)) for t, rows in mask.items()}
    assert {t: n for t, n in scratch["heads_kept"].items() if t in kept} == kept
    shutil.copytree(copy / "results" / f"scratch_{name}", published / "results" / f"scratch_{name}")
    process, _ = run_recipe(copy, **settings)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert f"skip scratch_{name} (published in {published})" in process.stdout
    assert re.findall(r"^run  (\S+)$", process.stdout, re.M) == []


@pytest.mark.parametrize("setting, value", [("PROTOCOL", "slow"), ("SEEDS", "1 two"), ("SEEDS", "1 1"),
                                            ("GATE_LR_SCALE", "-3"), ("ANALYSIS", "maybe")])
def test_bad_settings_stop_before_any_step(tmp_path, setting, value):
    process, _ = run_recipe(tmp_path / "results", **{setting: value})
    assert process.returncode == 2
    assert process.stderr.count("\n") == 1 and process.stderr.startswith(setting)
    assert not (tmp_path / "results").exists()


def test_failing_step_leaves_no_marker_and_no_result(toy_results):
    """Run last: it redoes (and breaks) the baseline's BLEU step."""
    results, _ = toy_results
    process, _ = run_recipe(results, RECIPE_EXTRA_GENERATE_ARGS="--no-such-option")
    assert process.returncode != 0
    assert "redo bleu_baseline (settings changed)" in process.stdout
    assert "FAILED bleu_baseline" in process.stderr
    assert not (results / ".done" / "bleu_baseline").exists()
    assert not (results / "results" / "baseline").exists()
    assert not (results / "results" / "baseline.partial").exists()
    assert (results / ".done" / "baseline").exists()  # earlier steps are untouched
    assert (results / "models" / "baseline" / "checkpoint.pt").exists()


def test_wmt_recipe_with_analysis_no_runs_only_training_and_bleu(tmp_path):
    """The en-ru recipe at toy scale, no sweeps and ANALYSIS=no: its baseline is trained and
    scored, and no statistics, curve or report step runs."""
    results = tmp_path / "wmt_en_ru_toy"
    process, _ = run_recipe(results, "wmt_en_ru", LAMBDAS_ENC="", LAMBDAS_ALL="", ANALYSIS="no")
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert re.findall(r"^run  (\S+)$", process.stdout, re.M) == ["data", "baseline", "bleu_baseline"]
    assert "ANALYSIS=no: no statistics, curve or report" in process.stdout
    with open(results / "results" / "baseline" / "result.json") as f:
        assert 0 <= json.load(f)["bleu"] <= 100
    assert sorted(os.listdir(results)) == [".done", "data", "logs", "models", "results"]


def test_wmt_recipe_names_missing_newstest_files(tmp_path):
    """At its real scale the en-ru recipe checks for every newstest file before any step runs."""
    env = dict(os.environ, RESULTS=str(tmp_path / "results"), DATA=str(tmp_path / "no_data"))
    process = subprocess.run(["bash", recipe_script("wmt_en_ru")], env=env, capture_output=True,
                             text=True, timeout=60)
    assert process.returncode == 2
    assert f"missing {tmp_path}/no_data/wmt_newstest/en-ru/newstest2012.en-ru.en.gz" in process.stderr
    assert not (tmp_path / "results").exists()
