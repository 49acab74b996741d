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
