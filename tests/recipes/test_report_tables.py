"""The report's table builders and `build_report` on hand-made result files."""
import base64
import json
import os
import re

import pytest
from sacrebleu.metrics import BLEU

from fairseq_heads.report import layout, tables
from fairseq_heads.report.build import build_report, load_inputs, write_l0_points
from fairseq_heads.report.model_result import kept_heads, parse_generate_output, sacrebleu_score
from fairseq_heads.report.settings_migration import legacy_phase_settings

from .hand_made_results import (AGREEMENT, CURVE, HEADS, RESULTS, model_result, trace_records,
                                write_results_dir)


@pytest.fixture
def results_dir(tmp_path):
    return str(write_results_dir(str(tmp_path / "results_dir")))


def cells(table, first):
    """The row whose first cell is `first`."""
    (row,) = [r for r in table.rows if r[0] == first]
    return row


def test_encoder_points_and_nearest_curve_point():
    assert tables.encoder_sweep_points(RESULTS) == [("baseline", 4, 32.0), ("λ=0.1", 3, 30.0), ("λ=1", 1, 20.0)]
    table = tables.encoder_pruning_table(RESULTS, CURVE)
    # lambda 0.1 keeps 3: curve points at 4 and 2 are equally near -> the smaller one (2 kept, 25)
    assert cells(table, "λ=0.1") == ["λ=0.1", "quick", "3/4", 30.0, 25.0, 2]
    assert cells(table, "λ=1") == ["λ=1", "quick", "1/4", 20.0, 12.0, 1]
    assert table.note == ""
    no_curve = tables.encoder_pruning_table(RESULTS, None)
    assert cells(no_curve, "λ=1")[4:] == [None, None] and "no Michel" in no_curve.note


def test_encoder_table_leads_with_converged_and_labels_the_quick_rows():
    results = QUICK_RESULTS + [converged("enc_l0_1_conv_s1", "encoder_l0", 21.0, {"enc-self": [[1, 1], [0, 0]]}, 1,
                                         phases={"l0": {"updates": 500, "converged_at": 500},
                                                 "fixed_mask": {"updates": 600}})]
    table = tables.encoder_pruning_table(results, CURVE)
    assert [row[0] for row in table.rows] == ["baseline", "λ=0.1", "λ=1", "λ=1 (quick protocol)"]
    assert cells(table, "λ=1") == ["λ=1", "converged, seed 1", "2/4", 21.0, 25.0, 2]
    assert cells(table, "λ=1 (quick protocol)") == ["λ=1 (quick protocol)", "quick, 150 updates", "1/4", 20.0,
                                                    12.0, 1]
    assert cells(table, "λ=0.1")[1] == "quick, 150 updates"  # no converged run at λ=0.1
    assert "quick protocol" in table.note
    # the figure's points are the table's headline rows; where protocols mix, each says its own
    assert tables.encoder_sweep_points(tables.headline(results)) == [
        ("baseline", 4, 32.0), ("λ=0.1 (quick)", 3, 30.0), ("λ=1 (converged)", 2, 21.0)]


def test_all_types_table_pairs_from_scratch_with_its_source():
    table = tables.all_types_table(RESULTS)
    assert table.columns == ["model", "protocol", "enc-self", "dec-self", "enc-dec", "BLEU (from trained)",
                             "BLEU (from scratch)"]
    assert cells(table, "baseline") == ["baseline", "", "4/4", "4/4", "4/4", 32.0, None]
    assert cells(table, "λ=0.1") == ["λ=0.1", "quick", "4/4", "3/4", "4/4", 29.0, 27.5]
    assert cells(table, "λ=1") == ["λ=1", "quick", "4/4", "1/4", "2/4", 18.0, 15.0]
    assert table.note == ""  # only one protocol: nothing to tell apart
    without_scratch = [r for r in RESULTS if r["kind"] != "from_scratch"]
    assert cells(tables.all_types_table(without_scratch), "λ=1")[-1] is None


def test_first_losses_and_layers():
    table = tables.first_losses(RESULTS)
    assert cells(table, "dec-self") == ["dec-self", "75%", "25%", "1"]
    assert cells(table, "enc-dec") == ["enc-dec", "100%", "50%", "1"]
    assert cells(table, "enc-self") == ["enc-self", "100%", "100%", "not reached"]
    by_layer = tables.heads_kept_by_layer(RESULTS)
    assert [r for r in by_layer.rows if r[:2] == ["enc-dec", 0]] == [["enc-dec", 0, "2/2", "0/2"]]
    encoder_only = tables.heads_kept_by_layer(RESULTS, "encoder_l0")
    assert {r[0] for r in encoder_only.rows} == {"enc-self"}  # the only type gated in these runs
    assert [r for r in encoder_only.rows if r[1] == 1] == [["enc-self", 1, "1/2", "0/2"]]


