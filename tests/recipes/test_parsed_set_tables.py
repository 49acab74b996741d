"""The baseline's statistics in domain against the same statistics on the parsed set (syntax.compare,
stats/parsed_set): hand-built heads whose counts, best shares and rank correlations are known."""
import csv
import math
import os

import pytest

from fairseq_heads.report import tables
from fairseq_heads.report.build import build_report
from fairseq_heads.stats.agreement import fisher_z_interval

from .hand_made_results import HEADS, write_results_dir

CONFIDENCE = ("0.9", "0.7", "0.5", "0.1")  # enc-self 0/0, 0/1, 1/0, 1/1


def in_domain():
    return [dict(row, confidence=c, lrp=c, grad=c) for row, c in zip(HEADS, CONFIDENCE)]


def on_parsed_set():
    """0/0 loses its positional label (share 0.6); confidence ranks the heads as in domain, LRP the
    other way round, gradient swaps the middle two."""
    rows = []
    for row, c, lrp, grad in zip(HEADS, CONFIDENCE, reversed(CONFIDENCE), ("0.9", "0.5", "0.7", "0.1")):
        rows.append(dict(row, confidence=str(float(c) / 2), lrp=lrp, grad=grad, rare_share="0.2"))
    rows[0].update(labels="", positional_share="0.6")
    rows[1].update(rare_share="0.55")
    return rows


def test_function_counts_and_best_shares_of_each_set():
    table = tables.domain_function_table(in_domain(), on_parsed_set())
    assert [row[0] for row in table.rows] == ["enc-self"]
    # positional heads 2 | 1, best share 0.95 | 0.92; rare heads 1 | 1, best share 0.7 | 0.55
    assert table.rows[0][1:] == [2, 1, 0.95, 0.92, 1, 1, 0.7, 0.55]


def test_rank_correlation_of_each_metric_between_the_sets_with_its_interval_over_heads():
    rows = {row[1]: row for row in tables.domain_importance_table(in_domain(), on_parsed_set()).rows}
    assert rows["confidence"][2:] == [1.0, 1.0, 1.0, 4]  # the same ranking, halved: rho 1
    assert rows["lrp"][2:] == [-1.0, -1.0, -1.0, 4]
    rho = 0.8  # one swap among 4: 1 - 6 * 2 / (4 * 15)
    assert rows["grad"][2] == pytest.approx(rho)
    low, high = fisher_z_interval(rho, 4)
    assert rows["grad"][3:5] == [pytest.approx(low), pytest.approx(high)] and low < 0 < high
    half_width = 1.959964 * math.sqrt(1.06 / (4 - 3))  # Fieller's variance, n = 4
    assert low == pytest.approx(math.tanh(math.atanh(rho) - half_width), abs=1e-5)


def test_without_the_parsed_set_the_tables_say_what_is_missing():
    for table in (tables.domain_function_table, tables.domain_importance_table):
        with pytest.raises(tables.MissingInput, match="stats/parsed_set/heads.csv"):
            table(in_domain(), None)


def test_the_report_shows_both_sets_only_where_the_parsed_set_was_scored(tmp_path):
    root = write_results_dir(str(tmp_path / "r"))
    build_report(root)
    assert "parsed set" not in open(os.path.join(root, "tables.md")).read()
    os.makedirs(os.path.join(root, "stats", "parsed_set"))
    with open(os.path.join(root, "stats", "parsed_set", "heads.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, list(on_parsed_set()[0]))
        writer.writeheader()
        writer.writerows(on_parsed_set())
    _, skipped = build_report(root)
    markdown = open(os.path.join(root, "tables.md")).read()
    assert skipped == [] and "**In domain and on the parsed set: heads with a function**" in markdown
    # in domain, hand_made_results' heads.csv has no importance columns: only the functions compare
    assert "how each metric ranks the heads: skipped (no importance metric scored on both sets)" in markdown
