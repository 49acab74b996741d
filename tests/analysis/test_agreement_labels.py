import json

import numpy as np
import pytest

import torch

from fairseq_heads.stats.agreement import agreement_report, spearman_agreement
from fairseq_heads.stats.metrics.confidence import ConfidenceAccumulator
from fairseq_heads.stats.labels import head_labels


def _confidence(masks, seed=0):
    tokens, _ = masks([4, 7, 5, 3, 6, 8], left_pad=True)
    g = torch.Generator().manual_seed(seed)
    # heads get increasingly peaked attention, so their confidences differ clearly
    logits = torch.randn(6, 3, 4, tokens.shape[1], tokens.shape[1], generator=g)
    logits = logits * torch.linspace(0.2, 4.0, 12).reshape(1, 3, 4, 1, 1)
    attn = logits.masked_fill(~tokens[:, None, None, None, :], float("-inf")).softmax(-1)
    acc = ConfidenceAccumulator((3, 4), replicates=50)
    acc.update(attn, tokens, tokens)
    return acc.finalize().estimate, acc.replicate_estimates()


def test_identical_metrics_agree_perfectly_with_tight_interval(masks):
    est, reps = _confidence(masks)
    result = spearman_agreement(est, est.clone(), reps, reps.clone())
    assert result.rho == 1.0 and result.ci_low >= 0.999 and result.ci_high <= 1.0 + 1e-12
    assert result.num_heads == 12 and result.num_replicates == 50
    reversed_ = spearman_agreement(est, -est, reps, -reps)
    assert reversed_.rho == -1.0 and reversed_.ci_high <= -0.999


def test_report_is_json_ready_and_handles_fixed_metrics(masks):
    est, reps = _confidence(masks)
    gate = torch.arange(12.0).reshape(3, 4)  # a parameter: no replicates
    constant = torch.ones(3, 4)
    report = agreement_report({"enc-self": {"confidence": (est, reps), "gate": (gate, None), "flat": (constant, None)}})
    text = json.dumps(report)  # no NaN / tensors left
    pair = report["enc-self"]["confidence~gate"]
    assert pair["metrics"] == ["confidence", "gate"] and pair["ci_low"] <= pair["spearman"] <= pair["ci_high"]
    assert report["enc-self"]["confidence~flat"]["spearman"] is None
    assert "NaN" not in text


def test_head_labels_name_heads_by_type_layer_head():
    shares = torch.zeros(2, 3, 5, dtype=torch.float64)
    shares[1, 2, 1] = 0.95
    rarest = torch.zeros(2, 3, dtype=torch.float64)
    rarest[0, 0] = 0.7
    syntactic = {("nsubj", "dep->head"): (torch.full((2, 3), 0.3, dtype=torch.float64), 0.25)}
    syntactic[("nsubj", "dep->head")][0][0, 1] = 0.5
    labels = head_labels("enc-self", positional=(shares, (-2, -1, 0, 1, 2)), rarest_share=rarest, syntactic=syntactic)
    assert labels == {
        ("enc-self", 1, 2): ["positional(-1)"],
        ("enc-self", 0, 0): ["rare"],
        ("enc-self", 0, 1): ["syntactic(nsubj,dep->head)"],
    }


def test_replicate_rows_give_the_per_row_spearman_exactly():
    from fairseq_heads.stats.agreement import spearman, _spearman_rows

    rng = np.random.default_rng(0)
    a, b = np.round(rng.normal(size=(40, 12)), 0), rng.normal(size=(40, 12))  # ties in a
    a[rng.random(a.shape) < 0.03] = np.nan  # some rows take the NaN path
    a[5], b[6] = 1.0, 2.0  # constant rows: undefined
    expected = np.array([spearman(a[r], b[r]) for r in range(40)])
    assert np.array_equal(_spearman_rows(a, b), expected, equal_nan=True)
    assert np.isnan(expected[5]) and np.isnan(expected[6]) and (~np.isnan(expected)).sum() > 20


# ---------------------------------------------------------------- head-level intervals

def test_fisher_z_interval_is_the_closed_form_and_scipys_pearson_interval_widened_by_1_06():
    import math

    from scipy import stats

    from fairseq_heads.stats.agreement import fisher_z_interval

    low, high = fisher_z_interval(0.24, 48)  # the issue's enc-self confidence~LRP
    half = 1.959963984540054 * math.sqrt(1.06 / 45)
    assert (low, high) == pytest.approx((math.tanh(math.atanh(0.24) - half), math.tanh(math.atanh(0.24) + half)),
                                        abs=1e-12)
    assert -0.07 < low < -0.04 and 0.48 < high < 0.51  # "roughly [-0.06, 0.49]"
    # on ranks, Spearman = Pearson: scipy's Fisher interval uses variance 1/(n-3), ours 1.06/(n-3)
    rng = np.random.default_rng(3)
    x = rng.normal(size=30)
    y = x + rng.normal(size=30)
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    pearson = stats.pearsonr(rx, ry)
    rho = stats.spearmanr(x, y).statistic
    assert rho == pytest.approx(pearson.statistic, abs=1e-12)
    scipy_low, scipy_high = pearson.confidence_interval(0.95)
    low, high = fisher_z_interval(rho, 30)
    ratio = (math.atanh(high) - math.atanh(rho)) / (math.atanh(scipy_high) - math.atanh(rho))
    assert ratio == pytest.approx(math.sqrt(1.06), rel=1e-9)
    assert (math.atanh(rho) - math.atanh(low)) / (math.atanh(rho) - math.atanh(scipy_low)) == pytest.approx(
        math.sqrt(1.06), rel=1e-9)
    assert all(math.isnan(v) for v in fisher_z_interval(0.5, 3)) and fisher_z_interval(1.0, 10) == (1.0, 1.0)


