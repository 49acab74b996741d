"""Paired bootstrap BLEU differences (fairseq_heads/report/significance.py) and their table."""
import gzip
import random

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from fairseq_heads.report import tables
from fairseq_heads.report.build import build_report, load_inputs
from fairseq_heads.report.significance import (bleu_from_statistics, bootstrap_bleu, contrast,
                                               paired_bootstrap, resample_counts, sentence_statistics)

from .hand_made_results import RESULTS, write_results_dir

WORDS = "a man in a blue shirt is riding a red bike down the street while two dogs run".split()


def corpus(sentences=200, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) for _ in range(sentences)]


def damaged(sentences, share, seed):
    """Each sentence, with probability `share`, loses its second half."""
    rng = random.Random(seed)
    return [" ".join(s.split()[: len(s.split()) // 2]) if rng.random() < share else s for s in sentences]


def test_summed_statistics_give_sacrebleu_corpus_bleu():
    references = corpus()
    hypotheses = damaged(references, 0.5, seed=1)
    statistics = sentence_statistics(hypotheses, references)
    assert statistics.shape[0] == len(references)
    expected = BLEU().corpus_score(hypotheses, [references]).score
    assert bleu_from_statistics(statistics.sum(0)) == pytest.approx(expected, abs=1e-9)


def test_resample_counts_draw_every_sentence_n_times_in_all():
    counts = resample_counts(50, 30, seed=3)
    assert counts.shape == (30, 50) and (counts.sum(1) == 50).all()
    assert (counts == resample_counts(50, 30, seed=3)).all()
    assert not (counts == resample_counts(50, 30, seed=4)).all()


def test_identical_systems_differ_by_exactly_zero():
    references = corpus()
    statistics = sentence_statistics(damaged(references, 0.3, seed=2), references)
    difference = paired_bootstrap(statistics, statistics.copy(), samples=200)
    assert difference == (0.0, 0.0, 0.0, 200)


def test_a_clearly_better_system_has_a_ci_above_zero():
    references = corpus()
    worse = sentence_statistics(damaged(references, 0.6, seed=5), references)
    better = sentence_statistics(damaged(references, 0.1, seed=6), references)
    difference = paired_bootstrap(better, worse, samples=300)
    assert difference.delta > 5 and 0 < difference.ci_low < difference.delta < difference.ci_high
    mirrored = paired_bootstrap(worse, better, samples=300)
    assert mirrored.delta == pytest.approx(-difference.delta)
    assert mirrored.ci_high == pytest.approx(-difference.ci_low)  # same resamples, sign flipped


def test_a_one_sentence_difference_is_not_significant():
    references = corpus(400)
    system = damaged(references, 0.4, seed=7)
    other = list(system)
    other[0] = references[0] if other[0] != references[0] else ""
    difference = paired_bootstrap(sentence_statistics(other, references),
                                  sentence_statistics(system, references), samples=300)
    assert difference.delta != 0 and difference.ci_low <= 0 <= difference.ci_high


def test_contrasts_share_the_resamples_of_all_systems():
    references = corpus()
    x = sentence_statistics(damaged(references, 0.5, seed=8), references)
    y = sentence_statistics(damaged(references, 0.2, seed=9), references)
    full, resampled = bootstrap_bleu([x, y, y, x], samples=200)
    assert resampled.shape == (200, 4) and full[0] == full[3] and full[1] == full[2]
    two = paired_bootstrap(x, y, samples=200)
    assert contrast(full, resampled, (1, -1, 0, 0)) == two
    # a difference of differences: (x - y) - (y - x) is twice x - y on every resample ...
    doubled = contrast(full, resampled, (1, -1, -1, 1))
    assert doubled.delta == pytest.approx(2 * two.delta)
    assert (doubled.ci_low, doubled.ci_high) == pytest.approx((2 * two.ci_low, 2 * two.ci_high))
    # ... and (x - y) - (x - y) is nothing on every resample
    nothing = contrast(full, resampled, (1, -1, 1, -1))
    assert tuple(nothing) == pytest.approx((0.0, 0.0, 0.0, 200), abs=1e-9)


def test_statistics_of_different_test_sets_are_refused():
    a = sentence_statistics(corpus(10), corpus(10))
    b = sentence_statistics(corpus(12), corpus(12))
    with pytest.raises(ValueError, match="different test sets"):
        paired_bootstrap(a, b, samples=10)
    with pytest.raises(ValueError, match="different test sets"):
        bootstrap_bleu([a, a, b], samples=10)
    with pytest.raises(ValueError, match="2 hypotheses but 3 references"):
        sentence_statistics(["a", "b"], ["a", "b", "c"])


def generate_output(hypotheses, references):
    """fairseq-generate's stdout for these sentences (batch order shuffled, as fairseq prints)."""
    order = list(range(len(references)))
    random.Random(0).shuffle(order)
    lines = []
    for i in order:
        lines += [f"S-{i}\tsource {i}", f"T-{i}\t{references[i]}", f"H-{i}\t-0.5\tx",
                  f"D-{i}\t-0.5\t{hypotheses[i]}"]
    return "\n".join(lines) + "\nGenerate test with beam=5: BLEU4 = 1.00\n"


def test_report_pairs_l0_models_with_the_baseline_and_scratch_with_its_source(tmp_path):
    root = write_results_dir(str(tmp_path / "results_dir"))
    references = corpus(60)
    systems = {"baseline": references, "all_l0_0.1": damaged(references, 0.3, 1),
               "all_l0_1": damaged(references, 0.6, 2), "scratch_all_l0_0.1": damaged(references, 0.5, 4),
               "scratch_all_l0_1": damaged(references, 0.9, 3)}
    for name, hypotheses in systems.items():
        path = tmp_path / "results_dir" / "results" / name / "generate.txt"
        if name == "baseline":  # an archived, gzipped output is read as well
            with gzip.open(f"{path}.gz", "wt", encoding="utf-8") as f:
                f.write(generate_output(hypotheses, references))
        else:
            path.write_text(generate_output(hypotheses, references))
    inputs = load_inputs(root)
    assert inputs.translations["all_l0_1"] == (systems["all_l0_1"], references)  # id order restored
    assert inputs.translations["baseline"] == (references, references)
    table = tables.bleu_difference_table(RESULTS, inputs.translations, ["all_l0", "from_scratch"], samples=100)
    assert [row[:2] for row in table.rows] == [["all_l0_0.1", "baseline"], ["all_l0_1", "baseline"],
                                               ["scratch_all_l0_0.1", "all_l0_0.1"],
                                               ["scratch_all_l0_1", "all_l0_1"]]
    scores = {name: BLEU().corpus_score(h, [references]).score for name, h in systems.items()}
    assert table.rows[3][2] == pytest.approx(scores["scratch_all_l0_1"] - scores["all_l0_1"])
    assert table.rows[3][5] == "yes" and table.rows[3][2] < 0
    without_one = {k: v for k, v in inputs.translations.items() if k != "scratch_all_l0_0.1"}
    with pytest.raises(tables.MissingInput, match="generate.txt. of scratch_all_l0_0.1$"):
        tables.bleu_difference_table(RESULTS, without_one, ["all_l0", "from_scratch"])
    other_references = dict(inputs.translations, all_l0_1=(references[::-1], references[::-1]))
    with pytest.raises(tables.MissingInput, match="all_l0_1 was scored on other references"):
        tables.bleu_difference_table(RESULTS, other_references, ["all_l0"])
    # the report shows it in section 2 and says why section 1 has none
    build_report(root)
    markdown = (tmp_path / "results_dir" / "tables.md").read_text()
    assert "**BLEU differences, paired bootstrap**" in markdown
    assert "not computed (no fairseq-generate output (results/<model>/generate.txt) of enc_l0_0.1" in markdown


def test_a_broken_generate_output_is_named(tmp_path):
    root = write_results_dir(str(tmp_path / "results_dir"))
    broken = tmp_path / "results_dir" / "results" / "baseline" / "generate.txt"
    broken.write_text("T-0\tonly a reference\n")
    from fairseq_heads.report.model_result import ResultError

    with pytest.raises(ResultError, match=f"{broken}: no D- .hypothesis. lines"):
        load_inputs(root)
