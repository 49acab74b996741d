"""The spread over baselines trained with different seeds (pure functions, no I/O).

A recipe run with `--set train.seed=N` trains its own baseline and fine-tunes it under the quick
protocol; its models' result files record `"baseline_seed": N` (layout.baseline_seed). Unpacked
into one folder, the runs of several seeds give each (kind, λ) one model per baseline. This
table puts them side by side: what a reader who retrains the baseline would see vary, which the
paired bootstrap over test sentences (one model pair at a time) cannot show.
"""
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from .layout import ALL_L0, BASELINE, ENCODER_L0, QUICK, baseline_seed, protocol_of
from .tables import MissingInput, Table, format_lambda

KINDS = (BASELINE, ENCODER_L0, ALL_L0)


def models_by_seed(results: Sequence[dict]) -> Dict[Tuple[str, Optional[float]], Dict[int, dict]]:
    """{(kind, λ): {baseline seed: result}} of the baselines and their quick-protocol fine-tunes
    (a converged model's seed is its fine-tune's, from one shared baseline: not these)."""
    grouped: Dict[Tuple[str, Optional[float]], Dict[int, dict]] = {}
    for result in results:
        kind = result.get("kind")
        if kind not in KINDS or (kind != BASELINE and protocol_of(result) != QUICK):
            continue
        lam = None if kind == BASELINE else result.get("l0_lambda")
        grouped.setdefault((kind, lam), {})[baseline_seed(result)] = result
    return grouped


def summary(values: List[float]) -> List[object]:
    """mean, min, max of `values` (the population of seeds run, not an estimate beyond them)."""
    return [statistics.fmean(values), min(values), max(values)]


def baseline_seed_table(results: Sequence[dict]) -> Table:
    """One row per (kind, λ) with models from two or more baseline seeds: the seeds, heads kept
    and BLEU per seed, then the mean, min and max over seeds of BLEU, of ΔBLEU against the same
    seed's baseline and of ΔBLEU against the same seed's λ=0 control (the fine-tune without a
    penalty, trained as long)."""
    grouped = models_by_seed(results)
    baselines = grouped.get((BASELINE, None), {})
    if len(baselines) < 2:
        raise MissingInput("results of fewer than two baseline seeds (a recipe run with --set train.seed=N)")
    rows = []
    for (kind, lam), by_seed in sorted(grouped.items(), key=lambda item: (KINDS.index(item[0][0]), item[0][1] or 0.0)):
        seeds = sorted(by_seed)
        if len(seeds) < 2:
            continue
        control = grouped.get((kind, 0.0), {}) if kind != BASELINE and lam else {}
        bleu = [by_seed[s]["bleu"] for s in seeds]
        against_baseline = [by_seed[s]["bleu"] - baselines[s]["bleu"] for s in seeds if s in baselines]
        against_control = [by_seed[s]["bleu"] - control[s]["bleu"] for s in seeds if s in control]
        kept = [f"{sum(by_seed[s]['heads_kept'][t] for t in heads_counted(kind))}" for s in seeds]
        rows.append([kind if kind == BASELINE else f"{kind} λ={format_lambda(lam)}",
                     ", ".join(map(str, seeds)), ", ".join(kept), ", ".join(f"{b:.2f}" for b in bleu),
                     *summary(bleu),
                     *(summary(against_baseline) if kind != BASELINE and len(against_baseline) > 1 else [None] * 3),
                     *(summary(against_control) if len(against_control) > 1 else [None] * 3)])
    return Table(["model", "baseline seeds", "heads kept", "BLEU per seed", "BLEU mean", "BLEU min", "BLEU max",
                  "Δ baseline mean", "Δ baseline min", "Δ baseline max",
                  "Δ control mean", "Δ control min", "Δ control max"], rows,
                 "quick protocol, one baseline per seed; heads kept: the types the model gated "
                 "(encoder_l0: enc-self; all_l0: all three); Δ: against the same seed's baseline "
                 "or λ=0 control; min and max over the seeds run")


def heads_counted(kind: str) -> Tuple[str, ...]:
    return ("enc-self",) if kind in (ENCODER_L0, BASELINE) else ("enc-self", "dec-self", "enc-dec")
