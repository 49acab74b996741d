"""lm-report reads the repeat-copy loss drop under its new heads.json name and under the old
one (`loss_drop`, the committed stats folders), and states the natural-text ICL score or why
there is none."""
import os

from fairseq_heads.report.lm_report import _natural_icl_line, build_lm_tables, repeat_copy_drops

RESULTS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results", "lm_markov_repeats_2x4")
CELL = {"estimate": 4.0897, "ci_low": 3.871, "ci_high": 4.339, "probes": 192.0}


def test_old_and_new_names_of_the_repeat_copy_drop():
    assert repeat_copy_drops({"repeat_copy_loss_drop": {"all": CELL}}) == {"all": CELL}
    assert repeat_copy_drops({"loss_drop": {"all": CELL}}) == {"all": CELL}
    assert repeat_copy_drops({}) == {}


def test_committed_stats_folders_still_give_their_drops():
    tables = build_lm_tables(RESULTS)  # written before the rename: meta induction.loss_drop
    assert "Repeat-copy loss drop (in-context copying of repeated random probes" in tables
    assert "4.09 [3.87, 4.34]" in tables  # the committed baseline, docs/results/.../tables.md
    assert "| λ=1 | 2 | -0.08 [-0.10, -0.05] |" in tables
    # heads.json written before copying_score: the column is there, empty
    assert "| head | previous-token mass | induction | copying (OV) | duplicate-token mass | labels |" in tables
    assert "| L1H1 | 0.01 [0.01, 0.01] | 0.44 [0.41, 0.49] | – | 0.02 | induction |" in tables


def test_natural_icl_line_gives_the_score_or_the_reason():
    cell = {"estimate": -0.4, "ci_low": -0.5, "ci_high": -0.3}
    icl = {"early_position": 50, "late_position": 500, "reason": None, "blocks": 12.0,
           "score": cell, "early_loss": {"estimate": 3.0}, "late_loss": {"estimate": 2.6}}
    line = _natural_icl_line({"natural_icl": icl})[0]
    assert "loss at token 500 − loss at token 50" in line and "-0.40 [-0.50, -0.30] over 12 blocks" in line
    icl.update(reason="the model takes 64 positions (--tokens-per-sample), position 500 needs 501")
    assert _natural_icl_line({"natural_icl": icl})[0].endswith("not computed: " + icl["reason"])
    assert _natural_icl_line({}) == []


def test_agreement_section_gives_both_intervals_for_committed_files():
    tables = build_lm_tables(RESULTS)  # agreement.json written before head-level intervals
    assert "| pair | Spearman [blocks] | [heads] | within-layer mean |" in tables
    # confidence~LRP over 8 heads: 0.88 [0.86, 0.93] resampling blocks, Fisher z over heads
    assert "| confidence~lrp | 0.88 [0.86, 0.93] | [0.44, 0.98] | – |" in tables


def test_a_pair_with_a_constant_metric_is_named_not_tabled_as_dashes(tmp_path):
    import json
    import shutil

    results = tmp_path / "lm"
    shutil.copytree(RESULTS, results)
    path = results / "stats" / "baseline" / "agreement.json"
    agreement = json.loads(path.read_text())
    # a baseline whose gates are all fixed open: gate_p_open is 1 on every head, no ranking
    agreement["dec-self"]["confidence~gate_p_open"] = {"spearman": None, "ci_low": None, "ci_high": None,
                                                       "num_heads": 8, "fisher_z_ci": [None, None]}
    path.write_text(json.dumps(agreement))
    tables = build_lm_tables(str(results))
    assert "| confidence~gate_p_open |" not in tables
    assert "No rank correlation (a metric equal on every head): confidence~gate_p_open." in tables
    assert "| confidence~lrp | 0.88 [0.86, 0.93] | [0.44, 0.98] | – |" in tables
