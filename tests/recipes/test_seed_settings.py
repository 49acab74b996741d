"""The report reads each model's settings from its result file (report/layout.py, "a model's
settings"), never from its name: one folder holding baselines of seeds 1-3, each fine-tuned under
the converged protocol with seeds 1-3 (names such as enc_l0_0.01_conv_s1_s2, which the name
parse of before could not read), pairs every model with its own run's control and keeps the
baselines apart; an unfinished L0 phase is drawn from its settings file. And the migration of
folders from before the fields (report/settings_migration.py) changes no table."""
import json
import os

from fairseq_heads.report import layout
from fairseq_heads.report.build import build_report, load_inputs
from fairseq_heads.report.seed_masks import seed_mask_table
from fairseq_heads.report.seed_means import control_pairs
from fairseq_heads.report.settings_migration import migrate_folder
from fairseq_heads.report.table_basics import headline, protocol_label

from .hand_made_results import model_result, trace_records, write_results_dir

BASELINES, FINETUNES = (1, 2, 3), (1, 2, 3)
# heads kept (enc-self) by the fine-tune of seed s on baseline b: the seeds of baseline 1 agree
# on every head, those of baselines 2 and 3 on none but the first
KEPT = {1: {s: [[1, 1], [0, 0]] for s in FINETUNES},
        2: {1: [[1, 1], [0, 0]], 2: [[1, 0], [1, 0]], 3: [[1, 0], [0, 1]]},
        3: {1: [[1, 1], [0, 0]], 2: [[1, 0], [1, 0]], 3: [[1, 0], [0, 1]]}}


def suffix(baseline_seed):
    return "" if baseline_seed == 1 else f"_s{baseline_seed}"  # pipeline/nmt.py's names


def converged(lam, seed, baseline_seed, bleu):
    name = f"enc_l0_{lam:g}_conv_s{seed}{suffix(baseline_seed)}"
    kept = KEPT[baseline_seed][seed] if lam else [[1, 1], [1, 1]]
    result = model_result(name, "encoder_l0", bleu, {"enc-self": kept}, lam)
    result.update(protocol="converged", seed=seed, baseline_seed=baseline_seed, gate_lr_scale=1000.0)
    return result


def one_folder():
    """Baselines 1-3; per (baseline b, fine-tune seed s) the L0 model at λ=0.01, BLEU 20 + b + s/10,
    and its control at λ=0, BLEU 30 + b + s/10: each model is 10 below its own control."""
    results = []
    for b in BASELINES:
        baseline = model_result(f"baseline{suffix(b)}", "baseline", 30.0 + b, {})
        baseline.update(seed=b, baseline_seed=b)
        results.append(baseline)
        for s in FINETUNES:
            results += [converged(0.01, s, b, 20.0 + b + s / 10), converged(0.0, s, b, 30.0 + b + s / 10)]
    return results


def test_every_model_is_paired_with_the_control_of_its_own_baseline_and_seed():
    results = one_folder()
    (key, pairs), = control_pairs(results, layout.ENCODER_L0).items()
    assert key == (0.01, "converged", 1000.0)
    assert [layout.seeds_of(model) for model, _ in pairs] == [(b, s) for b in BASELINES for s in FINETUNES]
    assert all(layout.seeds_of(model) == layout.seeds_of(control) for model, control in pairs)
    assert {round(model["bleu"] - control["bleu"], 6) for model, control in pairs} == {-10.0}


def test_the_headline_model_and_labels_are_baseline_1_seed_1s_and_say_the_baseline_otherwise():
    results = one_folder()
    chosen = [r["name"] for r in headline(results) if r["kind"] == layout.ENCODER_L0]
    assert sorted(chosen) == ["enc_l0_0.01_conv_s1", "enc_l0_0_conv_s1"]
    by_name = {r["name"]: r for r in results}
    assert protocol_label(by_name["enc_l0_0.01_conv_s2"]) == "converged, seed 2"
    assert protocol_label(by_name["enc_l0_0.01_conv_s2_s3"]) == "converged, seed 2/b3"
    assert layout.seed_label(by_name["baseline_s3"]) == "3"


def test_the_seeds_masks_are_compared_within_one_baseline_only():
    table = seed_mask_table(one_folder())
    rows = [dict(zip(table.columns, row)) for row in table.rows]
    assert [r["models"] for r in rows] == ["encoder_l0 λ=0.01", "encoder_l0 λ=0.01, baseline seed 2",
                                           "encoder_l0 λ=0.01, baseline seed 3"]
    assert all(r["seeds"] == "1 2 3" for r in rows)
    assert [r["kept by every seed"] for r in rows] == [2, 1, 1]
    assert rows[0]["mean Jaccard of the seeds' kept sets"] == 1.0


