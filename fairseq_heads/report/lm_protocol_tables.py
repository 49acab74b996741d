"""The language model's converged-protocol tables (pure functions on result-file dicts): which
protocol and seed each L0 model had, and the fair form of "pruning a trained model beats
training the small layout from scratch" — each side against its own full layout.

For a converged L0 model of seed s at λ, with its λ=0 control of the same seed, its layout
trained from scratch, and the full layout trained from scratch (seed s):

    cost from trained  = ppl(pruned) / ppl(control) - 1
    cost from scratch  = ppl(layout from scratch) / ppl(full layout from scratch) - 1
    trained advantage  = cost from scratch - cost from trained     (> 0: the paper's claim)

The relative form takes the two training schedules out of the comparison; the absolute
perplexities stay in the table beside it.
"""
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .layout import seed_label, seeds_of
from .significance import (bootstrap_log_perplexity, relative_perplexity_cost, seed_and_test_interval,
                           seed_interval)
from .table_basics import protocol_and_seed


def has_converged(results: Sequence[dict]) -> bool:
    return any(r.get("protocol") == "converged" for r in results)


def training_updates(result: dict) -> Optional[int]:
    training = result.get("training") or {}
    return training.get("updates")


def relative_cost(perplexity: float, reference: float) -> float:
    return perplexity / reference - 1.0


def control_of(result: dict, l0_results: Sequence[dict]) -> Optional[dict]:
    """The λ=0 model of RESULT's protocol and seed (fine-tuned under the same protocol without a penalty): what
    a pruned model is measured against, so that the fine-tune's own gain is not counted as the
    pruning's; None where there is none (or RESULT is it)."""
    if not result.get("l0_lambda"):
        return None
    return next((r for r in l0_results
                 if r.get("l0_lambda") == 0 and protocol_and_seed(r) == protocol_and_seed(result)), None)


def costs_against_controls(l0_results: Sequence[dict]) -> List[Tuple[dict, float]]:
    """(model, relative perplexity cost against its λ=0 control) for every L0 model that has one."""
    out = []
    for result in l0_results:
        control = control_of(result, l0_results)
        if control:
            out.append((result, relative_cost(result["perplexity"], control["perplexity"])))
    return out


def removable_per_seed(costs: Sequence[Tuple[dict, float]], tolerance: float) -> Dict[str, int]:
    """{seed label: the most heads a model of that seed removed at a cost <= TOLERANCE (0: none)}, per
    seed rather than the best seed's count."""
    seeds = sorted({seeds_of(r) for r, _ in costs})
    labels = {seeds_of(r): seed_label(r) for r, _ in costs}
    return {labels[seed]: max([r["heads_total"] - r["heads_kept"] for r, cost in costs
                               if cost <= tolerance and seeds_of(r) == seed], default=0) for seed in seeds}


def scratch_quadruples(results: Sequence[dict]) -> List[Dict[str, dict]]:
    """Every converged L0 model (λ > 0) whose layout, whose seed's control and whose seed's full
    layout were all trained from scratch: {"trained", "control", "scratch", "full_scratch"}."""
    converged = {r["name"]: r for r in results if r.get("protocol") == "converged"}
    scratch_of = {r["from_model"]: r for r in converged.values() if r["kind"] == "from_scratch"}
    l0 = [r for r in converged.values() if r["kind"] == "l0"]
    out = []
    for trained in sorted((r for r in l0 if r.get("l0_lambda")), key=lambda r: (r["l0_lambda"], seeds_of(r))):
        control = control_of(trained, l0)
        if trained["name"] in scratch_of and control and control["name"] in scratch_of:
            out.append({"trained": trained, "control": control, "scratch": scratch_of[trained["name"]],
                        "full_scratch": scratch_of[control["name"]]})
    return out


SIDES = ("trained", "control", "scratch", "full_scratch")


def has_block_losses(quadruples: Sequence[Dict[str, dict]],
                     blocks: Optional[Mapping[str, Tuple[np.ndarray, np.ndarray]]]) -> bool:
    """Whether every model of every quadruple has its test-block losses (else none is bootstrapped)."""
    return bool(blocks) and all(q[side]["name"] in blocks for q in quadruples for side in SIDES)


