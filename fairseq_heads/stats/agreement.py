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

That interval resamples sentences: it says how much the *metrics* move with the data, not
how much a correlation over 8-48 heads says about heads in general.  Two head-level intervals
answer that (docs/metrics.md, "Agreement between metrics"):

- ``fisher_z_ci``: Fisher's z with Fieller, Hartley & Pearson's (1957) variance for Spearman,
  ``tanh(atanh(rho) -+ z_{1-alpha/2} sqrt(1.06 / (n - 3)))`` (:func:`fisher_z_interval`);
- ``head_bootstrap_ci``: the percentile interval of rho over resamples of the heads, with
  replacement, on the point estimates (:func:`head_bootstrap_interval`).

LRP (and layer-normalised gradient) is normalised per layer, so pooling heads of all layers
compares values whose layer means are fixed against a metric whose layer means are not.
``within_layer`` gives the comparison inside layers: the mean over layers of the per-layer
Spearman, with the sentence-bootstrap interval and a head bootstrap stratified by layer.
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations
from typing import Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import torch
from scipy import stats

from ..numbers import json_float
from .streaming import DEFAULT_CONFIDENCE

DEFAULT_HEAD_RESAMPLES = 1000
FIELLER_VARIANCE = 1.06  # var(atanh(Spearman rho)) ~ 1.06 / (n - 3), Fieller et al. (1957)

MetricInput = Tuple[torch.Tensor, Optional[torch.Tensor]]  # (point estimate (*heads), replicates (R, *heads) or None)


class Agreement(NamedTuple):
    rho: float
    ci_low: float
    ci_high: float
    num_heads: int  # heads with both metrics defined
    num_replicates: int  # replicates with a defined correlation


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    keep = ~(np.isnan(a) | np.isnan(b))
    if keep.sum() < 3:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: scipy warns and returns NaN
        rho = stats.spearmanr(a[keep], b[keep]).statistic
    return float(rho)


