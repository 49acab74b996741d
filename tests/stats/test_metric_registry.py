"""Adding a metric is one spec: a toy metric registered here (no other module touched) gets its
columns in heads.csv and heads.json and its heatmap from `stats` and from the plot step."""
import csv
import json
import os

import pytest
import torch

from fairseq_heads import stats
from fairseq_heads.stats.registry import WEIGHTS, Heatmap, Metric, bootstrap
from fairseq_heads.stats.streaming import RatioAccumulator, estimate_cells, estimate_columns

TOY = "first_key_mass"


def first_key_sums(weights, query_mask):
    """Per sentence: summed attention of the real queries on key position 0, and their count."""
    attn = torch.stack(weights, dim=1).to(torch.float64)  # (B, L, H, Tq, Tk)
    queries = query_mask[:, None, None, :].to(torch.float64)  # (B, 1, 1, Tq)
    mass = (attn[..., 0] * queries).sum(-1)
    return mass, queries.sum(-1).expand_as(mass)


@pytest.fixture
def toy_metric():
    stats.register(Metric(
        TOY, ("enc-self", "dec-self", "enc-dec"), WEIGHTS,
        accumulator=lambda shape, run: RatioAccumulator(shape, **bootstrap(run)),
        update=lambda acc, view: acc.update(*first_key_sums(view.weights, view.query_mask)),
        columns=lambda run: estimate_columns(TOY),
        cells=lambda result, index, run: estimate_cells(TOY, result, index),
        heatmap=Heatmap(TOY, "toy: attention mass on the first key", (0.0, 1.0))))
    try:
        yield TOY
    finally:
        stats.unregister(TOY)


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
