"""The tables of what heads do: the baseline's heads with a function and the best head per
dependency relation (4), the same statistics in domain and on the parsed set (4), the importance
metrics' agreement (5), and how many heads of each function survive each L0 run (7). `heads`: the
rows of the baseline's heads.csv as dicts of strings (stats.table.read_csv_rows); `agreement`: its
agreement.json.
"""
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..heads import ATTENTION_TYPES
from ..stats.agreement import fisher_z_interval, spearman
from ..stats.metrics.syntactic import parse_syntactic_column
from ..stats.table import number_or_nan
from .layout import ALL_L0, ENCODER_L0
from .table_basics import (NO_FUNCTION, TRANSLATION_FUNCTIONS, MissingInput, Table, by_kind, head_functions,
                           lambda_texts)


# ------------------------------------------------------------------ (4) head functions


def head_function_table(heads: Sequence[Dict[str, str]]) -> Table:
    """The baseline's heads that have a function (positional / syntactic / rare), with the
    statistic behind each label."""
    if not heads:
        raise MissingInput("no baseline head statistics (stats/baseline/heads.csv)")
    rows = []
    for row in heads:
        functions = head_functions(row.get("labels", ""))
        if not functions:
            continue
        rows.append([row["type"], int(row["layer"]), int(row["head"]), row.get("labels", ""),
                     number_or_nan(row.get("positional_share")), row.get("syntactic_best") or None,
                     number_or_nan(row.get("syntactic_best_gain")), number_or_nan(row.get("rare_share"))])
    counted = function_counts(heads)
    note = ("heads by function: " + ", ".join(f"{k} {v}" for k, v in counted.items())
            + f" (of {len(heads)} heads)")
    if not rows:
        note += "; no head passes a function threshold (a small model may have no specialised heads)"
    return Table(["type", "layer", "head", "labels", "positional share", "best relation",
                  "accuracy - baseline", "rare share"], rows, note)


def function_counts(heads: Sequence[Dict[str, str]]) -> Dict[str, int]:
    counts = {name: 0 for name in TRANSLATION_FUNCTIONS + (NO_FUNCTION,)}
    for row in heads:
        functions = head_functions(row.get("labels", ""))
        for name in functions or [NO_FUNCTION]:
            counts[name] += 1
    return counts


def syntactic_relation_table(heads: Sequence[Dict[str, str]]) -> Table:
    """Per dependency relation and direction: the best head's accuracy against the positional
    baseline (the most frequent relative position), as in the paper's Figure 5."""
    if not heads:
        raise MissingInput("no baseline head statistics (stats/baseline/heads.csv)")
    slots = []
    for column in heads[0]:
        if column.endswith("_baseline"):
            slot = parse_syntactic_column(column[:-len("_baseline")])
            if slot:
                slots.append((*slot, column[:-len("_baseline")]))
    if not slots:
        raise MissingInput("heads.csv has no syntactic columns (stats ran without --conllu)")
    rows = []
    for relation, direction, column in slots:
        scored = [(r, number_or_nan(r.get(column))) for r in heads if not math.isnan(number_or_nan(r.get(column)))]
        if not scored:
            rows.append([relation, direction, None, None, None, None])
            continue
        best, accuracy = max(scored, key=lambda item: item[1])
        baseline = number_or_nan(best.get(column + "_baseline"))
        rows.append([relation, direction,
                     f"{best['type']} {best['layer']}/{best['head']}", accuracy, baseline,
                     accuracy - baseline])
    return Table(["relation", "direction", "best head (type layer/head)", "accuracy",
                  "positional baseline", "gain"], rows)


# ------------------------------------------------------------------ (4) in domain against the parsed set

IMPORTANCE_METRICS = ("confidence", "lrp", "grad")
DOMAIN_FUNCTIONS = ("positional", "rare")  # the functions both sets score (syntactic: the parsed set only)


def _by_type(heads: Sequence[Dict[str, str]]) -> Dict[str, Dict[Tuple[int, int], Dict[str, str]]]:
    grouped: Dict[str, Dict[Tuple[int, int], Dict[str, str]]] = {}
    for row in heads:
        grouped.setdefault(row["type"], {})[(int(row["layer"]), int(row["head"]))] = row
    return grouped