def _spearman_rows(rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """:func:`spearman` of each pair of rows (R, N), the same numbers, without scipy's per-call
    overhead (a few ms, times R replicates per metric pair): the rows without NaN are ranked at
    once (``rankdata`` along an axis; ranks are exact), then each goes through the step that
    ``spearmanr`` takes, ``np.corrcoef`` of the (N, 2) ranks; rows with a NaN take :func:`spearman`."""
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
        values[row] = spearman(rows_a[row], rows_b[row])
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
    rho = spearman(a, b)
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


# ---------------------------------------------------------------- head-level intervals


def fisher_z_interval(rho: float, num_heads: int, confidence: float = DEFAULT_CONFIDENCE
                      ) -> Tuple[float, float]:
    """Fisher-z interval of a Spearman rho over n heads, with Fieller et al.'s (1957) variance
    1.06 / (n - 3) of atanh(rho): ``tanh(atanh(rho) -+ z sqrt(1.06 / (n - 3)))``.  NaN when
    n <= 3 or rho is undefined; (rho, rho) when |rho| = 1 (atanh is infinite there)."""
    if num_heads <= 3 or math.isnan(rho):
        return float("nan"), float("nan")
    if abs(rho) >= 1.0:
        return float(rho), float(rho)
    half_width = stats.norm.ppf(0.5 + confidence / 2.0) * math.sqrt(FIELLER_VARIANCE / (num_heads - 3))
    centre = math.atanh(rho)
    return math.tanh(centre - half_width), math.tanh(centre + half_width)


def _rank_correlation_rows(rows_a: np.ndarray, rows_b: np.ndarray) -> np.ndarray:
    """Spearman rho of each pair of rows (K, N), vectorised: the Pearson correlation of the
    average ranks; NaN for a constant row; rows holding a NaN take :func:`spearman`."""
    values = np.full(rows_a.shape[0], np.nan)
    complete = ~(np.isnan(rows_a).any(1) | np.isnan(rows_b).any(1))
    if rows_a.shape[1] >= 3 and complete.any():
        ranks_a = stats.rankdata(rows_a[complete], axis=1)
        ranks_b = stats.rankdata(rows_b[complete], axis=1)
        ranks_a -= ranks_a.mean(1, keepdims=True)
        ranks_b -= ranks_b.mean(1, keepdims=True)
        norm = np.sqrt((ranks_a ** 2).sum(1) * (ranks_b ** 2).sum(1))
        with np.errstate(invalid="ignore", divide="ignore"):
            values[complete] = np.where(norm > 0, (ranks_a * ranks_b).sum(1) / norm, np.nan)
    for row in np.flatnonzero(~complete):
        values[row] = spearman(rows_a[row], rows_b[row])
    return values


def _percentiles(values: np.ndarray, confidence: float) -> Tuple[float, float, int]:
    """(low, high, how many) of the defined values' percentile interval."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return float("nan"), float("nan"), 0
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return float(low), float(high), int(values.size)


def head_bootstrap_interval(metric_a, metric_b, resamples: int = DEFAULT_HEAD_RESAMPLES, seed: int = 0,
                            confidence: float = DEFAULT_CONFIDENCE) -> Tuple[float, float, int]:
    """Percentile interval of Spearman rho over resamples of the heads (with replacement) of the
    point estimates, heads where either metric is NaN left out: (low, high, resamples with a
    defined rho).  A resample repeats heads, so its ranks have ties (average ranks)."""
    a, b = _flat(metric_a), _flat(metric_b)
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    if a.size < 3:
        return float("nan"), float("nan"), 0
    heads = np.random.default_rng(seed).integers(a.size, size=(resamples, a.size))
    return _percentiles(_rank_correlation_rows(a[heads], b[heads]), confidence)


def _by_layer(metric) -> np.ndarray:
    """(L, H) float64: a per-head metric laid out by layer (a flat vector is one layer)."""
    values = torch.as_tensor(metric, dtype=torch.float64).numpy()
    return values.reshape(1, -1) if values.ndim < 2 else values.reshape(values.shape[0], -1)


def _flat(metric) -> np.ndarray:
    return torch.as_tensor(metric, dtype=torch.float64).reshape(-1).numpy()


def _mean_over_layers(per_layer: np.ndarray) -> np.ndarray:
    """Mean over the last axis of the defined per-layer rhos; NaN where none is defined."""
    defined = ~np.isnan(per_layer)
    total = np.where(defined, per_layer, 0.0).sum(-1)
    count = defined.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def within_layer_spearman(metric_a, metric_b) -> Tuple[float, int]:
    """(mean over layers of the Spearman rho of the layer's heads, layers with a defined rho).

    A comparison inside each layer, which a metric normalised per layer (LRP) needs: pooled over
    layers, its fixed layer means meet the other metric's differences between layers."""
    a, b = _by_layer(metric_a), _by_layer(metric_b)
    per_layer = np.array([spearman(a[layer], b[layer]) for layer in range(a.shape[0])])
    return float(_mean_over_layers(per_layer)), int((~np.isnan(per_layer)).sum())


def within_layer_agreement(metric_a, metric_b, replicates_a=None, replicates_b=None,
                           resamples: int = DEFAULT_HEAD_RESAMPLES, seed: int = 0,
                           confidence: float = DEFAULT_CONFIDENCE) -> Dict[str, object]:
    """The within-layer mean rho with its sentence-bootstrap interval (the metrics' replicates,
    as for the pooled rho) and a head bootstrap stratified by layer (each layer's heads resampled
    within it); JSON-ready."""
    a, b = _by_layer(metric_a), _by_layer(metric_b)
    rho, layers = within_layer_spearman(a, b)
    low = high = float("nan")
    used = 0
    if replicates_a is not None or replicates_b is not None:
        count = (replicates_a if replicates_a is not None else replicates_b).shape[0]

        def rows(point, replicates):
            if replicates is None:
                return np.broadcast_to(point, (count,) + point.shape)
            return torch.as_tensor(replicates, dtype=torch.float64).reshape((count,) + point.shape).numpy()

        rows_a, rows_b = rows(a, replicates_a), rows(b, replicates_b)
        per_layer = np.stack([_rank_correlation_rows(np.ascontiguousarray(rows_a[:, layer]),
                                                     np.ascontiguousarray(rows_b[:, layer]))
                              for layer in range(a.shape[0])], axis=-1)
        low, high, used = _percentiles(_mean_over_layers(per_layer), confidence)
    generator = np.random.default_rng(seed)
    heads = generator.integers(a.shape[1], size=(resamples, a.shape[0], a.shape[1]))
    per_layer = np.stack([_rank_correlation_rows(a[layer][heads[:, layer]], b[layer][heads[:, layer]])
                          for layer in range(a.shape[0])], axis=-1)
    head_low, head_high, head_used = _percentiles(_mean_over_layers(per_layer), confidence)
    return {"spearman_mean": json_float(rho), "layers": layers,
            "ci_low": json_float(low), "ci_high": json_float(high), "num_replicates": used,
            "head_bootstrap_ci": [json_float(head_low), json_float(head_high)],
            "head_resamples": head_used}


def head_level_agreement(metric_a, metric_b, rho: float, num_heads: int,
                         resamples: int = DEFAULT_HEAD_RESAMPLES, seed: int = 0,
                         confidence: float = DEFAULT_CONFIDENCE) -> Dict[str, object]:
    """The pooled rho's head-level intervals (module doc), JSON-ready."""
    fisher_low, fisher_high = fisher_z_interval(rho, num_heads, confidence)
    low, high, used = head_bootstrap_interval(metric_a, metric_b, resamples, seed, confidence)
    return {"fisher_z_ci": [json_float(fisher_low), json_float(fisher_high)],
            "head_bootstrap_ci": [json_float(low), json_float(high)], "head_resamples": used}


def agreement_to_json(agreement: Agreement) -> Dict[str, object]:
    """JSON-ready dict (NaN -> None)."""
    return {
        "spearman": json_float(agreement.rho),
        "ci_low": json_float(agreement.ci_low),  # the sentence bootstrap: metric noise only
        "ci_high": json_float(agreement.ci_high),
        "ci_kind": "sentence bootstrap",
        "num_heads": agreement.num_heads,
        "num_replicates": agreement.num_replicates,
    }


def agreement_report(
    metrics_by_type: Mapping[str, Mapping[str, MetricInput]], confidence: float = DEFAULT_CONFIDENCE,
    head_resamples: int = DEFAULT_HEAD_RESAMPLES, seed: int = 0,
) -> Dict[str, Dict[str, Dict[str, object]]]:
    """All pairwise agreements per attention type, JSON-ready.

    ``metrics_by_type[type][metric_name] = (estimate (L, H), replicates (R, L, H) or None)``.
    Returns ``{type: {"<name_a>~<name_b>": {"spearman", "ci_low", "ci_high" (sentence
    bootstrap), "ci_kind", "num_heads", "num_replicates", "fisher_z_ci", "head_bootstrap_ci",
    "head_resamples", "within_layer": {...}, "metrics": [name_a, name_b]}}}`` with metric pairs
    in the given order.  Every pair uses the same head resamples (one seed).
    """
    report: Dict[str, Dict[str, Dict[str, object]]] = {}
    for attention_type, metrics in metrics_by_type.items():
        pairs: Dict[str, Dict[str, object]] = {}
        for (name_a, (est_a, rep_a)), (name_b, (est_b, rep_b)) in combinations(metrics.items(), 2):
            agreement = spearman_agreement(est_a, est_b, rep_a, rep_b, confidence)
            entry = agreement_to_json(agreement)
            entry.update(head_level_agreement(est_a, est_b, agreement.rho, agreement.num_heads,
                                              head_resamples, seed, confidence))
            entry["within_layer"] = within_layer_agreement(est_a, est_b, rep_a, rep_b, head_resamples,
                                                           seed, confidence)
            entry["metrics"] = [name_a, name_b]
            pairs[f"{name_a}~{name_b}"] = entry
        report[attention_type] = pairs
    return report
