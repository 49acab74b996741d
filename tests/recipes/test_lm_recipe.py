"""End to end: `SCALE=toy recipes/lm_english/run.sh` (toy grammar, a 2-layer d=32 LM, a few dozen
updates per training) runs every step and writes the tables; a re-run skips every step."""
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = ["data", "baseline", "result_baseline", "stats",
         "l0_0.05", "result_l0_0.05", "stats_l0_0.05",
         "l0_0.5", "result_l0_0.5", "stats_l0_0.5", "scratch_l0_0.5", "result_scratch_l0_0.5",
         "curve_lrp", "curve_grad", "curve_confidence", "report"]


def run_recipe(results):
    env = dict(os.environ, SCALE="toy", RESULTS=str(results), THREADS="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for name in ("LAMBDAS", "SCRATCH_LAMBDAS", "CURVE_METRICS", "CURVE_STEPS", "BASELINE"):
        env.pop(name, None)
    return subprocess.run(["bash", os.path.join(REPO, "recipes", "lm_english", "run.sh")], env=env,
                          capture_output=True, text=True, timeout=1800)


@pytest.fixture(scope="module")
def lm_results(tmp_path_factory):
    results = tmp_path_factory.mktemp("recipe") / "lm_english_toy"
    process = run_recipe(results)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return results, process


def test_every_step_ran_and_the_tables_answer_the_questions(lm_results):
    results, process = lm_results
    assert re.findall(r"^run  (\S+)$", process.stdout, re.M) == STEPS
    tables = (results / "tables.md").read_text()
    for section in ("## 1. Baseline", "## 2. L0 sweep", "## 3. How many heads can go",
                    "## 4. Do the importance metrics agree?", "## 5. In-context copying",
                    "## 6. The same layout from scratch"):
        assert section in tables
    assert (results / "figures" / "perplexity_vs_heads.png").read_bytes()[:4] == b"\x89PNG"
    baseline = json.loads((results / "results" / "baseline" / "result.json").read_text())
    assert baseline["kind"] == "baseline" and baseline["heads_total"] == 8
    assert baseline["checkpoint"] == "models/baseline/checkpoint.pt"  # relative to the results
    pruned = json.loads((results / "results" / "l0_0.5" / "result.json").read_text())
    assert pruned["checkpoint"] == "models/l0_0.5/pruned.pt" and pruned["heads_kept"] <= 8
    scratch = json.loads((results / "results" / "scratch_l0_0.5" / "result.json").read_text())
    assert scratch["updates"] == 60  # baseline + fine-tune updates: the same training budget
    # the layout's masked heads are not counted as kept: the same heads as the pruned model
    assert scratch["kept"] == pruned["kept"] and scratch["heads_kept"] == pruned["heads_kept"]
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


@pytest.mark.parametrize("name,value,message", [
    ("LM_SIZE", "9x9", "LM_SIZE: unknown size '9x9' (3x8 or 2x4)"),
    ("CORPUS", "books", "CORPUS: unknown corpus 'books' (gutenberg, wikitext2 or markov_repeats)"),
])
def test_an_unknown_setting_exits_2_before_any_step(tmp_path, name, value, message):
    (tmp_path / "data" / "gutenberg_en").mkdir(parents=True)
    env = dict(os.environ, SCALE="cpu", DATA=str(tmp_path / "data"), RESULTS=str(tmp_path / "out"))
    env[name] = value
    process = subprocess.run(["bash", os.path.join(REPO, "recipes", "lm_english", "run.sh")], env=env,
                             capture_output=True, text=True, timeout=60)
    assert process.returncode == 2
    assert process.stderr.strip().splitlines()[-1] == message
    assert not (tmp_path / "out").exists()