def test_head_functions_parse_labels():
    assert tables.head_functions("syntactic(nsubj,dep->head);positional(1);rare") == \
        ["syntactic", "positional", "rare"]
    assert tables.head_functions("") == [] and tables.head_functions(None) == []
    assert tables.function_counts(HEADS) == {"positional": 2, "syntactic": 1, "rare": 1, "none": 1}


def test_head_function_and_relation_tables():
    table = tables.head_function_table(HEADS)
    assert [r[:3] for r in table.rows] == [["enc-self", 0, 0], ["enc-self", 0, 1], ["enc-self", 1, 0]]
    assert "positional 2" in table.note and "none 1" in table.note
    relations = tables.syntactic_relation_table(HEADS)
    (row,) = relations.rows
    assert row[:3] == ["nsubj", "dep->head", "enc-self 1/0"]
    assert row[3] == pytest.approx(0.70) and row[4] == pytest.approx(0.39) and row[5] == pytest.approx(0.31)
    no_syntax = [{k: v for k, v in r.items() if not k.startswith("syntactic")} for r in HEADS]
    with pytest.raises(tables.MissingInput, match="--conllu"):
        tables.syntactic_relation_table(no_syntax)


def test_agreement_table():
    import math

    (row,) = tables.agreement_table(AGREEMENT).rows  # written before agreement.json had head intervals
    half = 1.959963984540054 * math.sqrt(1.06 / (4 - 3))  # Fisher z over 4 heads
    assert row[:5] == ["enc-self", "lrp ~ grad", 0.8, 0.5, 0.95] and row[7:] == [None, 4]
    assert row[5:7] == pytest.approx([math.tanh(math.atanh(0.8) - half), math.tanh(math.atanh(0.8) + half)])
    newer = {"enc-self": {"lrp~grad": {**AGREEMENT["enc-self"]["lrp~grad"], "fisher_z_ci": [0.1, 0.9],
                                       "within_layer": {"spearman_mean": 0.6}}}}
    assert tables.agreement_table(newer).rows[0][5:] == [0.1, 0.9, 0.6, 4]
    with pytest.raises(tables.MissingInput):
        tables.agreement_table({"enc-self": {}})


def test_trace_series_orders_by_update():
    records = trace_records()
    series = tables.trace_series(list(reversed(records)))
    assert series[("dec-self", 0, 0)] == ([0, 5, 10], [0.99, 0.6, 0.05])
    summary = tables.trace_summary(series)
    assert cells(summary, "dec-self") == ["dec-self", 4, 0, 1]
    with pytest.raises(tables.MissingInput):
        tables.trace_series([])


def test_final_gates_extend_the_trace():
    result = dict(RESULTS[4], updates=12, p_open={"dec-self": [[0.01, 0.9], [0.8, 0.7]]})
    series = tables.trace_series(tables.with_final_gates(trace_records(), result))
    assert series[("dec-self", 0, 0)] == ([0, 5, 10, 12], [0.99, 0.6, 0.05, 0.01])
    assert series[("enc-self", 0, 0)] == ([0, 5, 10], [0.99, 0.99, 0.99])  # not gated at the end: as traced
    assert tables.with_final_gates(trace_records(), dict(result, updates=10)) == trace_records()
    assert tables.with_final_gates(trace_records(), dict(result, updates=None)) == trace_records()


