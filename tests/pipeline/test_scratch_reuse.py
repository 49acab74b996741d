"""The full layout from scratch of the baseline's own seed is the baseline, where the baseline
was trained to patience on the scratch models' schedule (converged_phases.baseline_is_full_scratch):
reused, not trained again. The rule on the recipes' configs, the reuse on a hand-made results
folder, and on the toy recipe end to end (its BLEU is the baseline's)."""
import json
import os
import subprocess
import sys
from dataclasses import replace

from fairseq_heads.convergence import read_validations
from fairseq_heads.pipeline.converged_phases import baseline_is_full_scratch
from fairseq_heads.pipeline.recipes import MULTI30K_CPU, recipe_steps
from fairseq_heads.pipeline.runner import StepContext


def test_only_the_control_of_the_baselines_seed_on_its_schedule_is_the_baseline():
    c = MULTI30K_CPU  # baseline to patience 5, validations every 100, cap 12,000: as the scratch models
    assert baseline_is_full_scratch(c, 0.0, 1)
    assert not baseline_is_full_scratch(c, 0.0, 2)      # another seed
    assert not baseline_is_full_scratch(c, 0.005, 1)    # a pruned layout
    for changed in (replace(c, train=replace(c.train, minutes=30.0)),             # a time cap
                    replace(c, converged=replace(c.converged, patience=10)),
                    replace(c, converged=replace(c.converged, scratch_max_updates=8000)),
                    replace(c, converged=replace(c.converged, validate_updates=200))):
        assert not baseline_is_full_scratch(changed, 0.0, 1)
    steps = {s.name: s for s in recipe_steps(c, "/data", "/user_dir")}
    reused, trained = steps["scratch_all_l0_0_conv_s1"], steps["scratch_all_l0_0.005_conv_s1"]
    assert reused.call is not None and reused.argv is None and "baseline" in reused.inputs
    assert trained.argv is not None and "baseline" not in trained.inputs


def test_a_baseline_that_stops_on_a_plateau_lends_its_whole_stop_to_the_scratch_models(tmp_path):
    """The plateau rule counts validations: the scratch models validate at the baseline's interval
    (not the converged section's), with its patience, plateau and cap; then the full layout from
    scratch of the baseline's seed is the baseline."""
    from fairseq_heads.pipeline.recipes import EUROPARL_CPU as c

    assert c.train.plateau_validations and c.converged.validate_updates != c.train.validate_updates
    assert baseline_is_full_scratch(c, 0.0, 1) and not baseline_is_full_scratch(c, 0.0, 2)
    steps = {s.name: s for s in recipe_steps(c, "/data", "/user_dir")}
    assert steps["scratch_all_l0_0_conv_s1"].call is not None
    trained = steps["scratch_all_l0_0.005_conv_s1"]
    out = tmp_path / "scratch"
    out.mkdir()
    argv = [str(a) for a in trained.argv(StepContext(trained, str(tmp_path), str(out), str(tmp_path / "log"), False))]

    def option(name):
        return [argv[i + 1] for i, a in enumerate(argv) if a == name]
    assert option("--validate-interval-updates") == option("--save-interval-updates") == [str(c.train.validate_updates)]
    assert option("--patience") == [str(c.train.patience)] and option("--max-update") == [str(c.train.max_update)]
    assert option("--stop-on-plateau") == [str(c.train.plateau_validations)]
    assert option("--validation-trace") == [str(out / "validations.jsonl")]
    assert "converged" not in trained.settings  # the converged section's stop is not what it runs


def test_the_reused_model_is_the_baselines_best_checkpoint_and_its_logged_validations(tmp_path):
    results = tmp_path / "results"
    (results / "models" / "baseline").mkdir(parents=True)
    (results / "models" / "baseline" / "checkpoint_best.pt").write_bytes(b"weights")
    (results / "logs").mkdir()
    valid = '2026-12-04 17:{:02d}:00 | INFO | valid | {{"epoch": 1, "valid_loss": "{}", "valid_num_updates": "{}"}}'
    # killed after the validation at 300 and before its checkpoint: resumed from 200, 300 again
    (results / "logs" / "baseline.log").write_text("\n".join([
        valid.format(1, 5.0, 100), valid.format(2, 4.6, 200), valid.format(3, 4.5, 300), "a resumed run's noise",
        valid.format(4, 4.4, 300), valid.format(5, 4.45, 400)]) + "\n")
    step = {s.name: s for s in recipe_steps(MULTI30K_CPU, "/data", "/user_dir")}["scratch_all_l0_0_conv_s1"]
    out = tmp_path / "out"
    out.mkdir()
    step.call(StepContext(step, str(results), str(out), str(tmp_path / "step.log"), False))
    assert (out / "checkpoint_best.pt").read_bytes() == b"weights"
    assert [(r.update, r.loss, r.open_heads) for r in read_validations(str(out / "validations.jsonl"))] == [
        (100, 5.0, None), (200, 4.6, None), (300, 4.4, None), (400, 4.45, None)]