def test_the_whole_report_reads_the_folder_and_an_unfinished_phase_from_its_settings(tmp_path):
    results = one_folder()
    phase = {"name": "all_l0_0.02_conv_s1_s2", "kind": "all_l0", "l0_lambda": 0.02, "protocol": "converged",
             "seed": 1, "baseline_seed": 2, "gate_lr_scale": 100.0, "phase": "l0"}
    write_results_dir(str(tmp_path), with_trace=False, results=results)
    for folder, settings in (("all_l0_0.02_conv_s1_s2_l0", phase),
                             ("all_l0_0.05_conv_s1_l0", None),  # no settings file: not a phase
                             ("enc_l0_0.01_conv_s1_l0", dict(phase, name="enc_l0_0.01_conv_s1"))):  # has a result
        os.makedirs(tmp_path / "models" / folder)
        (tmp_path / "models" / folder / "gate_trace.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in trace_records()))
        if settings:
            (tmp_path / "models" / folder / layout.PHASE_SETTINGS).write_text(json.dumps(settings))
    inputs = load_inputs(str(tmp_path))
    assert [dict(p, trace=None) for p in inputs.l0_phases] == [dict(phase, trace=None)]  # as written
    written, skipped = build_report(str(tmp_path))
    markdown = (tmp_path / "tables.md").read_text()
    assert "| encoder_l0 λ=0.01, baseline seed 3 | 1 2 3 |" in markdown
    assert os.path.isfile(tmp_path / "figures" / "open_heads.png")
    assert "Heads dying over training" not in dict(skipped)


def legacy_folder(root):
    """Baseline seed 1's models written as before the settings fields (no baseline_seed; a
    heuristic model without its metric; an L0 phase without its settings file)."""
    legacy = [{k: v for k, v in r.items() if k != "baseline_seed"} for r in one_folder()
              if layout.baseline_seed(r) == 1]
    heuristic = model_result("michel_grad_as_enc_l0_0.01_conv_s2", "heuristic", 19.0, {},
                             from_model="enc_l0_0.01_conv_s2")
    heuristic.update(protocol="converged", seed=2)
    write_results_dir(str(root), with_trace=False, results=legacy + [heuristic])
    os.makedirs(root / "models" / "all_l0_0.02_conv_s1_glr100_l0")
    return legacy + [heuristic]


def test_the_migration_writes_what_the_names_held_and_changes_no_table(tmp_path):
    results = legacy_folder(tmp_path)
    build_report(str(tmp_path))
    before = (tmp_path / "tables.md").read_text()
    assert len(migrate_folder(str(tmp_path))) == len(results) + 1
    read = {r["name"]: r for r in load_inputs(str(tmp_path)).results}
    assert {r["baseline_seed"] for r in read.values()} == {1}
    assert read["michel_grad_as_enc_l0_0.01_conv_s2"]["metric"] == "grad"
    settings = json.loads((tmp_path / "models" / "all_l0_0.02_conv_s1_glr100_l0" / layout.PHASE_SETTINGS).read_text())
    assert settings == {"name": "all_l0_0.02_conv_s1_glr100", "kind": "all_l0", "l0_lambda": 0.02,
                        "protocol": "converged", "seed": 1, "baseline_seed": 1, "gate_lr_scale": 100.0,
                        "phase": "l0"}
    assert migrate_folder(str(tmp_path)) == []  # once is enough
    build_report(str(tmp_path))
    assert (tmp_path / "tables.md").read_text() == before


def test_the_migration_reads_the_baseline_seed_a_converged_name_ends_with(tmp_path):
    """What the report's reading of files without the field cannot know: a converged model of
    the run with train.seed=2 (read as baseline seed 1 until migrated)."""
    result = converged(0.01, 1, 2, 21.0)
    result.pop("baseline_seed")
    write_results_dir(str(tmp_path), with_stats=False, with_curve=False, with_trace=False, results=[result])
    assert layout.seeds_of(result) == (1, 1)
    migrate_folder(str(tmp_path))
    migrated, = load_inputs(str(tmp_path)).results
    assert migrated["name"] == "enc_l0_0.01_conv_s1_s2" and layout.seeds_of(migrated) == (2, 1)


def test_the_recipe_records_the_settings_and_keeps_them_out_of_the_keys(tmp_path):
    """The converged L0 phase of baseline seed 2's run writes its settings file when it starts;
    the heuristic's metric reaches its result file without entering its BLEU step's key."""
    from fairseq_heads.pipeline.config import apply_overrides
    from fairseq_heads.pipeline.recipes import TOY, recipe_steps
    from fairseq_heads.pipeline.runner import StepContext

    config = apply_overrides(TOY, ["converged.seeds=1", "train.seed=2", "l0.encoder_lambdas=0.01",
                                   "converged.michel_metrics=grad"])
    steps = {s.name: s for s in recipe_steps(config, str(tmp_path), str(tmp_path))}
    phase = steps["enc_l0_0.01_conv_s1_s2_l0"]
    phase.argv(StepContext(phase, str(tmp_path), str(tmp_path), str(tmp_path / "log"), False))
    assert json.loads((tmp_path / layout.PHASE_SETTINGS).read_text()) == {
        "name": "enc_l0_0.01_conv_s1_s2", "kind": "encoder_l0", "l0_lambda": 0.01, "protocol": "converged",
        "seed": 1, "baseline_seed": 2, "gate_lr_scale": float(config.l0.gate_lr_scale), "phase": "l0"}
    bleu = steps["bleu_michel_grad_as_enc_l0_0.01_conv_s1_s2"]
    assert "--metric" not in bleu.settings["result"]
    assert steps["michel_grad_as_enc_l0_0.01_conv_s1_s2"].settings["metric"] == "grad"  # the model's key has it