def test_vectorised_rank_correlation_is_scipys_spearman_row_by_row():
    from scipy import stats

    from fairseq_heads.stats.agreement import _rank_correlation_rows

    rng = np.random.default_rng(1)
    a, b = np.round(rng.normal(size=(50, 9)), 0), rng.normal(size=(50, 9))  # ties in a
    a[4] = 2.0  # constant: undefined
    expected = np.array([stats.spearmanr(a[r], b[r]).statistic if r != 4 else np.nan for r in range(50)])
    assert np.allclose(_rank_correlation_rows(a, b), expected, atol=1e-12, equal_nan=True)


def test_head_bootstrap_is_exact_for_monotone_heads_and_near_fisher_z_for_many_heads():
    from fairseq_heads.stats.agreement import fisher_z_interval, head_bootstrap_interval

    x = torch.arange(12.0).reshape(3, 4)
    assert head_bootstrap_interval(x, x ** 3, resamples=200)[:2] == (1.0, 1.0)
    assert head_bootstrap_interval(x, -x, resamples=200)[:2] == (-1.0, -1.0)
    rng = np.random.default_rng(0)
    a = rng.normal(size=400)
    b = 0.5 * a + rng.normal(size=400)
    from scipy import stats
    rho = stats.spearmanr(a, b).statistic
    low, high, used = head_bootstrap_interval(torch.tensor(a), torch.tensor(b), resamples=1000, seed=5)
    fisher = fisher_z_interval(rho, 400)
    assert used == 1000 and low < rho < high
    assert (high - low) == pytest.approx(fisher[1] - fisher[0], rel=0.25)  # two estimates of one width
    assert head_bootstrap_interval(torch.tensor(a), torch.tensor(b), 1000, seed=5) == (low, high, used)


def test_within_layer_agreement_sees_through_per_layer_normalisation():
    """LRP-like b sums to 1 in each layer; a grows from layer to layer. Inside each layer the two
    rank the heads alike (rho 1); pooled over layers, b's equal layer sums hide a's layer trend."""
    from scipy import stats

    from fairseq_heads.stats.agreement import spearman_agreement, within_layer_agreement, within_layer_spearman

    a = torch.tensor([[1.0, 2.0, 3.0, 4.0], [11.0, 12.0, 13.0, 14.0]])
    b = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]])
    assert within_layer_spearman(a, b) == (1.0, 2)
    pooled = spearman_agreement(a, b).rho
    assert pooled == pytest.approx(stats.spearmanr(a.reshape(-1), b.reshape(-1)).statistic) and pooled < 0.8
    opposite = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]])  # -1 in layer 0, +1 in layer 1
    assert within_layer_spearman(a, opposite) == (0.0, 2)
    replicates = a.expand(20, 2, 4)  # no sampling noise: the sentence interval is the point
    within = within_layer_agreement(a, b, replicates, b.expand(20, 2, 4), resamples=300)
    assert within["spearman_mean"] == 1.0 and within["layers"] == 2
    assert (within["ci_low"], within["ci_high"], within["num_replicates"]) == (1.0, 1.0, 20)
    assert within["head_bootstrap_ci"] == [1.0, 1.0]  # any resample of a layer's heads keeps rho 1
    mixed = within_layer_agreement(a, opposite, resamples=300)
    assert mixed["ci_low"] is None and -1.0 <= mixed["head_bootstrap_ci"][0] <= 0.0 <= mixed["head_bootstrap_ci"][1]


def test_report_entries_name_their_intervals(masks):
    est, reps = _confidence(masks)
    gate = torch.arange(12.0).reshape(3, 4)
    entry = agreement_report({"enc-self": {"confidence": (est, reps), "gate": (gate, None)}},
                             head_resamples=100)["enc-self"]["confidence~gate"]
    assert entry["ci_kind"] == "sentence bootstrap" and entry["head_resamples"] == 100
    for interval in (entry["fisher_z_ci"], entry["head_bootstrap_ci"]):
        assert interval[0] <= entry["spearman"] <= interval[1]
    # 12 heads: a head-level interval is wider than the sentence bootstrap's
    assert entry["fisher_z_ci"][1] - entry["fisher_z_ci"][0] > entry["ci_high"] - entry["ci_low"]
    assert set(entry["within_layer"]) == {"spearman_mean", "layers", "ci_low", "ci_high", "num_replicates",
                                          "head_bootstrap_ci", "head_resamples"}
    assert entry["within_layer"]["layers"] == 3
