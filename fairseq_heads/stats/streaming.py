"""Streaming ratio estimates with an online Poisson bootstrap.

Every per-head statistic in this package is a *ratio of sums over sentences*:

    estimate = sum_i num_i / sum_i den_i

where ``i`` runs over sentences, ``num_i`` is e.g. the summed max attention of
a head over the query tokens of sentence ``i`` and ``den_i`` the number of
those query tokens.  Sentences, not tokens, are the resampling unit, because
tokens of one sentence are strongly correlated (a cluster bootstrap).

Uncertainty comes from the *Poisson bootstrap* (Hanley & MacGibbon 2006;
Chamandy et al. 2012): for every replicate ``r = 1..R`` each sentence receives
an independent integer weight ``w_ir ~ Poisson(1)``, and the replicate
estimate is ``sum_i w_ir num_i / sum_i w_ir den_i``.  Only the weighted sums
are stored, so memory is ``O(R * prod(shape))`` whatever the number of
sentences.  The 95% interval is the percentile interval of the R replicate
estimates.

Weights are drawn from a seeded ``torch.Generator`` one sentence after the
other, so (a) feeding the same sentences in chunks of any size gives exactly
the same replicates as one big update, and (b) two accumulators with the same
seed that see the same sentences in the same order use *the same* resamples —
which is what makes joint statistics of several metrics (e.g. the Spearman
correlation in :mod:`agreement`) a valid bootstrap.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence, Tuple

import torch

from ..numbers import as_float

DEFAULT_REPLICATES = 200
DEFAULT_SEED = 0
DEFAULT_CONFIDENCE = 0.95

# Poisson(1) CDF up to k=30; the tail beyond is < 1e-33, far below float64
# resolution of a uniform draw, so inversion through this table is exact.
_POISSON1_CDF = torch.tensor(
    [math.exp(-1.0) * sum(1.0 / math.factorial(j) for j in range(k + 1)) for k in range(31)],
    dtype=torch.float64,
)


class RatioEstimate(NamedTuple):
    """Result of :meth:`RatioAccumulator.finalize` (all tensors have the accumulator's shape).

    estimate: sum(num) / sum(den); NaN where sum(den) == 0.
    count:    sum(den) (e.g. number of query tokens / sentences that contributed).
    ci_low, ci_high: percentile bootstrap interval (default 95%); NaN where undefined.
    """

    estimate: torch.Tensor
    count: torch.Tensor
    ci_low: torch.Tensor
    ci_high: torch.Tensor


def poisson1_weights(num_units: int, replicates: int, generator: torch.Generator) -> torch.Tensor:
    """Integer Poisson(1) bootstrap weights, shape (num_units, replicates), float64.

    Drawn by inverting the Poisson(1) CDF on uniforms taken row by row (unit by
    unit) from ``generator``, so splitting units across calls does not change
    the stream.
    """
    uniforms = torch.rand(num_units, replicates, generator=generator, dtype=torch.float64)
    return torch.searchsorted(_POISSON1_CDF, uniforms, right=True).to(torch.float64)


def ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator with NaN (instead of inf or 0/0 warnings) where denominator == 0."""
    out = numerator / denominator.where(denominator != 0, torch.ones_like(denominator))
    return out.masked_fill(denominator == 0, float("nan"))


def percentile_interval(
    replicate_estimates: torch.Tensor, confidence: float = DEFAULT_CONFIDENCE
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Percentile bootstrap interval over dim 0 of (R, *shape), ignoring NaN replicates.

    A replicate is NaN when its resample happened to give the cell zero weight;
    dropping those is the usual conditional-on-defined choice.  Cells with no
    defined replicate get NaN.
    """
    alpha = (1.0 - confidence) / 2.0
    q = torch.tensor([alpha, 1.0 - alpha], dtype=replicate_estimates.dtype)
    bounds = torch.nanquantile(replicate_estimates, q, dim=0)
    return bounds[0], bounds[1]


class RatioAccumulator:
    """Streaming ratio estimator ``sum(num) / sum(den)`` with an online Poisson bootstrap.

    Args:
        shape: shape of one sentence's statistic (e.g. ``(num_layers, num_heads)``).
        replicates: number of bootstrap replicates R.
        seed: seed of the weight generator.  Use the same seed (and the same
            sentence order) for accumulators whose replicates will be combined.
        confidence: coverage of the percentile interval returned by ``finalize``.

    State: two float64 tensors of ``shape`` and two of ``(R, *shape)`` plus the
    generator; independent of the number of sentences.
    """

    def __init__(
        self,
        shape: Sequence[int],
        replicates: int = DEFAULT_REPLICATES,
        seed: int = DEFAULT_SEED,
        confidence: float = DEFAULT_CONFIDENCE,
    ):
        self.shape = tuple(int(s) for s in shape)
        self.replicates = int(replicates)
        self.seed = int(seed)
        self.confidence = float(confidence)
        self.generator = torch.Generator().manual_seed(self.seed)
        self.num_sum = torch.zeros(self.shape, dtype=torch.float64)
        self.den_sum = torch.zeros(self.shape, dtype=torch.float64)
        self.boot_num_sum = torch.zeros((self.replicates,) + self.shape, dtype=torch.float64)
        self.boot_den_sum = torch.zeros((self.replicates,) + self.shape, dtype=torch.float64)
        self.num_units = 0

    def update(self, numerator: torch.Tensor, denominator: torch.Tensor) -> None:
        """Add N sentences; both arguments are (N, *shape) (denominator may broadcast to it).

        Every row consumes one set of bootstrap weights, even if its denominator
        is zero, so that accumulators fed the same sentence sequence stay in step.
        """
        numerator = torch.as_tensor(numerator).detach().to(torch.float64).cpu()
        denominator = torch.as_tensor(denominator).detach().to(torch.float64).cpu()
        numerator, denominator = torch.broadcast_tensors(numerator, denominator)
        if tuple(numerator.shape[1:]) != self.shape:
            raise ValueError(f"expected per-sentence shape {self.shape}, got {tuple(numerator.shape[1:])}")
        n = numerator.shape[0]
        if n == 0:
            return
        weights = poisson1_weights(n, self.replicates, self.generator)  # (N, R)
        self.num_sum += numerator.sum(0)
        self.den_sum += denominator.sum(0)
        # (R, N) @ (N, prod(shape)) -> (R, prod(shape))
        self.boot_num_sum += (weights.T @ numerator.reshape(n, -1)).reshape(self.boot_num_sum.shape)
        self.boot_den_sum += (weights.T @ denominator.reshape(n, -1)).reshape(self.boot_den_sum.shape)
        self.num_units += n

    def merge(self, other: "RatioAccumulator") -> "RatioAccumulator":
        """Add another accumulator's sums into this one (e.g. from another worker).

        The point estimate equals the one-shot estimate over both sentence sets.
        For valid replicates the two accumulators must have drawn independent
        weights, i.e. been created with *different* seeds.
        """
        if other.shape != self.shape or other.replicates != self.replicates:
            raise ValueError("can only merge accumulators with the same shape and number of replicates")
        self.num_sum += other.num_sum
        self.den_sum += other.den_sum
        self.boot_num_sum += other.boot_num_sum
        self.boot_den_sum += other.boot_den_sum
        self.num_units += other.num_units
        return self

    def replicate_estimates(self) -> torch.Tensor:
        """Per-replicate ratio estimates, shape (R, *shape); NaN where a replicate's denominator is 0."""
        return ratio(self.boot_num_sum, self.boot_den_sum)

    def finalize(self) -> RatioEstimate:
        """(estimate, count, ci_low, ci_high); see :class:`RatioEstimate`."""
        estimate = ratio(self.num_sum, self.den_sum)
        ci_low, ci_high = percentile_interval(self.replicate_estimates(), self.confidence)
        undefined = self.den_sum == 0
        ci_low = ci_low.masked_fill(undefined, float("nan"))
        ci_high = ci_high.masked_fill(undefined, float("nan"))
        return RatioEstimate(estimate, self.den_sum.clone(), ci_low, ci_high)

    def state_tensors(self) -> Tuple[torch.Tensor, ...]:
        """All stored sums (to check / serialise the state; its size does not grow with N)."""
        return (self.num_sum, self.den_sum, self.boot_num_sum, self.boot_den_sum)


class PairedRatioAccumulator:
    """Two ratios over the same units and the same denominator (e.g. an attention mass and its
    chance level), one bootstrap stream: finalize gives a pair of RatioEstimate of head_shape;
    replicates are those of the first."""

    def __init__(self, head_shape: Sequence[int], replicates: int = DEFAULT_REPLICATES,
                 seed: int = DEFAULT_SEED):
        self.ratio = RatioAccumulator(tuple(head_shape) + (2,), replicates=replicates, seed=seed)

    def update_pair(self, first: torch.Tensor, second: torch.Tensor, count: torch.Tensor) -> None:
        self.ratio.update(torch.stack([first, second], -1), torch.stack([count, count], -1))

    def finalize(self) -> Tuple[RatioEstimate, RatioEstimate]:
        result = self.ratio.finalize()
        return tuple(RatioEstimate(*(t[..., i] for t in result)) for i in range(2))

    def replicate_estimates(self) -> torch.Tensor:
        return self.ratio.replicate_estimates()[..., 0]


ESTIMATE_SUFFIXES = ("", "_ci_low", "_ci_high", "_count")  # a RatioEstimate's table columns


def estimate_columns(prefix: str, suffixes=ESTIMATE_SUFFIXES):
    """The heads-table columns of one RatioEstimate: PREFIX, PREFIX_ci_low, _ci_high, _count."""
    return [prefix + suffix for suffix in suffixes]


def estimate_cells(prefix: str, estimate: RatioEstimate, index, suffixes=ESTIMATE_SUFFIXES):
    """{column: float} of one head (``index`` into the estimate's tensors) for those columns."""
    values = dict(zip(ESTIMATE_SUFFIXES, (estimate.estimate, estimate.ci_low, estimate.ci_high,
                                          estimate.count)))
    return {prefix + suffix: as_float(values[suffix][index]) for suffix in suffixes}
