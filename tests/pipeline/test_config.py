"""--set on the recipes' frozen configs: values parsed by each field's type, one-line errors that
name the setting, the config left as it was."""
import json
import re

import pytest

from fairseq_heads.errors import CommandError
from fairseq_heads.pipeline.config import apply_overrides, config_dict
from fairseq_heads.pipeline.recipes import EUROPARL_BASE_GPU, RECIPES, TOY


def test_overrides_are_parsed_by_the_field_type():
    config = apply_overrides(TOY, ["l0.encoder_lambdas=0.01, 0.02", "train.fp16=yes", "train.seed=3",
                                   "l0.all_lambdas=", "data.corpus=europarl_en_it", "cpu=false"])
    assert config.l0.encoder_lambdas == (0.01, 0.02) and config.l0.all_lambdas == ()
    assert config.train.fp16 is True and config.train.seed == 3 and config.cpu is False
    assert config.data.corpus == "europarl_en_it"
    assert TOY.l0.encoder_lambdas == (0.002, 0.05)  # frozen: the recipe's own config is untouched
    assert config_dict(config)["l0"]["encoder_lambdas"] == (0.01, 0.02)


@pytest.mark.parametrize("assignment, message", [
    ("l0.lambdas=0.1", "--set l0.lambdas: no setting 'lambdas'"),
    ("train.seed=two", "--set train.seed: expected int, got 'two'"),
    ("train.fp16=maybe", "--set train.fp16: expected true or false, got 'maybe'"),
    ("l0=1", "--set l0: l0 is a section"),
    ("train.seed.x=1", "--set train.seed.x: seed is a value, not a section"),
    ("seed", "--set must be KEY=VALUE, got 'seed'"),
])
def test_bad_overrides_name_the_setting(assignment, message):
    with pytest.raises(CommandError) as error:
        apply_overrides(TOY, [assignment])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_the_gpu_scale_is_the_paper_size_model_and_toy_runs_on_cpu():
    base = EUROPARL_BASE_GPU
    assert (base.model.layers, base.model.dim, base.model.heads, base.model.ffn) == (6, 512, 8, 2048)
    assert base.train.minutes >= 5 and base.train.fp16 and not base.cpu
    assert base.stats.subset == "valid" and base.l0.control and len(base.l0.encoder_lambdas) == 2
    assert TOY.cpu and RECIPES["europarl_en_it"]["toy"] == TOY and RECIPES["europarl_en_it"]["gpu"] == EUROPARL_BASE_GPU


def test_every_registered_recipe_and_scale_builds_its_steps_with_keys():
    for name, scales in RECIPES.items():
        for scale, config in scales.items():
            steps = recipe_steps(config, "/data", "/user_dir")
            names = [step.name for step in steps]
            assert len(names) == len(set(names)), (name, scale)
            assert set(compute_keys(steps)) == set(names), (name, scale)


def test_every_recipe_with_a_protocol_section_builds_under_the_converged_protocol_too():
    # the quick protocol's own steps (lm_english's scratch_lambdas) must not read the quick
    # models the converged protocol replaces
    for name, scales in RECIPES.items():
        for scale, config in scales.items():
            l0 = getattr(config, "l0", None)  # (hf_translation --scale cpu: no L0 sweep, no converged models)
            sweep = l0 is None or any(getattr(l0, f, ()) for f in ("lambdas", "encoder_lambdas", "all_lambdas"))
            if hasattr(config, "converged") and sweep:
                steps = recipe_steps(apply_overrides(config, ["converged.seeds=1,2"]), "/data", "/user_dir")
                assert any(step.name.endswith("_conv_s2") for step in steps), (name, scale)
                assert set(compute_keys(steps)) == {step.name for step in steps}, (name, scale)


def test_steps_that_do_not_fit_together_are_a_one_line_error_naming_the_recipe_and_its_sets(monkeypatch):
    import argparse

    from fairseq_heads.commands import recipe as recipe_command
    from fairseq_heads.pipeline import recipes
    from fairseq_heads.pipeline.runner import Step

    monkeypatch.setattr(recipes, "recipe_steps", lambda *_: [Step("b", "b", {}, inputs=("a",), call=print),
                                                             Step("a", "a", {}, call=print)])
    args = argparse.Namespace(recipe="lm_english", scale="toy", overrides=["train.seed=2"], data_root="/data",
                              pack=None, only=None, jobs=1, results="/nowhere", dry_run=True)
    with pytest.raises(CommandError) as error:
        recipe_command.build_runner(args)
    assert str(error.value) == "recipe lm_english --scale toy --set train.seed=2: step b reads a, not declared before it"


