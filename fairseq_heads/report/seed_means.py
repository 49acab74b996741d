"""Means over seeds with intervals that hold the seed spread as well as the test set (issue 37,
item 3): for every L0 layout fine-tuned with several seeds, each seed's ΔBLEU against the λ=0
control of the same seed, their mean, and `significance.seed_and_test_interval` around it; and
the same for L0 against Michel et al.'s heuristic at equal heads (michel.py), seed by seed.

A seed is whatever the models of one row were fine-tuned with: under the converged protocol,
fine-tunes of one shared baseline; under the quick protocol of the GPU queue, fine-tunes of a
baseline of their own (`--set train.seed=N`), so there the interval holds the baseline's seed
too; a folder may mix both (converged fine-tunes of several baselines): a model's seed is then its
(baseline seed, fine-tune seed), its control the λ=0 model of the same pair. Pure functions
over result dicts and translations, no I/O.
"""
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .layout import ALL_L0, ENCODER_L0, HEURISTIC, protocol_of, seed_label, seeds_of
from .michel import heuristic_metric
from .table_basics import MissingInput, Table, by_kind, format_lambda


class TooFewSeeds(MissingInput):
    """No contrast has two seeds: a folder of one seed, which the report shows without this table."""


COLUMNS = ["contrast", "seeds", "heads kept", "Δ per seed", "Δ mean", "seed sd",
           "95% CI low (test set only)", "95% CI high (test set only)",
           "95% CI low (seeds + test set)", "95% CI high (seeds + test set)"]


def _kept(result: dict, kind: str) -> int:
    types = ("enc-self",) if kind in (ENCODER_L0, HEURISTIC) else tuple(result["heads_kept"])
    return sum(result["heads_kept"][t] for t in types)


def control_pairs(results: Sequence[dict], kind: str) -> Dict[Tuple, List[Tuple[dict, dict]]]:
    """{(λ, protocol, gate lr scale): [(L0 model, its same-seed λ=0 control), ...]} for the L0
    models of `kind` with λ > 0, by seed. A seed without its own control is left out: another
    seed's control would put that seed's spread on one side only."""
    controls = {(seeds_of(r), protocol_of(r), r.get("gate_lr_scale")): r
                for r in by_kind(results, kind) if r.get("l0_lambda") == 0}
    grouped: Dict[Tuple, List[Tuple[dict, dict]]] = {}
    for result in sorted(by_kind(results, kind), key=seeds_of):
        if not result.get("l0_lambda"):
            continue
        control = controls.get((seeds_of(result), protocol_of(result), result.get("gate_lr_scale")))
        if control is not None:
            key = (result["l0_lambda"], protocol_of(result), result.get("gate_lr_scale"))
            grouped.setdefault(key, []).append((result, control))
    return grouped


def heuristic_pairs(results: Sequence[dict]) -> Dict[Tuple, List[Tuple[dict, dict]]]:
    """{(metric, λ, protocol): [(L0 model, the heuristic model fine-tuned at its size), ...]}."""
    by_name = {r["name"]: r for r in results}
    grouped: Dict[Tuple, List[Tuple[dict, dict]]] = {}
    for heuristic in sorted(by_kind(results, HEURISTIC), key=seeds_of):
        l0 = by_name.get(heuristic.get("from_model"))
        if l0 is not None:
            key = (heuristic_metric(heuristic), l0.get("l0_lambda"), protocol_of(l0))
            grouped.setdefault(key, []).append((l0, heuristic))
    return grouped


def seed_mean_table(results: Sequence[dict], translations: Dict[str, Tuple[List[str], List[str]]],
                    kinds: Sequence[str] = (ENCODER_L0,), samples: int = 1000) -> Table:
    """One row per contrast measured with two seeds or more: the L0 models of `kinds` against
    their same-seed controls, and (when ENCODER_L0 is among `kinds`) L0 against the heuristic.
    Δ per seed and its mean; the test-set-only interval (paired bootstrap of the seed mean) beside
    the interval that adds the spread between seeds (significance.seed_and_test_interval)."""
    from .significance import bootstrap_bleu, contrast, seed_mean_contrast, sentence_statistics

    groups = []  # (label, kind, [(minuend, subtrahend), ...]), two seeds or more each
    for kind in kinds:
        for (lam, protocol, _), pairs in sorted(control_pairs(results, kind).items(),
                                                key=lambda item: (item[0][1], item[0][0], item[0][2] or 0)):
            groups.append((f"{kind} λ={format_lambda(lam)} − control ({protocol})", kind, pairs))
    if ENCODER_L0 in kinds:
        for (metric, lam, protocol), pairs in sorted(heuristic_pairs(results).items(), key=str):
            groups.append((f"encoder_l0 λ={format_lambda(lam)} − {metric} heuristic ({protocol})",
                           HEURISTIC, pairs))
    groups = [group for group in groups if len({seeds_of(a) for a, _ in group[2]}) >= 2]
    if not groups:
        raise TooFewSeeds("no contrast with two seeds or more (each seed's L0 model and control)")
    systems = list({m["name"]: m for _, _, pairs in groups for pair in pairs for m in pair}.values())
    missing = [r["name"] for r in systems if r["name"] not in translations]
    if missing:
        raise MissingInput("no fairseq-generate output (results/<model>/generate.txt) of " + ", ".join(missing))
    # one bootstrap for every system: the resamples are shared by all rows and seeds
    full, resampled = bootstrap_bleu([sentence_statistics(*translations[r["name"]]) for r in systems], samples)
    index = {r["name"]: i for i, r in enumerate(systems)}
    rows = []
    for label, kind, pairs in groups:
        weights = np.zeros((len(pairs), len(systems)))
        for row, (minuend, subtrahend) in enumerate(pairs):
            weights[row, index[minuend["name"]]] += 1.0
            weights[row, index[subtrahend["name"]]] -= 1.0
        test_only = contrast(full, resampled, weights.mean(0))
        both = seed_mean_contrast(full, resampled, weights)
        kept = [_kept(m, ENCODER_L0 if kind == HEURISTIC else kind) for m, _ in pairs]
        rows.append([label, " ".join(seed_label(m) for m, _ in pairs), " ".join(map(str, kept)),
                     " ".join(f"{d:+.2f}" for d in weights @ full), both.delta, both.seed_sd,
                     test_only.ci_low, test_only.ci_high, both.ci_low, both.ci_high])
    return Table(COLUMNS, rows,
                 f"Δ: BLEU of the first model minus the second's, each seed against its own; heads "
                 f"kept: the L0 model's (encoder_l0: encoder self-attention; all_l0: all types); "
                 f"test set only: the 95% percentile interval of the seed mean over {samples} paired "
                 f"resamples of the test sentences; seeds + test set: the mean ± √((t·s/√n)² + "
                 f"(1.96·bootstrap se)²), t of n-1 degrees of freedom over the n seeds' Δ (docs/"
                 f"pruning.md, 'Means over seeds')")