def _best(rows, column: str) -> Optional[float]:
    values = [v for v in (number_or_nan(r.get(column)) for r in rows) if not math.isnan(v)]
    return max(values) if values else None


def domain_function_table(heads: Sequence[Dict[str, str]], parsed_heads: Sequence[Dict[str, str]]) -> Table:
    """Per attention type, the heads with a positional or rare-word function and the best head's
    share, computed in domain (stats/baseline) and on the parsed set (stats/parsed_set): whether
    the two sets give the same answer (issue 37: the parsed set, PUD, is out of domain)."""
    if not heads or not parsed_heads:
        raise MissingInput("no statistics of the baseline on the parsed set (stats/parsed_set/heads.csv)")
    in_domain, parsed = _by_type(heads), _by_type(parsed_heads)
    rows = []
    for attention_type in (t for t in ATTENTION_TYPES if t in in_domain and t in parsed):
        row = [attention_type]
        for name, column in zip(DOMAIN_FUNCTIONS, ("positional_share", "rare_share")):
            for side in (in_domain, parsed):
                row.append(sum(name in head_functions(r.get("labels", "")) for r in side[attention_type].values()))
            row += [_best(side[attention_type].values(), column) for side in (in_domain, parsed)]
        rows.append(row)
    return Table(["type", "positional heads (in domain)", "positional heads (parsed set)",
                  "best positional share (in domain)", "best positional share (parsed set)",
                  "rare-word heads (in domain)", "rare-word heads (parsed set)",
                  "best rare share (in domain)", "best rare share (parsed set)"], rows,
                 "in domain: the recipe's statistics subset (stats/baseline); parsed set: the set of the "
                 "syntactic heads (stats/parsed_set), with the same metrics and thresholds")


def domain_importance_table(heads: Sequence[Dict[str, str]], parsed_heads: Sequence[Dict[str, str]]) -> Table:
    """Per attention type and importance metric: Spearman ρ between the heads' scores in domain and
    on the parsed set, with its interval over heads (Fisher z): does the other set rank the heads
    the same way?"""
    if not heads or not parsed_heads:
        raise MissingInput("no statistics of the baseline on the parsed set (stats/parsed_set/heads.csv)")
    in_domain, parsed = _by_type(heads), _by_type(parsed_heads)
    rows = []
    for attention_type in (t for t in ATTENTION_TYPES if t in in_domain and t in parsed):
        keys = sorted(set(in_domain[attention_type]) & set(parsed[attention_type]))
        for metric in (m for m in IMPORTANCE_METRICS if m in heads[0] and m in parsed_heads[0]):
            a = np.array([number_or_nan(in_domain[attention_type][k].get(metric)) for k in keys])
            b = np.array([number_or_nan(parsed[attention_type][k].get(metric)) for k in keys])
            defined = int((~(np.isnan(a) | np.isnan(b))).sum())
            rho = spearman(a, b)
            rows.append([attention_type, metric, rho, *fisher_z_interval(rho, defined), defined])
    if not rows:
        raise MissingInput("no importance metric scored on both sets")
    return Table(["type", "metric", "Spearman ρ (in domain ~ parsed set)", "95% CI low (heads)",
                  "95% CI high (heads)", "heads"], rows,
                 "each head's importance in domain against its importance on the parsed set; interval over "
                 "heads (Fisher z)")


# ------------------------------------------------------------------ (5) agreement


def head_level_interval(entry: dict) -> Tuple[Optional[float], Optional[float]]:
    """An agreement.json entry's Fisher-z interval over heads; for a stats folder written before
    agreement.json had one, computed from its rho and number of heads (the same formula)."""
    if entry.get("fisher_z_ci"):
        return tuple(entry["fisher_z_ci"])
    if entry.get("spearman") is None or not entry.get("num_heads"):
        return None, None
    return fisher_z_interval(entry["spearman"], entry["num_heads"])