def test_survivor_functions():
    runs, open_counts, totals = tables.survivor_counts(RESULTS, HEADS)
    assert runs == [("encoder_l0", "0.1"), ("encoder_l0", "1"), ("all_l0", "0.1"), ("all_l0", "1")]
    assert totals == {"positional": [2] * 4, "syntactic": [1] * 4, "rare": [1] * 4, "none": [1] * 4}
    # lambda 0.1 (encoder) closes enc-self 1/0: positional + syntactic; lambda 1 keeps only 0/0
    assert open_counts["positional"] == [1, 1, 2, 2]
    assert open_counts["syntactic"] == [0, 0, 1, 1]
    assert open_counts["rare"] == [1, 0, 1, 1]
    assert open_counts["none"] == [1, 0, 1, 1]
    table = tables.survivor_functions(RESULTS, HEADS)
    assert table.rows[1] == ["encoder_l0", "1", "1/2", "0/1", "0/1", "0/1"]
    # an encoder-only run counts encoder heads only; an all-types run counts every type
    decoder_head = {"type": "dec-self", "layer": "0", "head": "0", "labels": "positional(-1)"}
    runs, open_counts, totals = tables.survivor_counts(RESULTS, HEADS + [decoder_head])
    assert totals["positional"] == [2, 2, 3, 3]
    assert open_counts["positional"] == [1, 1, 3, 2]  # all_l0 lambda 1 closed dec-self 0/0


def test_missing_inputs_raise():
    with pytest.raises(tables.MissingInput, match="baseline"):
        tables.all_types_table([r for r in RESULTS if r["kind"] != "baseline"])
    with pytest.raises(tables.MissingInput, match="all_l0"):
        tables.all_types_table([RESULTS[0]])
    with pytest.raises(tables.MissingInput, match="heads.csv"):
        tables.survivor_functions(RESULTS, [])


def test_markdown_table_escapes_and_formats():
    text = tables.markdown_table(tables.Table(["a", "b"], [["x|y", 1.234], [None, float("nan")]]))
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x\\|y | 1.23 |", "| - | - |"]