def test_recipe_json_keeps_the_sets_of_the_earlier_invocations_on_the_same_results_folder(tmp_path):
    """The converged folder grows by re-runs with other --sets; its recipe.json says how each ran."""
    from fairseq_heads.pipeline.recipe_json import earlier_overrides

    recipe_json = tmp_path / "recipe.json"
    assert earlier_overrides(str(recipe_json), ["converged.seeds=1"]) == []
    recipe_json.write_text(json.dumps({"overrides": [], "earlier_overrides": []}))
    assert earlier_overrides(str(recipe_json), []) == []  # the same invocation again
    grown = ["l0.all_lambdas=0.005", "converged.seeds=1"]
    assert earlier_overrides(str(recipe_json), grown) == [[]]
    recipe_json.write_text(json.dumps({"overrides": grown, "earlier_overrides": [[]]}))
    assert earlier_overrides(str(recipe_json), grown) == [[]]
    assert earlier_overrides(str(recipe_json), []) == [grown]


from fairseq_heads.pipeline import compute_keys  # noqa: E402
from fairseq_heads.pipeline.recipes import LM_MARKOV_CONVERGED, LM_TOY, MULTI30K_CONVERGED, recipe_steps  # noqa: E402


def keys(config, *assignments):
    return compute_keys(recipe_steps(apply_overrides(config, list(assignments)), "/data", "/user_dir"))


@pytest.mark.parametrize("config, assignment", [
    (TOY, "l0.encoder_lambdas=0.002,0.05,0.1"),
    (TOY, "curve.metrics=grad,confidence,lrp"),
    (LM_TOY, "l0.lambdas=0.05,0.5,1.0"),
    (MULTI30K_CONVERGED, "converged.seeds=1,2,3,4"),
    (MULTI30K_CONVERGED, "l0.all_lambdas=0.02"),
    (EUROPARL_BASE_GPU, "syntax.compare=true"),  # the parsed set's binarisation is not re-run
])
def test_growing_a_sweep_adds_steps_and_changes_no_other_key_but_the_reports(config, assignment):
    before, after = keys(config), keys(config, assignment)
    assert set(before) < set(after)
    assert [name for name in before if before[name] != after[name]] == ["report"]


@pytest.mark.parametrize("config, assignment, changed", [
    (TOY, "train.lr=0.004", "baseline"),
    (MULTI30K_CONVERGED, "converged.patience=6", "enc_l0_0.005_conv_s1"),
])
def test_a_changed_setting_changes_its_step_and_everything_downstream(config, assignment, changed):
    before, after = keys(config), keys(config, assignment)
    steps = {s.name: s for s in recipe_steps(config, "/data", "/user_dir")}
    downstream, grown = {changed}, True
    while grown:  # the steps that read a changed step, transitively
        new = {n for n, s in steps.items() if set(s.inputs) & downstream} - downstream
        downstream |= new
        grown = bool(new)
    assert {name for name in before if before[name] != after[name]} >= downstream
    assert "data" not in {name for name in before if before[name] != after[name]}


def closure(steps, roots):
    """`roots` and every step that reads one of them, transitively."""
    found, grown = set(roots), True
    while grown:
        new = {n for n, s in steps.items() if set(s.inputs) & found} - found
        found |= new
        grown = bool(new)
    return found


@pytest.mark.parametrize("config", [MULTI30K_CONVERGED, LM_MARKOV_CONVERGED])
def test_raising_a_phases_cap_reruns_that_phase_and_what_reads_it_not_the_l0_phase(config):
    steps = {s.name: s for s in recipe_steps(config, "/data", "/user_dir")}
    before, after = keys(config), keys(config, "converged.fixed_mask_max_updates=20000")
    changed = {name for name in before if before[name] != after[name]}
    fixed_mask_phases = {n for n in steps if re.fullmatch(r"(michel_\w+_as_)?((enc|all)_)?l0_[\d.]+_conv_s\d+", n)}
    assert fixed_mask_phases and changed == closure(steps, fixed_mask_phases)
    assert not [n for n in changed if n.endswith("_l0") or n.startswith("scratch_") or n == "baseline"]


