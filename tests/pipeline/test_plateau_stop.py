"""The baseline's plateau stop (nmt_config.Train.plateau_validations): the fairseq-train options
it adds, the keys it leaves alone, and, end to end on the toy recipe, a training started without
it that goes on under it (runner.Step.resumable_from) and stops where the rule, fed every
validation of the log, says."""
import os
import shutil
import subprocess
import sys

import torch

from fairseq_heads.convergence import read_validations
from fairseq_heads.pipeline.config import apply_overrides
from fairseq_heads.pipeline.recipes import RECIPES, recipe_steps
from fairseq_heads.pipeline.runner import STEP_KEY_FILE, compute_keys
from fairseq_heads.pipeline.step_keys import earlier_reason

TOY = RECIPES["europarl_en_it"]["toy"]


def baseline_key(config) -> str:
    return compute_keys(recipe_steps(config, "/data", "/user_dir"))["baseline"]


def test_the_stop_changes_only_the_key_of_a_baseline_that_has_it():
    with_stop = apply_overrides(TOY, ["train.plateau_validations=3"])
    assert baseline_key(TOY) != baseline_key(with_stop)
    # set to 0 it is not in the settings: the keys of every recipe without it are what they were
    assert baseline_key(apply_overrides(TOY, ["train.plateau_loss_tolerance=0.01"])) == baseline_key(TOY)
    step = {s.name: s for s in recipe_steps(with_stop, "/data", "/user_dir")}["baseline"]
    without = {s.name: s for s in recipe_steps(TOY, "/data", "/user_dir")}["baseline"]
    assert dict(step.resumable_from)["a stopping rule added"] == without.settings
    assert earlier_reason(step, compute_keys(recipe_steps(with_stop, "/data", "/user_dir")),
                          baseline_key(TOY)) == "a stopping rule added"
    assert not any("stopping rule" in why for why, _ in without.resumable_from)


def test_a_baseline_resumes_the_output_of_another_autocast_and_nothing_else():
    """A training carried to a machine whose bf16 kernel differs goes on in the precision that pays
    there: the step resumes the partial output of the same settings under any other autocast, with
    or without the plateau stop, and names the change; another learning rate it does not."""
    config = apply_overrides(TOY, ["autocast=auto", "train.plateau_validations=3"])
    steps = recipe_steps(config, "/data", "/user_dir")
    step, keys = {s.name: s for s in steps}["baseline"], compute_keys(steps)
    for before in ("none", "bf16"):
        assert earlier_reason(step, keys, baseline_key(apply_overrides(config, [f"autocast={before}"]))) == \
            f"autocast {before} before, auto now"
        assert earlier_reason(step, keys, baseline_key(apply_overrides(
            config, [f"autocast={before}", "train.plateau_validations=0"]))) == \
            f"a stopping rule added; autocast {before} before, auto now"
    assert earlier_reason(step, keys, keys["baseline"]) is None  # its own key is not an earlier one
    assert earlier_reason(step, keys, baseline_key(apply_overrides(config, ["autocast=none", "train.lr=1"]))) is None


def recipe(results, *settings):
    process = subprocess.run(
        [sys.executable, "-m", "fairseq_heads.cli", "recipe", "europarl_en_it", "--scale", "toy",
         "--results", str(results), "--only", "baseline",
         *[arg for s in settings for arg in ("--set", s)]],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    return process.stdout


def test_a_baseline_started_without_the_stop_resumes_under_it_and_stops_on_its_whole_record(tmp_path):
    results = tmp_path / "results"
    schedule = ["train.validate_updates=5", "train.patience=0"]
    # a baseline trained 15 updates (validations at 5, 10, 15) ...
    recipe(results, *schedule, "train.max_update=15")
    # ... stands for one of 40 killed after its checkpoint at 15: its folder a partial output
    # under the key it had
    models = results / "models"
    shutil.move(str(models / "baseline"), str(models / "baseline.partial"))
    os.remove(results / ".steps" / "baseline.json")
    (models / "baseline.partial" / STEP_KEY_FILE).write_text(
        baseline_key(apply_overrides(TOY, [*schedule, "train.max_update=40"])))
    # tolerance 1: every validation counts as flat, so 2 in a row hold at update 15 already;
    # the resumed run stops at its first validation (20), not at 40
    out = recipe(results, *schedule, "train.max_update=40", "train.plateau_validations=2",
                 "train.plateau_loss_tolerance=1")
    assert "resume baseline" in out and "earlier settings" in out
    log = (results / "logs" / "baseline.log").read_text()
    assert "converged at update 15" in log
    assert [r.update for r in read_validations(str(models / "baseline" / "validations.jsonl"))] == [5, 10, 15, 20]
    last = torch.load(models / "baseline" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert last["optimizer_history"][-1]["num_updates"] == 20