def test_build_report_writes_everything(results_dir):
    written, skipped = build_report(results_dir)
    assert skipped == []
    names = {os.path.relpath(p, results_dir) for p in written}
    assert names == {"tables.md", "report.html", "figures/encoder_pruning.png",
                     "figures/heads_kept_by_type.png", "figures/gate_trace.png", "figures/open_heads.png",
                     "figures/survivors.png"}
    for path in written:
        if path.endswith(".png"):
            with open(path, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    markdown = open(os.path.join(results_dir, "tables.md")).read()
    assert markdown.count("\n## ") == 7 and "Skipped" not in markdown
    assert "| λ=1 | quick | 4/4 | 1/4 | 2/4 | 18.00 | 15.00 |" in markdown  # numbers come from the files
    page = open(os.path.join(results_dir, "report.html")).read()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 5 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    assert "<img" in page and 'src="figures/' not in page  # self-contained
    assert os.path.abspath(results_dir) not in markdown + page  # no machine's folders
    assert not [n for n in os.listdir(results_dir) if n.startswith(".")]  # no temporaries left


def test_build_report_skips_sections_without_inputs(tmp_path):
    root = write_results_dir(str(tmp_path / "r"), with_stats=False, with_curve=False, with_trace=False,
                             results=[r for r in RESULTS if r["kind"] != "encoder_l0"])
    written, skipped = build_report(root)
    skipped_titles = {title.split(".")[0] for title, _ in skipped}
    assert skipped_titles == {"1", "4", "5", "6", "7"}
    markdown = open(os.path.join(root, "tables.md")).read()
    assert markdown.count("_Skipped:") == 5 and "no stats/baseline/heads.csv" in markdown
    assert {os.path.basename(p) for p in written} == {"tables.md", "report.html", "heads_kept_by_type.png"}


def test_build_report_failure_keeps_previous_report(results_dir, monkeypatch):
    build_report(results_dir)
    before = open(os.path.join(results_dir, "tables.md")).read()
    from fairseq_heads.report import figures

    def broken(*args):
        raise RuntimeError("disk full")
    monkeypatch.setattr(figures, "survivors_figure", broken)
    with open(os.path.join(results_dir, "results", "all_l0_1", "result.json"), "w") as f:
        json.dump(model_result("all_l0_1", "all_l0", 1.0, {}, 1.0), f)
    with pytest.raises(RuntimeError):
        build_report(results_dir)
    assert open(os.path.join(results_dir, "tables.md")).read() == before
    assert not [n for n in os.listdir(results_dir) if n.startswith(".")]  # no temporaries left


def test_l0_points_for_curve_overlay(results_dir, tmp_path):
    out = str(tmp_path / "points.csv")
    assert write_l0_points(results_dir, out) == 2
    assert open(out).read() == "heads_kept,bleu,label\n3,30.00,L0 λ=0.1\n1,20.00,L0 λ=1\n"
    assert len(load_inputs(results_dir).results) == len(RESULTS)


def test_parse_generate_output_orders_by_id_and_scores():
    text = "\n".join(["S-1\ta b", "T-1\tthe cat sat", "H-1\t-0.1\tthe cat sat", "D-1\t-0.1\tthe cat sat",
                      "S-0\tc", "T-0\ta dog ran home", "D-0\t-0.2\ta dog ran home",
                      "Generate test with beam=5: BLEU = 100.00 100/100/100/100"])
    hypotheses, references, line = parse_generate_output(text)
    assert hypotheses == ["a dog ran home", "the cat sat"] and references == hypotheses
    assert line.startswith("Generate test")
    bleu, signature, _ = sacrebleu_score(hypotheses, references)
    assert bleu == 100.0 and "tok:13a" in signature
    with pytest.raises(ValueError, match="references"):
        parse_generate_output("D-0\t-1\tx\n")


def test_kept_heads_from_gates_mask_and_plain():
    import torch
    from argparse import Namespace

    args = Namespace(encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    closed, wide_open = -10.0, 10.0
    state = {"args": args, "cfg": None,
             "model": {"encoder.layers.0.self_attn.gate.log_alpha": torch.tensor([wide_open, closed])}}
    source, kept, p_open = kept_heads(state)
    assert source == "gates" and kept["enc-self"] == [[1, 0]] and kept["dec-self"] == [[1, 1]]
    assert p_open["enc-self"][0][0] > 0.99 and p_open["enc-self"][0][1] < 0.01
    source, kept, _ = kept_heads(state, {"enc-dec": [[0, 1]]})
    assert source == "head_mask" and kept["enc-dec"] == [[0, 1]] and kept["enc-self"] == [[1, 1]]
    source, kept, _ = kept_heads({"args": args, "cfg": None, "model": {}})
    assert source == "all" and kept["enc-dec"] == [[1, 1]]


def test_gzipped_gate_trace_is_read_like_the_plain_one(results_dir):
    """docs/results archives traces as gate_trace.jsonl.gz; the report reads them the same."""
    import gzip
    import shutil

    from fairseq_heads.report.build import read_trace

    path = os.path.join(results_dir, "models", "all_l0_1", "gate_trace.jsonl")
    plain = read_trace(path)
    with open(path, "rb") as source, gzip.open(path + ".gz", "wb") as target:
        shutil.copyfileobj(source, target)
    os.remove(path)
    inputs = load_inputs(results_dir)
    assert inputs.traces == {"all_l0_1": path + ".gz"}
    assert read_trace(inputs.traces["all_l0_1"]) == plain
    build_report(results_dir)
    assert os.path.isfile(os.path.join(results_dir, "figures", "gate_trace.png"))


# ------------------------------------------------------------------ converged protocol, seeds


def converged(name, kind, bleu, kept, seed, l0_lambda=1.0, from_model=None, phases=None, scale=1000):
    result = model_result(name, kind, bleu, kept, l0_lambda, from_model)
    updates = sum(p["updates"] for p in phases.values())
    result.update(protocol="converged", seed=seed, gate_lr_scale=scale, updates=updates,
                  training={"phases": phases, "updates": updates})
    return result


LAYOUT_1 = {"dec-self": [[0, 1], [0, 0]], "enc-dec": [[0, 0], [1, 1]]}
QUICK_RESULTS = [dict(r, updates=150, gate_lr_scale=1000) if r["kind"] != "baseline" else dict(r, updates=2000)
                 for r in RESULTS]
CONVERGED_RESULTS = QUICK_RESULTS + [
    converged("all_l0_1_conv_s1", "all_l0", 25.0, LAYOUT_1, 1, phases={
        "l0": {"updates": 600, "converged_at": 600}, "fixed_mask": {"updates": 900}}),
    converged("all_l0_1_conv_s2", "all_l0", 24.0, LAYOUT_1, 2, phases={
        "l0": {"updates": 800, "converged_at": None}, "fixed_mask": {"updates": 500}}),
    converged("all_l0_1_conv_s1_glr100", "all_l0", 26.0, LAYOUT_1, 1, scale=100, phases={
        "l0": {"updates": 900, "converged_at": 900}, "fixed_mask": {"updates": 500}}),
    converged("scratch_all_l0_1_conv_s1", "from_scratch", 22.0, LAYOUT_1, 1, from_model="all_l0_1_conv_s1",
              phases={"from_scratch": {"updates": 3000}}),
    converged("scratch_all_l0_1_conv_s2", "from_scratch", 23.5, LAYOUT_1, 2, from_model="all_l0_1_conv_s2",
              phases={"from_scratch": {"updates": 2600}}),
]
REFERENCES = [f"a small dog number {i} runs over the green grass today" for i in range(12)]


def translations_of(results):
    """Every model translates each reference exactly, except the last `drop` words of some
    sentences: fewer with higher BLEU, so the paired differences point the tables' way."""
    drops = {"all_l0_1_conv_s1": 3, "all_l0_1_conv_s2": 4, "scratch_all_l0_1_conv_s1": 5,
             "scratch_all_l0_1_conv_s2": 2, "scratch_all_l0_0_conv_s1": 1}
    out = {}
    for result in results:
        drop = drops.get(result["name"], 0)
        hypotheses = [" ".join(r.split()[:-1]) if i < drop * 2 else r for i, r in enumerate(REFERENCES)]
        out[result["name"]] = (hypotheses, REFERENCES)
    return out


def test_headline_prefers_converged_then_the_usual_gate_lr_then_the_lowest_seed():
    names = [r["name"] for r in tables.headline(CONVERGED_RESULTS)]
    assert "all_l0_1_conv_s1" in names and "scratch_all_l0_1_conv_s1" in names
    assert not {"all_l0_1", "all_l0_1_conv_s2", "all_l0_1_conv_s1_glr100", "scratch_all_l0_1"} & set(names)
    assert "all_l0_0.1" in names  # no converged run at λ=0.1: the quick one is all there is
    assert sorted(r["name"] for r in tables.headline(RESULTS)) == sorted(r["name"] for r in RESULTS)
    # quick files written before gate_lr_scale was recorded outnumber the converged ones: the
    # usual scale is still the converged models' (1000), not the slow-gate figure run's
    older = [dict(r, gate_lr_scale=None) if r.get("protocol") is None else r for r in CONVERGED_RESULTS]
    older = [dict(r, name="all_l0_1_conv_a_glr100") if r["name"].endswith("glr100") else r
             for r in older]  # a name that sorts first: the scale, not the name, must decide
    assert "all_l0_1_conv_s1" in [r["name"] for r in tables.headline(older)]


def test_all_types_table_leads_with_converged_and_labels_the_quick_rows():
    table = tables.all_types_table(CONVERGED_RESULTS)
    assert cells(table, "λ=1") == ["λ=1", "converged, seed 1", "4/4", "1/4", "2/4", 25.0, 22.0]
    assert cells(table, "λ=1 (quick protocol)") == ["λ=1 (quick protocol)", "quick, 150 updates",
                                                    "4/4", "1/4", "2/4", 18.0, 15.0]
    assert "quick protocol" in table.note


def test_per_lambda_columns_say_their_protocol_when_the_headline_mixes_them():
    headline = tables.headline(CONVERGED_RESULTS)  # λ=0.1: quick only; λ=1: the converged seed 1
    assert tables.first_losses(headline).columns == ["type", "λ=0.1 (quick)", "λ=1 (converged)", "half gone at"]
    assert tables.heads_kept_by_layer(headline).columns[2:] == ["λ=0.1 (quick)", "λ=1 (converged)"]
    assert [row[1] for row in tables.survivor_functions(headline, HEADS).rows] == [
        "0.1 (quick)", "1 (quick)", "0.1 (quick)", "1 (converged)"]  # encoder runs, then all types
    # one protocol: nothing to tell apart
    assert tables.first_losses(RESULTS).columns == ["type", "λ=0.1", "λ=1", "half gone at"]


def test_trained_vs_scratch_per_seed_with_intervals_and_updates():
    table = tables.trained_vs_scratch_table(CONVERGED_RESULTS, translations_of(CONVERGED_RESULTS), samples=200)
    assert [r[:5] for r in table.rows] == [["λ=1", "1", "7/12", 25.0, 22.0], ["λ=1", "2", "7/12", 24.0, 23.5]]
    first, second = table.rows
    # seed 1: scratch drops more words (worse), seed 2: fewer (better)
    assert first[5] < 0 and first[6] <= first[5] <= first[7]
    assert second[5] > 0 and second[6] <= second[5] <= second[7]
    assert first[8:] == [600, 600, 900, 2000 + 1500, 3000]
    assert second[8:] == [800, "cap", 500, 2000 + 1300, 2600]  # the L0 phase ran into its cap
    summary = tables.seed_summary_table(CONVERGED_RESULTS)
    assert summary.rows == [["λ=1", "1 2", 24.5, 1.0, 22.75, 1.5, 22.75 - 24.5, 2000 + 1400, 2800]]
    with pytest.raises(tables.MissingInput, match="converged"):
        tables.trained_vs_scratch_table(RESULTS, translations_of(RESULTS))


def test_pruning_cost_measures_each_side_against_its_own_full_layout():
    with pytest.raises(tables.MissingInput, match="full layout trained from scratch"):
        tables.pruning_cost_table(CONVERGED_RESULTS, translations_of(CONVERGED_RESULTS))
    control = converged("all_l0_0_conv_s1", "all_l0", 26.0, {}, 1, l0_lambda=0.0, phases={
        "l0": {"updates": 500, "converged_at": 500}, "fixed_mask": {"updates": 700}})
    full_scratch = converged("scratch_all_l0_0_conv_s1", "from_scratch", 27.0, {}, 1,
                             from_model="all_l0_0_conv_s1", phases={"from_scratch": {"updates": 3500}})
    results = CONVERGED_RESULTS + [control, full_scratch]
    translations = translations_of(results)
    only_full = [r for r in results if r["kind"] == "baseline"] + [control, full_scratch]  # no pruned pair yet
    with pytest.raises(tables.MissingInput, match=r"no converged pruned layout \(λ > 0\)"):
        tables.pruning_cost_table(only_full, translations_of(only_full))
    table = tables.pruning_cost_table(results, translations, samples=200)
    # one row per seed of the λ=1 layout (seed 2 is measured against seed 1's control and its
    # full scratch model, the only ones), then their mean; the λ=0 pair itself is no row
    assert [row[:5] for row in table.rows] == [["λ=1", "1", "7/12", 26.0, 27.0], ["λ=1", "2", "7/12", 26.0, 27.0],
                                               ["λ=1", "mean of 1 2", "7/12 7/12", 26.0, 27.0]]
    score = {name: BLEU().corpus_score(h, [r]).score for name, (h, r) in translations.items()}
    mean = table.rows[2]
    for column in (5, 8, 11):  # a mean of contrasts is the contrast of the means: linear in BLEU
        assert mean[column] == pytest.approx((table.rows[0][column] + table.rows[1][column]) / 2)
        assert mean[column + 1] <= mean[column] <= mean[column + 2]
    for row, seed in zip(table.rows, (1, 2)):
        trained = score[f"all_l0_1_conv_s{seed}"] - score["all_l0_0_conv_s1"]
        scratch = score[f"scratch_all_l0_1_conv_s{seed}"] - score["scratch_all_l0_0_conv_s1"]
        assert row[5] == pytest.approx(trained) and row[8] == pytest.approx(scratch)
        assert row[11] == pytest.approx(trained - scratch)
        for value, low, high in (row[5:8], row[8:11], row[11:14]):
            assert low <= value <= high
    # seed 1: from trained, 6 sentences lose a word against the control's 0; from scratch 10
    # against the full layout's 2: the trained side loses less
    assert table.rows[0][11] > 0
    # a second layout (one seed): its own row, and a row averaged over all three pairs
    second = [converged("all_l0_2_conv_s1", "all_l0", 24.5, LAYOUT_1, 1, l0_lambda=2.0, phases={
                  "l0": {"updates": 700, "converged_at": 700}, "fixed_mask": {"updates": 800}}),
              converged("scratch_all_l0_2_conv_s1", "from_scratch", 23.0, LAYOUT_1, 1,
                        from_model="all_l0_2_conv_s1", phases={"from_scratch": {"updates": 3100}})]
    both = tables.pruning_cost_table(results + second, translations_of(results + second), samples=200)
    assert [row[:2] for row in both.rows] == [["λ=1", "1"], ["λ=1", "2"], ["λ=1", "mean of 1 2"], ["λ=2", "1"],
                                              ["all layouts", "mean of 3 pairs"]]
    assert both.rows[:3] == table.rows  # one shared bootstrap: adding systems moves no interval
    assert both.rows[4][11] == pytest.approx((both.rows[0][11] + both.rows[1][11] + both.rows[3][11]) / 3)
    # seed 2's own full layouts: used once both are in, seed 1's until then
    control_2 = converged("all_l0_0_conv_s2", "all_l0", 25.5, {}, 2, l0_lambda=0.0, phases={
        "l0": {"updates": 500, "converged_at": 500}, "fixed_mask": {"updates": 800}})
    scratch_2 = converged("scratch_all_l0_0_conv_s2", "from_scratch", 26.5, {}, 2,
                          from_model="all_l0_0_conv_s2", phases={"from_scratch": {"updates": 3400}})
    half = tables.pruning_cost_table(results + [control_2], translations_of(results + [control_2]), samples=200)
    assert half.rows == table.rows
    own = tables.pruning_cost_table(results + [control_2, scratch_2],
                                    translations_of(results + [control_2, scratch_2]), samples=200)
    assert [row[:5] for row in own.rows] == [["λ=1", "1", "7/12", 26.0, 27.0], ["λ=1", "2", "7/12", 25.5, 26.5],
                                             ["λ=1", "mean of 1 2", "7/12 7/12", None, None]]
    summary = tables.seed_summary_table(results + second)
    assert [row[:4] for row in summary.rows] == [["λ=0", "1", 26.0, None], ["λ=1", "1 2", 24.5, 1.0],
                                                  ["λ=2", "1", 24.5, None]]  # one seed: no spread
    without = {k: v for k, v in translations.items() if k != "scratch_all_l0_0_conv_s1"}
    with pytest.raises(tables.MissingInput, match="generate.txt. of scratch_all_l0_0_conv_s1$"):
        tables.pruning_cost_table(results, without)


def test_open_heads_series_counts_what_the_rule_keeps():
    updates, counts = tables.open_heads_series(trace_records())
    assert updates == [0, 5, 10]
    assert counts == {"enc-self": [4, 4, 4], "dec-self": [4, 4, 3], "enc-dec": [4, 4, 4]}


def test_report_with_converged_results_has_the_fair_comparison_and_the_heads_dying_figure(tmp_path):
    root = str(tmp_path / "converged")
    write_results_dir(root, results=CONVERGED_RESULTS)
    for name, (hypotheses, references) in translations_of(CONVERGED_RESULTS).items():
        with open(os.path.join(root, "results", name, "generate.txt"), "w") as f:
            for i, (h, r) in enumerate(zip(hypotheses, references)):
                f.write(f"T-{i}\t{r}\nD-{i}\t-0.1\t{h}\n")
    slow = os.path.join(root, "models", "all_l0_1_conv_s1_glr100")
    os.makedirs(slow)
    with open(os.path.join(slow, "gate_trace.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in trace_records())
    build_report(root)
    text = open(os.path.join(root, "tables.md")).read()
    assert "Trained vs from scratch, converged protocol, per seed" in text
    assert "Trained vs from scratch over the seeds" in text and "λ=1 (quick protocol)" in text
    assert "each against its own full layout: not computed (no converged λ=0 control" in text
    # the heads-dying figure is the slow-gate run's; every traced run is in the open-heads figure
    assert "P(open) of every head over fine-tuning, λ=1, converged, gate lr ×100" in text
    assert os.path.getsize(os.path.join(root, "figures", "open_heads.png")) > 1000


def test_l0_models_are_also_compared_with_their_lambda_0_control():
    control = converged("all_l0_0_conv_s1", "all_l0", 26.0, {}, 1, l0_lambda=0.0, phases={
        "l0": {"updates": 500, "converged_at": 500}, "fixed_mask": {"updates": 700}})
    results = CONVERGED_RESULTS + [control]
    table = tables.bleu_difference_table(results, translations_of(results), [layout.ALL_L0], samples=100)
    against = {}
    for row in table.rows:
        against.setdefault(row[0], []).append(row[1])
    assert against["all_l0_1_conv_s1"] == ["baseline", "all_l0_0_conv_s1"]
    assert against["all_l0_1_conv_s2"] == ["baseline", "all_l0_0_conv_s1"]  # no seed-2 control: seed 1's
    assert against["all_l0_1_conv_s1_glr100"] == ["baseline"]  # other gate lr: no control
    assert against["all_l0_1"] == ["baseline"]  # quick protocol: no control
    assert against["all_l0_0_conv_s1"] == ["baseline"]  # the control itself
    # the control translates every sentence exactly, seed 1 drops words of 6: a loss, CI below 0
    row = next(r for r in table.rows if r[:2] == ["all_l0_1_conv_s1", "all_l0_0_conv_s1"])
    assert row[2] < 0 and row[3] <= row[2] <= row[4]
    assert tables.control_model(control, results) is None


def test_the_migration_reads_legacy_converged_names():
    """settings_migration: the one reader of names, for folders from before the settings files."""
    assert legacy_phase_settings("all_l0_0.02_conv_s2_glr100", 1000.0) == {
        "name": "all_l0_0.02_conv_s2_glr100", "kind": "all_l0", "l0_lambda": 0.02, "protocol": "converged",
        "seed": 2, "baseline_seed": 1, "gate_lr_scale": 100.0, "phase": "l0"}
    assert legacy_phase_settings("enc_l0_0_conv_s1", 1000.0)["kind"] == "encoder_l0"
    assert legacy_phase_settings("enc_l0_0_conv_s1", None)["gate_lr_scale"] is None
    assert legacy_phase_settings("enc_l0_0.005_conv_s1_s2", None)["baseline_seed"] == 2
    for name in ("all_l0_0.02", "scratch_all_l0_0.02_conv_s1", "all_l0_x_conv_s1", "all_l0_0.02_conv_s1_l0"):
        assert legacy_phase_settings(name, None) is None


def test_an_l0_phase_without_a_result_yet_is_drawn_in_the_heads_dying_figure(tmp_path):
    """A converged run whose L0 phase has finished but whose fixed-mask phase and BLEU have not:
    its trace (models/<model>_l0/) is in section 6, labelled as such, its settings from the phase's
    settings file (as the recipe writes it); one still running (models/<model>_l0.partial/) is drawn as running, to its last record; a
    phase whose model has a result is not read there (the result's own trace is)."""
    root = str(tmp_path / "phases")
    write_results_dir(root, results=CONVERGED_RESULTS)
    folders = {"all_l0_0.5_conv_s1_glr10_l0": trace_records(),          # the slowest gates: chosen
               "all_l0_2_conv_s1_l0": trace_records(),                  # the recipe's default scale
               "all_l0_0.1_conv_s1_glr20_l0.partial": trace_records(),  # still running
               "all_l0_2_conv_s1_l0.partial": trace_records()[:1],      # finished beside it wins
               "all_l0_1_conv_s1_l0": trace_records()[:1]}              # has a result
    for folder, records in folders.items():
        os.makedirs(os.path.join(root, "models", folder))
        with open(os.path.join(root, "models", folder, "gate_trace.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        name = folder.replace(".partial", "")[:-len("_l0")]
        with open(os.path.join(root, "models", folder, layout.PHASE_SETTINGS), "w") as f:
            json.dump(legacy_phase_settings(name, 1000.0), f)  # what the recipe's L0 step writes
    from fairseq_heads.report.build import load_inputs

    os.makedirs(os.path.join(root, "models", "all_l0_3_conv_s1_l0"))  # a trace but no settings file: not read
    with open(os.path.join(root, "models", "all_l0_3_conv_s1_l0", "gate_trace.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in trace_records())
    inputs = load_inputs(root)
    assert [(p["name"], p["gate_lr_scale"], p["phase"]) for p in inputs.l0_phases] == [
        ("all_l0_0.1_conv_s1_glr20", 20.0, "l0-running"), ("all_l0_0.5_conv_s1_glr10", 10.0, "l0"),
        ("all_l0_2_conv_s1", 1000, "l0")]
    assert inputs.traces["all_l0_2_conv_s1"].endswith("all_l0_2_conv_s1_l0/gate_trace.jsonl")
    assert "all_l0_1_conv_s1" not in inputs.traces  # its result's trace (models/<model>/) is absent
    running = next(p for p in inputs.l0_phases if p["phase"] == "l0-running")
    assert tables.trace_label(running, trace_records()) == (
        "λ=0.1, converged, gate lr ×20, L0 phase still running at update 10")
    quick = dict(next(r for r in QUICK_RESULTS if r["name"] == "all_l0_1"), gate_lr_scale=None)  # no scale recorded
    assert tables.trace_label(quick) == "λ=1, quick, 150 updates"
    build_report(root)
    text = open(os.path.join(root, "tables.md")).read()
    assert ("P(open) of every head over fine-tuning, λ=0.5, converged, gate lr ×10, "
            "L0 phase (no BLEU yet)") in text
    # L0 phases are not models with results: no table before the traces has them
    assert "λ=0.5" not in text.split("## 6.")[0] and "| 0.5 |" not in text.split("## 6.")[0]
