"""Adding a metric is one small binding: a toy metric registered here (no other module touched)
gets its columns in heads.csv and heads.json and its heatmap from `stats` and from the plot
step; the built-in ones register themselves in heads.csv column order."""
import csv
import json
import os

import pytest
import torch

from fairseq_heads import stats
from fairseq_heads.stats.registry import WEIGHTS, Heatmap, Metric, bootstrap
from fairseq_heads.stats.streaming import RatioAccumulator, estimate_columns

TOY = "first_key_mass"


def first_key_sums(weights, query_mask):
    """Per sentence: summed attention of the real queries on key position 0, and their count."""
    attn = torch.stack(weights, dim=1).to(torch.float64)  # (B, L, H, Tq, Tk)
    queries = query_mask[:, None, None, :].to(torch.float64)  # (B, 1, 1, Tq)
    mass = (attn[..., 0] * queries).sum(-1)
    return mass, queries.sum(-1).expand_as(mass)


class FirstKeyMass(Metric):
    """A ratio estimate under its own name: the default columns and cells fit."""
    name, attention_types, needs = TOY, ("enc-self", "dec-self", "enc-dec"), WEIGHTS
    heatmap = Heatmap(TOY, "toy: attention mass on the first key", (0.0, 1.0))

    def accumulator(self, shape, run):
        return RatioAccumulator(shape, **bootstrap(run))

    def update(self, acc, view):
        acc.update(*first_key_sums(view.weights, view.query_mask))


@pytest.fixture
def toy_metric():
    stats.register(FirstKeyMass())
    try:
        yield TOY
    finally:
        stats.unregister(TOY)


def test_the_built_in_metrics_in_column_order():
    assert stats.METRICS == ("confidence", "lrp", "grad", "positional", "rare", "syntactic",
                             "previous_token", "duplicate_token", "induction", "natural_icl")


def test_a_binding_without_the_hook_of_its_needs_is_refused():
    class NoUpdate(Metric):
        name, attention_types, needs = "no_update", ("enc-self",), WEIGHTS

    with pytest.raises(ValueError, match="no update hook"):
        stats.register(NoUpdate())
    assert "no_update" not in stats.metric_names()


def test_a_registered_metric_reaches_the_table_and_the_plots(toy_metric, toy_data_bin,
                                                             trained_checkpoint, tmp_path):
    options = stats.StatsOptions(metrics=stats.parse_metrics(f"confidence,{toy_metric}"),
                                 replicates=4, cpu=True, log_format="none")
    statistics = stats.compute_head_statistics(str(toy_data_bin.data_bin), trained_checkpoint,
                                               "valid", options)
    out = tmp_path / "stats"
    written = stats.write_statistics(statistics, str(out))

    with open(out / "heads.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [c for c in rows[0] if c.startswith(TOY)] == estimate_columns(TOY)
    assert all(0.0 <= float(r[TOY]) <= 1.0 for r in rows)
    document = json.loads((out / "heads.json").read_text(encoding="utf-8"))
    assert TOY in document["columns"] and document["meta"]["metrics"] == ["confidence", TOY]
    assert all(isinstance(h[TOY], float) for h in document["heads"])

    heatmap = out / f"heatmap_{TOY}.png"
    assert str(heatmap) in written
    os.remove(heatmap)
    assert str(heatmap) in stats.redraw_figures(str(out))  # `fairseq-heads plot DIR`
    assert heatmap.is_file()


def test_an_unregistered_metric_is_refused():
    with pytest.raises(stats.StatsError, match="unknown metric"):
        stats.parse_metrics(TOY)