def test_the_toy_recipe_scores_the_reused_baseline_as_the_full_layout_from_scratch(tmp_path):
    """Baseline trained to patience on the scratch schedule; the λ=0 control's scratch side is
    then the baseline itself: no training step runs for it and its BLEU is the baseline's."""
    results = tmp_path / "results"
    settings = ["--set", "l0.encoder_lambdas=", "--set", "l0.all_lambdas=0.01", "--set", "l0.control=true",
                "--set", "converged.seeds=1", "--set", "converged.scratch_lambdas=0",
                "--set", "train.validate_updates=5", "--set", "train.patience=2", "--set", "train.max_update=30",
                "--set", "converged.validate_updates=5", "--set", "converged.patience=2",
                "--set", "converged.scratch_max_updates=30", "--set", "curve.metrics="]
    process = subprocess.run(
        [sys.executable, "-m", "fairseq_heads.cli", "recipe", "europarl_en_it", "--scale", "toy",
         "--results", str(results), *settings,
         "--only", "bleu_baseline,bleu_scratch_all_l0_0_conv_s1"],
        capture_output=True, text=True, timeout=1500, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    assert "run  scratch_all_l0_0_conv_s1" in process.stdout
    assert not os.path.exists(results / "logs" / "scratch_all_l0_0_conv_s1.log") or \
        "fairseq_cli.train" not in (results / "logs" / "scratch_all_l0_0_conv_s1.log").read_text()

    def read(name):
        return json.loads((results / "results" / name / "result.json").read_text())

    baseline, scratch = read("baseline"), read("scratch_all_l0_0_conv_s1")
    assert scratch["kind"] == "from_scratch" and scratch["from_model"] == "all_l0_0_conv_s1"
    assert scratch["bleu"] == baseline["bleu"]
    # the phase ran as long as the baseline's training, and its best validation is where the
    # baseline's best checkpoint (the one scored) was saved
    from fairseq_heads.pipeline.converged_phases import baseline_validations

    logged = baseline_validations(str(results / "logs" / "baseline.log"))
    phase = scratch["training"]["phases"]["from_scratch"]
    assert phase["updates"] == logged[-1].update and phase["best_update"] == baseline["updates"]


def test_the_lm_recipe_reuses_its_baseline_where_it_was_trained_to_patience_on_the_scratch_schedule():
    from fairseq_heads.pipeline.recipes import LM_MARKOV_CONVERGED, LM_MARKOV_CONVERGED_START

    start = {s.name: s for s in recipe_steps(LM_MARKOV_CONVERGED_START, "/data", "/user_dir")}
    assert start["scratch_l0_0_conv_s1"].call is not None and "baseline" in start["scratch_l0_0_conv_s1"].inputs
    assert start["scratch_l0_0_conv_s2"].argv is not None          # another seed trains its own
    assert start["scratch_l0_0.5_conv_s1"].argv is not None        # a pruned layout too
    fixed = {s.name: s for s in recipe_steps(LM_MARKOV_CONVERGED, "/data", "/user_dir")}
    assert fixed["scratch_l0_0_conv_s1"].argv is not None           # a baseline of 2,000 fixed updates


def test_the_europarl_cpu_session_reuses_its_seed_2_baseline_and_keeps_three_headline_seeds():
    """recipes/europarl_en_it/cpu_session.sh runs the recipe at baseline seed 2; its fine-tune
    seeds begin with 2, so the full layout from scratch at the first seed is that baseline (no
    second baseline-length training), the headline point and its control still run at three seeds,
    and the setting leaves the carried baseline's key as it was under train.seed=2 alone."""
    import re
    import shlex

    from fairseq_heads.pipeline.config import apply_overrides
    from fairseq_heads.pipeline.recipes import EUROPARL_CPU
    from fairseq_heads.pipeline.step_keys import compute_keys

    script = os.path.join(os.path.dirname(__file__), "..", "..", "recipes", "europarl_en_it", "cpu_session.sh")
    words = shlex.split(re.search(r"^SETS=\((.*)\)", open(script).read(), re.M).group(1))
    overrides = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    assert "train.seed=2" in overrides
    c = apply_overrides(EUROPARL_CPU, overrides)
    steps = {s.name: s for s in recipe_steps(c, "/data", "/user_dir")}
    first = c.converged.seeds[0]
    assert first == c.train.seed
    reused = steps[f"scratch_all_l0_0_conv_s{first}_s2"]
    assert reused.call is not None and reused.argv is None and "baseline_s2" in reused.inputs
    assert [s for s in steps if s.startswith("scratch_") and steps[s].argv is not None] == \
        [f"scratch_all_l0_0.005_conv_s{first}_s2"]
    headline = sorted(s for s in steps if re.fullmatch(r"enc_l0_0\.005_conv_s\d_s2", s))
    assert len(headline) == len(set(c.converged.seeds)) == 3
    alone = apply_overrides(EUROPARL_CPU, ["train.seed=2"])
    assert (compute_keys(list(steps.values()))["baseline_s2"]
            == compute_keys(recipe_steps(alone, "/data", "/user_dir"))["baseline_s2"])
