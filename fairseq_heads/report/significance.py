"""Paired bootstrap resampling of corpus BLEU (Koehn 2004): is the BLEU difference between two
systems on one test set larger than the luck of which sentences the test set happens to hold?

Sentence-level sufficient statistics (n-gram matches and totals, lengths) come from sacreBLEU,
so every resample is scored by exactly the BLEU of the tables; a resample is a weighted sum of
those rows, not a re-tokenisation. sacreBLEU's own significance module works the same way,
through the same two `BLEU` methods used here.
"""
from typing import NamedTuple, Sequence, Tuple

import numpy as np

from .. import bleu
from ..bleu import bleu_from_statistics  # noqa: F401  (public here too)

DEFAULT_SAMPLES = 1000
DEFAULT_SEED = 12345  # sacreBLEU's default seed for its significance tests


class BleuDifference(NamedTuple):
    delta: float    # BLEU(system) - BLEU(reference system) on the whole test set
    ci_low: float   # 2.5th percentile of the difference over paired resamples
    ci_high: float  # 97.5th percentile
    samples: int


def sentence_statistics(hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """(sentences, statistics) integer array: one row of BLEU sufficient statistics per sentence."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    return np.asarray(bleu.sentence_statistics(hypotheses, references), dtype=np.int64)


def resample_counts(sentences: int, samples: int, seed: int) -> np.ndarray:
    """(samples, sentences): how often each sentence is drawn in each bootstrap resample."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, sentences, size=(samples, sentences))
    return np.stack([np.bincount(row, minlength=sentences) for row in draws])


def bootstrap_bleu(systems: Sequence[np.ndarray], samples: int = DEFAULT_SAMPLES,
                   seed: int = DEFAULT_SEED) -> Tuple[np.ndarray, np.ndarray]:
    """Corpus BLEU of each system on the whole test set, shape (systems,), and on each of
    `samples` resamples of its sentences, shape (samples, systems): every system is scored on
    the same resampled sentences (arrays from `sentence_statistics` on the same references)."""
    if any(s.shape != systems[0].shape for s in systems):
        raise ValueError("statistics of different test sets: "
                         + " vs ".join(str(s.shape) for s in systems))
    counts = resample_counts(systems[0].shape[0], samples, seed)
    resampled = np.array([[bleu_from_statistics(totals) for totals in counts @ system]
                          for system in systems]).T
    full = np.array([bleu_from_statistics(system.sum(0)) for system in systems])
    return full, resampled


def contrast(full: np.ndarray, resampled: np.ndarray, weights: Sequence[float]) -> BleuDifference:
    """sum_i weights[i] * BLEU(system i), with the 95% percentile interval of the same sum over
    the paired resamples (`bootstrap_bleu`'s output). Weights (1, -1) give a difference of two
    systems; (1, -1, -1, 1) a difference of two differences."""
    weights = np.asarray(weights, dtype=float)
    low, high = np.percentile(resampled @ weights, [2.5, 97.5])
    return BleuDifference(float(full @ weights), float(low), float(high), resampled.shape[0])


def paired_bootstrap(system: np.ndarray, reference_system: np.ndarray,
                     samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED) -> BleuDifference:
    """BLEU(system) - BLEU(reference_system) with a 95% percentile interval, both systems scored on
    the same resampled sentences (arrays from `sentence_statistics` on the same references)."""
    return contrast(*bootstrap_bleu([system, reference_system], samples, seed), (1.0, -1.0))


# ------------------------------------------------------------------ perplexity over resampled blocks
def bootstrap_log_perplexity(systems: Sequence[Tuple[np.ndarray, np.ndarray]], samples: int = DEFAULT_SAMPLES,
                             seed: int = DEFAULT_SEED) -> Tuple[np.ndarray, np.ndarray]:
    """Each language model's log perplexity (NLL per target token, nats) on the whole test set,
    shape (systems,), and on each of `samples` resamples of its blocks, shape (samples, systems):
    Koehn (2004)'s paired bootstrap with blocks for sentences, every system on the same resampled
    blocks, each resample pooled as the perplexity pools them (summed NLL over summed tokens).
    A system is (per-block summed NLL, per-block tokens) on the same blocks in the same order."""
    if any(nll.shape != systems[0][0].shape or tokens.shape != nll.shape for nll, tokens in systems):
        raise ValueError("block losses of different test sets: "
                         + " vs ".join(str(nll.shape) for nll, _ in systems))
    counts = resample_counts(systems[0][0].shape[0], samples, seed)
    full = np.array([float(np.sum(nll)) / float(np.sum(tokens)) for nll, tokens in systems])
    resampled = np.stack([(counts @ nll) / (counts @ tokens) for nll, tokens in systems], axis=1)
    return full, resampled


def relative_perplexity_cost(log_perplexity: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """ppl / ppl(reference) - 1 from log perplexities (elementwise: whole test set or resamples)."""
    return np.expm1(np.asarray(log_perplexity) - np.asarray(reference))


# ------------------------------------------------------------------ means over seeds
class SeedMeanDifference(NamedTuple):
    delta: float    # mean over seeds of each seed's difference on the whole test set
    ci_low: float   # interval holding both the spread between seeds and the test set's sampling
    ci_high: float
    seeds: int
    seed_sd: float  # sample standard deviation of the per-seed differences
    test_se: float  # standard error of the mean difference over paired resamples of the test set


def seed_and_test_interval(per_seed: Sequence[float], resampled_means: np.ndarray,
                           confidence: float = 0.95) -> SeedMeanDifference:
    """The mean of per-seed differences d_1..d_n (each seed's model against its own reference, on
    one test set) with an interval for what a reader retraining with new seeds on new test
    sentences would see. Each source of variation gets its own half-width, and the two add in
    quadrature:

        half = sqrt( (t_{n-1} * s / sqrt(n))^2  +  (z * se_test)^2 )

    s the standard deviation of the d_s (Student's interval over the seeds) and se_test the
    bootstrap standard error of the seed mean over `resampled_means` (Koehn 2004: every seed
    scored on the same resample of the test sentences). Seeds that agree leave the bootstrap's
    normal interval; seeds that disagree, Student's over the seeds. The test noise particular
    to each seed is in both terms, so it errs wide: simulated with 2, 3 and 5 seeds and test noise
    shared by the seeds and particular to each (20,000 trials a setting), it covered the true mean
    in 94.9-99.6% of them, where one Welch-Satterthwaite t over the pooled variances covered
    88-93% when the seeds dominated (tests/recipes/test_seed_means.py checks the coverage)."""
    from scipy import stats

    per_seed = np.asarray(per_seed, dtype=float)
    n = per_seed.size
    if n < 2:
        raise ValueError(f"a spread between seeds needs two seeds or more, got {n}")
    seed_sd = float(per_seed.std(ddof=1))
    test_se = float(np.asarray(resampled_means, dtype=float).std(ddof=1))
    tail = 0.5 + confidence / 2
    half = float(np.hypot(stats.t.ppf(tail, n - 1) * seed_sd / n ** 0.5, stats.norm.ppf(tail) * test_se))
    mean = float(per_seed.mean())
    return SeedMeanDifference(mean, mean - half, mean + half, n, seed_sd, test_se)


def seed_interval(per_seed: Sequence[float], confidence: float = 0.95) -> SeedMeanDifference:
    """Student's t interval over the seeds alone: for results that keep no per-sentence scores
    (the LM's perplexities), so that the test set's sampling cannot be resampled."""
    return seed_and_test_interval(per_seed, np.zeros(2), confidence)


def seed_mean_contrast(full: np.ndarray, resampled: np.ndarray,
                       per_seed_weights: Sequence[Sequence[float]],
                       confidence: float = 0.95) -> SeedMeanDifference:
    """`seed_and_test_interval` of linear contrasts, one per seed, over the systems of one
    `bootstrap_bleu` (each weights vector as in `contrast`, e.g. +1 on seed s's pruned model and
    -1 on seed s's control)."""
    weights = np.asarray(per_seed_weights, dtype=float)
    return seed_and_test_interval(weights @ full, resampled @ weights.mean(0), confidence)
