"""End to end: `fairseq-heads recipe lm_english --scale toy` (toy grammar, a 2-layer d=32
transformer_lm, a few dozen updates per training) runs every step and writes the tables; a
re-run skips every step; bad settings exit 2 before any step."""
import contextlib
import io
import json
import os
import re
import subprocess
import sys

import pytest

STEPS = ["data", "open_mask", "baseline", "result_baseline", "stats",
         "l0_0.05", "pruned_l0_0.05", "result_l0_0.05", "stats_l0_0.05",
         "l0_0.5", "pruned_l0_0.5", "result_l0_0.5", "stats_l0_0.5",
         "curve_lrp", "curve_grad", "curve_confidence", "mask_l0_0.5", "scratch_l0_0.5", "result_scratch_l0_0.5",
         "report"]


def run_recipe(results):
    return subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "lm_english", "--scale", "toy",
                           "--results", str(results)], capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


@pytest.fixture(scope="module")
def lm_results(tmp_path_factory):
    results = tmp_path_factory.mktemp("recipe") / "lm_english_toy"
    process = run_recipe(results)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return results, process


def test_every_step_ran_and_the_tables_answer_the_questions(lm_results):
    results, process = lm_results
    assert sorted(re.findall(r"^run  (\S+)$", process.stdout, re.M)) == sorted(STEPS)
    tables = (results / "tables.md").read_text()
    for section in ("## 1. Baseline", "## 2. L0 sweep", "## 3. How many heads can go",
                    "## 4. Do the importance metrics agree?", "## 5. In-context copying",
                    "## 6. The same layout from scratch"):
        assert section in tables
    assert (results / "figures" / "perplexity_vs_heads.png").read_bytes()[:4] == b"\x89PNG"
    baseline = json.loads((results / "results" / "baseline" / "result.json").read_text())
    assert baseline["kind"] == "baseline" and baseline["heads_total"] == 8
    assert baseline["checkpoint"] == "models/baseline/checkpoint_best.pt"  # relative to the results
    pruned = json.loads((results / "results" / "l0_0.5" / "result.json").read_text())
    assert pruned["checkpoint"] == "models/pruned_l0_0.5/checkpoint.pt" and pruned["heads_kept"] <= 8
    scratch = json.loads((results / "results" / "scratch_l0_0.5" / "result.json").read_text())
    assert scratch["updates"] == 60  # baseline + fine-tune updates: the same training budget
    # the layout's masked heads are not counted as kept: the same heads as the pruned model
    assert scratch["kept"] == pruned["kept"] and scratch["heads_kept"] == pruned["heads_kept"]
    assert scratch["kind"] == "from_scratch" and scratch["from_model"] == "l0_0.5"
    heads = json.loads((results / "stats" / "baseline" / "heads.json").read_text())
    assert {"previous_token_mass", "duplicate_token_mass", "induction", "induction_L8",
            "induction_L16"} <= set(heads["columns"])
    assert heads["meta"]["induction"]["repeat_copy_loss_drop"]["all"]["probes"] == 32.0
    trace = (results / "models" / "l0_0.5" / "gate_trace.jsonl").read_text().splitlines()
    assert [json.loads(line)["update"] for line in trace] == [0, 5, 10, 15]


def test_a_rerun_skips_every_step(lm_results):
    results, _ = lm_results
    process = run_recipe(results)
    assert process.returncode == 0, process.stderr[-3000:]
    assert re.findall(r"^skip (\S+) \(done\)$", process.stdout, re.M) == STEPS


@pytest.mark.parametrize("settings, message", [
    (["--set", "model.size=9x9"], "--set model.size: no setting 'size'"),
    (["--scale", "cpu"], "step data: {data}/gutenberg_en not found (--data-root)"),
    (["--scale", "cpu", "--set", "data.source=wikitext2"], "step data: {data}/wikitext2 not found (--data-root)"),
])
def test_a_bad_setting_exits_2_before_any_step(tmp_path, settings, message):
    from fairseq_heads.cli import main

    argv = ["recipe", "lm_english", "--results", str(tmp_path / "out"), "--data-root", str(tmp_path / "data")]
    argv += settings if "--scale" in settings else ["--scale", "toy", *settings]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert main(argv) == 2
    assert err.getvalue().count("\n") == 1 and message.format(data=tmp_path / "data") in err.getvalue()
    assert not (tmp_path / "out").exists()