def advantage_rows(quadruples: Sequence[Dict[str, dict]],
                   blocks: Optional[Mapping[str, Tuple[np.ndarray, np.ndarray]]] = None) -> List[List[object]]:
    """Per seed: λ, seed, heads, the four perplexities, both costs (%) and the advantage (points);
    per λ with several seeds, a row of the three means with their range over the seeds.

    With every model's test-block losses (`blocks`, {name: (nll, tokens)}), each seed's three
    numbers carry a 95% paired-bootstrap interval over the test blocks (the four models scored on
    the same resampled blocks), and each mean the interval holding both the seeds' spread and the
    blocks' sampling (significance.seed_and_test_interval: every seed on the same resamples).
    Without them each mean has Student's t over the seeds only (significance.seed_interval), and
    the per-seed numbers are plain floats."""
    paired = has_block_losses(quadruples, blocks)
    rows, by_lambda = [], {}
    for q in quadruples:
        trained_cost = relative_cost(q["trained"]["perplexity"], q["control"]["perplexity"])
        scratch_cost = relative_cost(q["scratch"]["perplexity"], q["full_scratch"]["perplexity"])
        values = (trained_cost, scratch_cost, scratch_cost - trained_cost)
        resampled = None
        if paired:
            _, log_ppl = bootstrap_log_perplexity([blocks[q[side]["name"]] for side in SIDES])
            trained_r = relative_perplexity_cost(log_ppl[:, 0], log_ppl[:, 1])
            scratch_r = relative_perplexity_cost(log_ppl[:, 2], log_ppl[:, 3])
            resampled = np.stack([trained_r, scratch_r, scratch_r - trained_r], axis=1)  # (samples, 3)
        lam = q["trained"]["l0_lambda"]
        by_lambda.setdefault(lam, []).append((values, resampled))
        cells = ([_with_interval(100 * v, 100 * resampled[:, k]) for k, v in enumerate(values)] if paired
                 else [100 * v for v in values])
        rows.append([f"{lam:g}", seed_label(q["trained"]),
                     f"{q['trained']['heads_kept']}/{q['trained']['heads_total']}",
                     q["trained"]["perplexity"], q["control"]["perplexity"], q["scratch"]["perplexity"],
                     q["full_scratch"]["perplexity"], *cells])
    for lam, seeds in by_lambda.items():
        if len(seeds) > 1:
            cells = []
            for column in range(3):
                per_seed = [100 * values[column] for values, _ in seeds]
                interval = (seed_and_test_interval(per_seed, np.mean([100 * r[:, column] for _, r in seeds], axis=0))
                            if paired else seed_interval(per_seed))
                cells.append(f"{interval.delta:+.1f} [{interval.ci_low:+.1f}, {interval.ci_high:+.1f}] "
                             f"(seeds {min(per_seed):+.1f} to {max(per_seed):+.1f})")
            rows.append([f"{lam:g}", f"mean of {len(seeds)}", "", None, None, None, None, *cells])
    return rows


def paired_cost_interval(system: Tuple[np.ndarray, np.ndarray], reference: Tuple[np.ndarray, np.ndarray]
                         ) -> Tuple[float, float]:
    """95% paired-bootstrap interval (percent) of ppl(system) / ppl(reference) - 1 over the test blocks."""
    _, log_ppl = bootstrap_log_perplexity([system, reference])
    low, high = np.percentile(100 * relative_perplexity_cost(log_ppl[:, 0], log_ppl[:, 1]), [2.5, 97.5])
    return float(low), float(high)


def _with_interval(value: float, resampled: np.ndarray) -> str:
    low, high = np.percentile(resampled, [2.5, 97.5])
    return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]"


ADVANTAGE_COLUMNS = ["λ", "seed", "heads", "ppl pruned", "ppl control", "ppl layout from scratch",
                     "ppl full layout from scratch", "cost from trained %", "cost from scratch %",
                     "trained advantage (points)"]
