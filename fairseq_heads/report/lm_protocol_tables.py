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
from typing import Dict, List, Optional, Sequence, Tuple

from .significance import seed_interval


def protocol_label(result: dict) -> str:
    """'converged, seed 2' or 'quick' (older files record no protocol: quick)."""
    if result.get("protocol") == "converged":
        return f"converged, seed {result.get('seed') or 1}"
    return "quick"


def has_converged(results: Sequence[dict]) -> bool:
    return any(r.get("protocol") == "converged" for r in results)


def training_updates(result: dict) -> Optional[int]:
    training = result.get("training") or {}
    return training.get("updates")


def relative_cost(perplexity: float, reference: float) -> float:
    return perplexity / reference - 1.0


def control_of(result: dict, l0_results: Sequence[dict]) -> Optional[dict]:
    """The λ=0 model of RESULT's protocol and seed (fine-tuned as long, without a penalty): what
    a pruned model is measured against, so that the fine-tune's own gain is not counted as the
    pruning's; None where there is none (or RESULT is it)."""
    if not result.get("l0_lambda"):
        return None
    return next((r for r in l0_results if r.get("l0_lambda") == 0 and protocol_label(r) == protocol_label(result)),
                None)


def costs_against_controls(l0_results: Sequence[dict]) -> List[Tuple[dict, float]]:
    """(model, relative perplexity cost against its λ=0 control) for every L0 model that has one."""
    out = []
    for result in l0_results:
        control = control_of(result, l0_results)
        if control:
            out.append((result, relative_cost(result["perplexity"], control["perplexity"])))
    return out


def removable_per_seed(costs: Sequence[Tuple[dict, float]], tolerance: float) -> Dict[int, int]:
    """{seed: the most heads a model of that seed removed at a cost <= TOLERANCE (0: none)}, per
    seed rather than the best seed's count."""
    seeds = sorted({r.get("seed") or 1 for r, _ in costs})
    return {seed: max([r["heads_total"] - r["heads_kept"] for r, cost in costs
                       if cost <= tolerance and (r.get("seed") or 1) == seed], default=0) for seed in seeds}


def scratch_quadruples(results: Sequence[dict]) -> List[Dict[str, dict]]:
    """Every converged L0 model (λ > 0) whose layout, whose seed's control and whose seed's full
    layout were all trained from scratch: {"trained", "control", "scratch", "full_scratch"}."""
    converged = {r["name"]: r for r in results if r.get("protocol") == "converged"}
    scratch_of = {r["from_model"]: r for r in converged.values() if r["kind"] == "from_scratch"}
    control_of = {(r.get("seed") or 1): r for r in converged.values()
                  if r["kind"] == "l0" and r.get("l0_lambda") == 0}
    out = []
    for trained in sorted((r for r in converged.values() if r["kind"] == "l0" and r.get("l0_lambda")),
                          key=lambda r: (r["l0_lambda"], r.get("seed") or 1)):
        control = control_of.get(trained.get("seed") or 1)
        if trained["name"] in scratch_of and control and control["name"] in scratch_of:
            out.append({"trained": trained, "control": control, "scratch": scratch_of[trained["name"]],
                        "full_scratch": scratch_of[control["name"]]})
    return out


def advantage_rows(quadruples: Sequence[Dict[str, dict]]) -> List[List[object]]:
    """Per seed: λ, seed, heads, the four perplexities, both costs (%) and the advantage (points);
    per λ with several seeds, a row of the three means, each with its 95% Student's t interval over
    the seeds (significance.seed_interval: the perplexities keep no per-block losses, so the
    test set's own sampling is not in it) and its range over the seeds."""
    rows, by_lambda = [], {}
    for q in quadruples:
        trained_cost = relative_cost(q["trained"]["perplexity"], q["control"]["perplexity"])
        scratch_cost = relative_cost(q["scratch"]["perplexity"], q["full_scratch"]["perplexity"])
        advantage = scratch_cost - trained_cost
        lam = q["trained"]["l0_lambda"]
        by_lambda.setdefault(lam, []).append((trained_cost, scratch_cost, advantage))
        rows.append([f"{lam:g}", q["trained"].get("seed") or 1,
                     f"{q['trained']['heads_kept']}/{q['trained']['heads_total']}",
                     q["trained"]["perplexity"], q["control"]["perplexity"], q["scratch"]["perplexity"],
                     q["full_scratch"]["perplexity"], 100 * trained_cost, 100 * scratch_cost, 100 * advantage])
    for lam, values in by_lambda.items():
        if len(values) > 1:
            cells = []
            for column in range(3):
                per_seed = [100 * v[column] for v in values]
                interval = seed_interval(per_seed)
                cells.append(f"{interval.delta:+.1f} [{interval.ci_low:+.1f}, {interval.ci_high:+.1f}] "
                             f"(seeds {min(per_seed):+.1f} to {max(per_seed):+.1f})")
            rows.append([f"{lam:g}", f"mean of {len(values)}", "", None, None, None, None, *cells])
    return rows


ADVANTAGE_COLUMNS = ["λ", "seed", "heads", "ppl pruned", "ppl control", "ppl layout from scratch",
                     "ppl full layout from scratch", "cost from trained %", "cost from scratch %",
                     "trained advantage (points)"]
