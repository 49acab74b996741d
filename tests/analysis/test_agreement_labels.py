import json

import numpy as np

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
    from fairseq_heads.stats.agreement import _spearman, _spearman_rows

    rng = np.random.default_rng(0)
    a, b = np.round(rng.normal(size=(40, 12)), 0), rng.normal(size=(40, 12))  # ties in a
    a[rng.random(a.shape) < 0.03] = np.nan  # some rows take the NaN path
    a[5], b[6] = 1.0, 2.0  # constant rows: undefined
    expected = np.array([_spearman(a[r], b[r]) for r in range(40)])
    assert np.array_equal(_spearman_rows(a, b), expected, equal_nan=True)
    assert np.isnan(expected[5]) and np.isnan(expected[6]) and (~np.isnan(expected)).sum() > 20