def test_a_missing_corpus_exits_2_naming_it_before_any_step(tmp_path):
    import subprocess
    import sys

    process = subprocess.run([sys.executable, "-m", "fairseq_heads.cli", "recipe", "europarl_en_it", "--scale", "gpu",
                              "--results", str(tmp_path / "r"), "--data-root", str(tmp_path / "nowhere")],
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 2
    assert process.stderr.strip() == ("fairseq-heads recipe: error: step data: "
                                      f"{tmp_path / 'nowhere' / 'europarl_en_it' / 'train.en.gz'} not found (--data-root)")
    assert not (tmp_path / "r").exists()


def test_a_training_summary_reads_fairseqs_json_log(tmp_path):
    from fairseq_heads.pipeline.fairseq_steps import training_summary

    log = tmp_path / "train.log"
    log.write_text("\n".join([
        '2026-12-04 17:16:38 | INFO | train_inner | {"epoch": 1, "wps": "100.0", "num_updates": "50"}',
        '2026-12-04 17:17:38 | INFO | train_inner | {"epoch": 1, "wps": "300.0", "num_updates": "100"}',
        '2026-12-04 17:18:38 | INFO | train_inner | {"epoch": 1, "wps": "500.0", "num_updates": "150"}',
        '2026-12-04 17:19:38 | INFO | train_inner | {"epoch": 1, "wps": "350.0", "num_updates": "200"}',
        '2026-12-04 17:19:40 | INFO | valid | {"epoch": 1, "valid_loss": "5.5"}',
        '2026-12-04 17:19:41 | INFO | train | {"epoch": 1, "train_wps": "200", "train_train_wall": "30", "train_num_updates": "200"}',
        'a line that is no record', '2026-12-04 17:20:41 | INFO | valid | {"epoch": 2, "valid_loss": "5.25"}',
        '2026-12-04 17:20:42 | INFO | train | {"epoch": 2, "train_wps": "400", "train_train_wall": "10", "train_num_updates": "260"}',
    ]) + "\n")
    summary = training_summary(str(log))
    assert summary["updates"] == 260 and summary["epochs"] == 2 and summary["best_valid_loss"] == 5.25
    assert summary["target_tokens_per_second"] == (200 * 30 + 400 * 10) / 40  # weighted by the epochs' wall
    assert summary["steady_target_tokens_per_second"] == 350  # median of 300, 500, 350: the first left out


def test_a_training_summary_of_epochs_shorter_than_fairseqs_one_second_wall_still_has_a_rate(tmp_path):
    from fairseq_heads.pipeline.fairseq_steps import training_summary

    log = tmp_path / "train.log"  # fairseq rounds train_wall to whole seconds: a fast toy run logs 0
    log.write_text("\n".join(
        f'2026-12-04 17:19:4{e} | INFO | train | {{"epoch": {e}, "train_wps": "{wps}", "train_train_wall": "0", '
        f'"train_num_updates": "{10 * e}"}}' for e, wps in ((1, 3000), (2, 5000))) + "\n")
    summary = training_summary(str(log))
    assert summary["target_tokens_per_second"] == 4000 and summary["train_wall_seconds"] == 0
    assert summary["steady_target_tokens_per_second"] is None


@pytest.mark.parametrize("config", [MULTI30K_CONVERGED, LM_MARKOV_CONVERGED])
def test_a_converged_sweep_runs_seed_by_seed_and_its_comparisons_last(config):
    # the runner starts ready steps in list order: a sweep stopped part-way leaves whole seeds,
    # each L0 model with its λ=0 control, before any Michel or speed comparison
    names = [step.name for step in recipe_steps(config, "/data", "/user_dir")]
    trained = [n for n in names if re.fullmatch(r"((enc|all)_)?l0_[\d.]+_conv_s\d+", n)]
    seeds = [int(n.rsplit("_s", 1)[1]) for n in trained]
    assert seeds == sorted(seeds) and set(seeds) == set(config.converged.seeds)
    assert {n.split("_conv")[0].endswith("l0_0") for n in trained[:2]} == {True, False}  # a model and its control
    comparisons = [i for i, n in enumerate(names) if n.startswith(("michel_", "mask_michel_", "speed_"))]
    assert not comparisons or min(comparisons) > max(names.index(n) for n in trained)
    assert bool(comparisons) == bool(getattr(config.converged, "michel_metrics", ()))


def test_an_lm_baseline_trained_to_patience_keys_and_runs_as_the_scratch_side_does():
    from fairseq_heads.pipeline.lm import LmTrain, train_settings
    from fairseq_heads.pipeline.recipes import LM_MARKOV_CONVERGED_START
    from fairseq_heads.pipeline.runner import StepContext

    # the fields at their defaults stay out of the key: results keyed before them stay done
    assert set(train_settings(LmTrain())).isdisjoint({"validate_updates", "patience"})
    before, after = keys(LM_MARKOV_CONVERGED), keys(LM_MARKOV_CONVERGED_START)
    assert before["data"] == after["data"] and before["baseline"] != after["baseline"]
    steps = {s.name: s for s in recipe_steps(LM_MARKOV_CONVERGED_START, "/data", "/user_dir")}
    baseline = steps["baseline"]
    argv = [str(a) for a in baseline.argv(StepContext(baseline, "/r", "/r/models/baseline.partial", "/r/log", False))]
    v = LM_MARKOV_CONVERGED_START.converged
    at = argv.index("--patience")
    assert argv[at + 1] == str(v.patience) and argv[argv.index("--validate-interval-updates") + 1] == str(v.validate_updates)
    assert argv[len(argv) - 1 - argv[::-1].index("--max-update") + 1] == str(v.scratch_max_updates)


@pytest.mark.parametrize("config", [TOY, MULTI30K_CONVERGED, LM_TOY, LM_MARKOV_CONVERGED])
def test_autocast_keys_every_step_that_runs_a_model_and_none_keeps_the_old_keys(config):
    """--set autocast=bf16 re-runs each step that trains or scores a model (not the data); the fp32
    default adds nothing to a key, so that results folders made before the option keep theirs."""
    before, after = keys(config), keys(config, "autocast=bf16")
    assert keys(config, "autocast=none") == before
    changed = {name for name in before if before[name] != after[name]}
    assert "data" not in changed
    assert {"baseline", "stats", "report"} <= changed
    steps = recipe_steps(apply_overrides(config, ["autocast=bf16"]), "/data", "/user_dir")
    assert all('"autocast": "bf16"' in json.dumps(step.settings) for step in steps if step.name in ("baseline", "stats"))


def test_the_formation_step_reads_the_baselines_kept_checkpoints_and_keeps_no_key_of_their_number():
    from fairseq_heads.pipeline.recipes import EUROPARL_CPU

    steps = {s.name: s for s in recipe_steps(EUROPARL_CPU, "/data", "/user_dir")}
    assert steps["formation"].inputs == ("data", "syntax_data", "baseline")
    assert EUROPARL_CPU.train.keep_checkpoints == -1 and EUROPARL_CPU.train.validate_updates
    # how many checkpoints a run keeps changes no result: not in the baseline's key
    assert keys(EUROPARL_CPU)["baseline"] == keys(EUROPARL_CPU, "train.keep_checkpoints=1")["baseline"]
    assert "formation" not in keys(EUROPARL_CPU, "formation.enabled=false")
    assert keys(EUROPARL_CPU)["formation"] != keys(EUROPARL_CPU, "formation.bleu_sentences=100")["formation"]


def test_seeded_encoder_lambdas_run_the_headline_and_its_control_at_every_seed_the_rest_once():
    trained = {name for name in keys(TOY, "l0.encoder_lambdas=0.01,0.02", "l0.all_lambdas=0.01",
                                     "converged.seeds=1,2,3", "converged.seeded_encoder_lambdas=0.01")
               if name.endswith("_l0")}
    assert trained == {f"enc_l0_{lam}_conv_s{seed}_l0" for lam in ("0.01", "0") for seed in (1, 2, 3)} | {
        "enc_l0_0.02_conv_s1_l0", "all_l0_0.01_conv_s1_l0", "all_l0_0_conv_s1_l0"}
    # unset: every model at every seed, as before
    assert "all_l0_0.01_conv_s3_l0" in keys(TOY, "l0.all_lambdas=0.01", "converged.seeds=1,2,3")


@pytest.mark.parametrize("config", [TOY, MULTI30K_CONVERGED])
def test_pre_norm_reaches_every_translation_training_and_post_norm_keeps_the_old_keys(config):
    """model.normalize_before=true puts fairseq's pre-norm options on the baseline's and each L0
    model's command and re-runs what they feed, not the data; false (post-norm, fairseq's
    default) adds nothing to a key, so results made before the option stay done."""
    from fairseq_heads.pipeline.runner import StepContext

    def training_argvs(assignments):
        argvs = {}
        for s in recipe_steps(apply_overrides(config, assignments), "/data", "/user_dir"):
            if s.argv is None:
                continue
            try:
                argv = s.argv(StepContext(s, "/r", f"/r/{s.name}.partial", "/r/log", False))
            except FileNotFoundError:  # a command line built from an earlier step's files
                continue
            argvs[s.name] = [str(a) for a in argv]
        return argvs

    before, after = keys(config), keys(config, "model.normalize_before=true")
    assert keys(config, "model.normalize_before=false") == before
    assert all("normalize_before" not in json.dumps(s.settings)
               for s in recipe_steps(config, "/data", "/user_dir"))
    changed = {name for name in before if before[name] != after[name]}
    assert "data" not in changed and {"baseline", "stats", "report"} <= changed
    pre, post = training_argvs(["model.normalize_before=true"]), training_argvs([])
    assert pre and set(pre) == set(post)
    for name, argv in pre.items():
        assert "--encoder-normalize-before" in argv and "--decoder-normalize-before" in argv, name
        assert "--encoder-normalize-before" not in post[name] and "--decoder-normalize-before" not in post[name]