def agreement_table(agreement: dict) -> Table:
    """Spearman rank correlation between importance metrics, per attention type, with two
    intervals: the sentence bootstrap's (the heads fixed: the metrics' sampling noise only) and a
    head-level one (Fisher z over the heads, docs/metrics.md); and the mean within-layer ρ (LRP is
    normalised per layer), where agreement.json has it."""
    rows = []
    for attention_type, pairs in (agreement or {}).items():
        for name, entry in pairs.items():
            within = (entry.get("within_layer") or {}).get("spearman_mean")
            rows.append([attention_type, name.replace("~", " ~ "), entry.get("spearman"),
                         entry.get("ci_low"), entry.get("ci_high"), *head_level_interval(entry),
                         within, entry.get("num_heads")])
    if not rows:
        raise MissingInput("no metric pairs in agreement.json")
    return Table(["type", "metrics", "Spearman ρ", "95% CI low (sentences)", "95% CI high (sentences)",
                  "95% CI low (heads)", "95% CI high (heads)", "within-layer ρ", "heads"], rows,
                 "Intervals: resampling sentences (the heads fixed), and over heads (Fisher z with "
                 "variance 1.06/(n − 3)). Within-layer ρ: the mean over layers of each layer's ρ.")


# ------------------------------------------------------------------ (7) survivors


GATED_TYPES = {ENCODER_L0: ("enc-self",), ALL_L0: ATTENTION_TYPES}  # what each kind of run prunes


def survivor_counts(results: Sequence[dict], heads: Sequence[Dict[str, str]],
                    kinds: Sequence[str] = (ENCODER_L0, ALL_L0)):
    """(runs [(kind, lambda as lambda_texts prints it)], open {function: [count per run]},
    totals {function: [count per run]}).

    Functions come from the baseline's labels (a head without one is 'none'); a head with
    several functions counts once for each. A run counts the heads of the types it gated (an
    encoder-only run: encoder self-attention) that heads.csv scores."""
    if not heads:
        raise MissingInput("no baseline head statistics (stats/baseline/heads.csv)")
    functions = {(row["type"], int(row["layer"]), int(row["head"])):
                 head_functions(row.get("labels", "")) or [NO_FUNCTION] for row in heads}
    names = TRANSLATION_FUNCTIONS + (NO_FUNCTION,)
    pruned = [r for kind in kinds for r in by_kind(results, kind)]
    if not pruned:
        raise MissingInput("no L0 results (kinds encoder_l0, all_l0)")
    runs = [(r["kind"], text) for r, text in zip(pruned, lambda_texts(pruned))]
    open_counts: Dict[str, List[int]] = {name: [] for name in names}
    totals: Dict[str, List[int]] = {name: [] for name in names}
    for result in pruned:
        opened, total = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
        for (attention_type, layer, head), head_names in functions.items():
            if attention_type not in GATED_TYPES[result["kind"]]:
                continue
            kept = result["kept"].get(attention_type)
            if kept is None or layer >= len(kept) or head >= len(kept[layer]):
                raise MissingInput(f"{result['name']}: heads.csv does not match its layout")
            for name in head_names:
                total[name] += 1
                opened[name] += int(bool(kept[layer][head]))
        for name in names:
            open_counts[name].append(opened[name])
            totals[name].append(total[name])
    return runs, open_counts, totals


def survivor_functions(results: Sequence[dict], heads: Sequence[Dict[str, str]],
                       kinds: Sequence[str] = (ENCODER_L0, ALL_L0)) -> Table:
    """At each lambda: how many heads of each function are still open, of how many."""
    runs, open_counts, totals = survivor_counts(results, heads, kinds)
    rows = [[kind, l0_lambda, *(f"{open_counts[n][i]}/{totals[n][i]}" for n in open_counts)]
            for i, (kind, l0_lambda) in enumerate(runs)]
    return Table(["run", "λ", *open_counts], rows,
                 "open heads / heads with that function in the baseline (labels of heads.csv), over "
                 "the attention types each run gated (encoder_l0: enc-self; all_l0: all three)")
