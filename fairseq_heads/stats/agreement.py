"""Agreement between per-head importance / behaviour metrics (Spearman rank correlation).

Definition: for one attention type, flatten each metric to a vector over that type's heads
(layer-major, the order of ``(L, H)``), drop heads where either metric is NaN, and compute
``rho = scipy.stats.spearmanr(a, b)``.

Interval: the percentile interval (default 95%) of ``spearmanr(a_r, b_r)`` over bootstrap
replicates r, where ``a_r`` / ``b_r`` are the metrics' replicate estimates (R, *heads) from
the accumulators' ``replicate_estimates()``.  This is a proper joint bootstrap only when
both metrics' replicates come from the same resamples, i.e. accumulators created with the
same seed and fed the same sentences in the same order (see :mod:`streaming`).  A metric
without sampling uncertainty (e.g. gate P(open), a model parameter) is passed with
``replicates=None`` and enters every replicate with its point value.
Replicates where the correlation is undefined (constant vector, < 3 heads) are dropped.
"""

from __future__ import annotations

import warnings
from itertools import combinations
from typing import Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import torch
from scipy import stats

from ..numbers import json_float
from .streaming import DEFAULT_CONFIDENCE

MetricInput = Tuple[torch.Tensor, Optional[torch.Tensor]]  # (point estimate (*heads), replicates (R, *heads) or None)


class Agreement(NamedTuple):
    rho: float
    ci_low: float
    ci_high: float
    num_heads: int  # heads with both metrics defined
    num_replicates: int  # replicates with a defined correlation


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    keep = ~(np.isnan(a) | np.isnan(b))
    if keep.sum() < 3:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: scipy warns and returns NaN
        rho = stats.spearmanr(a[keep], b[keep]).statistic
    return float(rho)


def _spearman_rows(rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """:func:`_spearman` of each pair of rows (R, N), the same numbers, without scipy's per-call
    overhead (a few ms, times R replicates per metric pair): the rows without NaN are ranked at
    once (``rankdata`` along an axis; ranks are exact), then each goes through the step that
    ``spearmanr`` takes, ``np.corrcoef`` of the (N, 2) ranks; rows with a NaN take :func:`_spearman`."""
    values = np.full(rows_a.shape[0], np.nan)
    complete = ~(np.isnan(rows_a).any(1) | np.isnan(rows_b).any(1))
    if rows_a.shape[1] >= 3 and complete.any():
        a, b = rows_a[complete], rows_b[complete]
        ranks_a, ranks_b = stats.rankdata(a, axis=1), stats.rankdata(b, axis=1)
        constant = (a == a[:, :1]).all(1) | (b == b[:, :1]).all(1)  # undefined: spearmanr's NaN
        for i, row in enumerate(np.flatnonzero(complete)):
            if not constant[i]:
                values[row] = np.corrcoef(np.column_stack((ranks_a[i], ranks_b[i])), rowvar=False)[1, 0]
    for row in np.flatnonzero(~complete):
        values[row] = _spearman(rows_a[row], rows_b[row])
    return values


def spearman_agreement(
    metric_a: torch.Tensor,
    metric_b: torch.Tensor,
    replicates_a: Optional[torch.Tensor] = None,
    replicates_b: Optional[torch.Tensor] = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Agreement:
    """Spearman rho between two per-head metric tensors of equal shape, with a bootstrap interval."""
    a = torch.as_tensor(metric_a, dtype=torch.float64).reshape(-1).numpy()
    b = torch.as_tensor(metric_b, dtype=torch.float64).reshape(-1).numpy()
    if a.shape != b.shape:
        raise ValueError(f"metrics cover different numbers of heads: {a.size} vs {b.size}")
    keep = ~(np.isnan(a) | np.isnan(b))
    rho = _spearman(a, b)
    if replicates_a is None and replicates_b is None:
        return Agreement(rho, float("nan"), float("nan"), int(keep.sum()), 0)
    reps = [r for r in (replicates_a, replicates_b) if r is not None]
    num_replicates = reps[0].shape[0]
    if any(r.shape[0] != num_replicates for r in reps):
        raise ValueError("replicate counts differ")

    def as_rows(point: np.ndarray, replicates: Optional[torch.Tensor]) -> np.ndarray:
        if replicates is None:
            return np.broadcast_to(point, (num_replicates, point.size))
        return torch.as_tensor(replicates, dtype=torch.float64).reshape(num_replicates, -1).numpy()

    rows_a, rows_b = as_rows(a, replicates_a), as_rows(b, replicates_b)
    values = _spearman_rows(np.asarray(rows_a, dtype=np.float64), np.asarray(rows_b, dtype=np.float64))
    values = values[~np.isnan(values)]
    if values.size == 0:
        return Agreement(rho, float("nan"), float("nan"), int(keep.sum()), 0)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return Agreement(rho, float(low), float(high), int(keep.sum()), int(values.size))


def agreement_to_json(agreement: Agreement) -> Dict[str, object]:
    """JSON-ready dict (NaN -> None)."""
    return {
        "spearman": json_float(agreement.rho),
        "ci_low": json_float(agreement.ci_low),
        "ci_high": json_float(agreement.ci_high),
        "num_heads": agreement.num_heads,
        "num_replicates": agreement.num_replicates,
    }


def agreement_report(
    metrics_by_type: Mapping[str, Mapping[str, MetricInput]], confidence: float = DEFAULT_CONFIDENCE
) -> Dict[str, Dict[str, Dict[str, object]]]:
    """All pairwise agreements per attention type, JSON-ready.

    ``metrics_by_type[type][metric_name] = (estimate (*heads), replicates (R, *heads) or None)``.
    Returns ``{type: {"<name_a>~<name_b>": {"spearman", "ci_low", "ci_high", "num_heads",
    "num_replicates", "metrics": [name_a, name_b]}}}`` with metric pairs in the given order.
    """
    report: Dict[str, Dict[str, Dict[str, object]]] = {}
    for attention_type, metrics in metrics_by_type.items():
        pairs: Dict[str, Dict[str, object]] = {}
        for (name_a, (est_a, rep_a)), (name_b, (est_b, rep_b)) in combinations(metrics.items(), 2):
            entry = agreement_to_json(spearman_agreement(est_a, est_b, rep_a, rep_b, confidence))
            entry["metrics"] = [name_a, name_b]
            pairs[f"{name_a}~{name_b}"] = entry
        report[attention_type] = pairs
    return report
