"""The report's tables as rows, from already-loaded result files (pure functions, no I/O).

Inputs: `results`, a list of result-file dicts (fairseq_heads/report/model_result.py);
`heads`, the rows of the baseline's heads.csv as dicts of strings (stats.table.read_csv_rows);
`agreement`, the baseline's agreement.json; `curve`, the rows of curve.csv; `trace`, the
records of a gate trace. Each builder returns a `Table` (columns + rows of cells), or raises
`MissingInput` saying what is missing, so the report can skip it with that note.
"""
import math
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ..heads import ATTENTION_TYPES
from ..numbers import format_number
from ..stats.agreement import fisher_z_interval
from ..stats.metrics.syntactic import parse_syntactic_column
from ..stats.table import label_kind, number_or_nan, parse_labels
from .layout import ALL_L0, BASELINE, CONVERGED, ENCODER_L0, FROM_SCRATCH, QUICK, protocol_of

FUNCTIONS = ("positional", "syntactic", "rare")  # a head's function: the labels of heads.csv
NO_FUNCTION = "none"


QUICK_NOTE = ("quick protocol: a short L0 fine-tune of a fixed number of updates, the earlier "
              "protocol; not comparable with the converged rows")


class MissingInput(Exception):
    """A table or figure cannot be made: its inputs are missing (the message says which)."""


class Table(NamedTuple):
    columns: List[str]
    rows: List[List[object]]
    note: str = ""


# ------------------------------------------------------------------ helpers


def by_kind(results: Iterable[dict], kind: str) -> List[dict]:
    """The results of one kind, by increasing L0 lambda (None first)."""
    chosen = [r for r in results if r.get("kind") == kind]
    return sorted(chosen, key=lambda r: (r.get("l0_lambda") is not None, r.get("l0_lambda") or 0.0))


def headline(results: Sequence[dict]) -> List[dict]:
    """The results the tables lead with: one model per (kind, λ) - the converged protocol's if
    there is one, else the quick one; among those, the gate learning rate most of them were
    trained at (the tables' setting) and the lowest seed. From-scratch models follow the model
    their layout came from. The others appear in their own rows (quick protocol, seeds, traces)."""
    trained = [r for r in results if r.get("kind") in (ENCODER_L0, ALL_L0)]
    # the usual scale among the converged models if there are any (older files record none)
    scales = ([r.get("gate_lr_scale") for r in trained if protocol_of(r) == CONVERGED]
              or [r.get("gate_lr_scale") for r in trained])
    usual_scale = max(set(scales), key=lambda v: (scales.count(v), -(v or 0))) if scales else None

    def preference(result):
        return (protocol_of(result) != CONVERGED, result.get("gate_lr_scale") != usual_scale,
                result.get("seed") or 1, result["name"])

    chosen: Dict[Tuple[str, object], dict] = {}
    for result in sorted(trained, key=preference):
        chosen.setdefault((result["kind"], result.get("l0_lambda")), result)
    names = {r["name"] for r in chosen.values()}
    scratch = [r for r in results if r.get("kind") == FROM_SCRATCH and r.get("from_model") in names]
    return [r for r in results if r.get("kind") == BASELINE] + list(chosen.values()) + scratch


def protocol_label(result: dict) -> str:
    """'converged, seed 2' / 'quick, 150 updates' (the tables' protocol column)."""
    if protocol_of(result) == QUICK:
        return f"quick, {result['updates']} updates" if result.get("updates") is not None else "quick"
    return f"converged, seed {result.get('seed') or 1}"


def baseline_result(results: Iterable[dict]) -> dict:
    found = by_kind(results, BASELINE)
    if not found:
        raise MissingInput("no baseline result (results/baseline/result.json)")
    return found[0]


def lambda_texts(results: Sequence[dict]) -> List[str]:
    """Each result's lambda as the column and row labels print it; where the results mix
    protocols, each says its own ("0.01 (quick)"), so a quick run's column cannot pass for a
    converged one."""
    mixed = len({protocol_of(r) for r in results}) > 1
    return [format_lambda(r["l0_lambda"]) + (f" ({protocol_of(r)})" if mixed else "") for r in results]


def format_lambda(value) -> str:
    return "-" if value is None else f"{value:g}"


def format_cell(value) -> str:
    return format_number(value, 2, "-")


def markdown_table(table: Table) -> str:
    lines = ["| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    for row in table.rows:
        lines.append("| " + " | ".join(format_cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def head_functions(labels: str) -> List[str]:
    """'positional(-1);syntactic(nsubj,dep->head);rare' -> ['positional', 'syntactic', 'rare']."""
    names = []
    for name in map(label_kind, parse_labels(labels)):
        if name in FUNCTIONS and name not in names:
            names.append(name)
    return names


# ------------------------------------------------------------------ (1) encoder heads kept


def encoder_sweep_points(results: Sequence[dict]) -> List[Tuple[str, int, float]]:
    """(label, encoder heads kept, BLEU) of the baseline and each encoder-only L0 model, labelled
    by `lambda_texts` (which names the protocol where they mix)."""
    baselines, models = by_kind(results, BASELINE), by_kind(results, ENCODER_L0)
    labels = ["baseline"] * len(baselines) + [f"λ={text}" for text in lambda_texts(models)]
    return [(label, int(result["heads_kept"]["enc-self"]), float(result["bleu"]))
            for label, result in zip(labels, baselines + models)]


def curve_points(curve_rows: Sequence[Dict[str, str]]) -> List[Tuple[int, float]]:
    """(heads kept, BLEU) of a `fairseq-heads curve` CSV, in file order."""
    try:
        return [(int(row["heads_kept"]), float(row["bleu"])) for row in curve_rows]
    except (KeyError, ValueError) as error:
        raise MissingInput(f"curve.csv is not a `fairseq-heads curve` table ({error})") from None


def encoder_pruning_table(results: Sequence[dict], curve_rows: Optional[Sequence[Dict[str, str]]],
                          more_curves: Optional[Dict[str, Sequence[Dict[str, str]]]] = None) -> Table:
    """BLEU against encoder heads kept: the headline L0 models (see `headline`), then, when those
    are converged, the quick protocol's models as rows labelled so; for each, the curve's BLEU at
    the nearest number of heads kept (the heuristic pruning at about the same size). With
    `more_curves` ({metric: rows}: the curves of several importance metrics) one such pair of
    columns per metric; `curve_rows` is then ignored."""
    shown = headline(results)
    if not by_kind(shown, ENCODER_L0):
        raise MissingInput("no encoder-only L0 results (kind encoder_l0)")
    if more_curves:
        curves = {metric: curve_points(rows) for metric, rows in more_curves.items()}
    else:
        curves = {"": curve_points(curve_rows) if curve_rows else []}
    baseline = baseline_result(results)
    total = baseline["heads_total"]["enc-self"]
    pruned = by_kind(shown, ENCODER_L0)
    quick = [r for r in by_kind(results, ENCODER_L0) if protocol_of(r) == QUICK and r not in pruned]
    rows = []
    for result in [baseline] + pruned + quick:
        kept = int(result["heads_kept"]["enc-self"])
        if result is baseline:
            label, protocol = "baseline", ""
        else:
            label = f"λ={format_lambda(result['l0_lambda'])}" + ("" if result in pruned else " (quick protocol)")
            protocol = protocol_label(result)
        row = [label, protocol, f"{kept}/{total}", result["bleu"]]
        for curve in curves.values():
            nearest = min(curve, key=lambda p: (abs(p[0] - kept), p[0])) if curve else None
            row += [nearest[1] if nearest else None, nearest[0] if nearest else None]
        rows.append(row)
    notes = []
    if not any(curves.values()):
        notes.append("no Michel et al. curve (curve/curve.csv): its columns are empty")
    if quick:
        notes.append(QUICK_NOTE)
    columns = ["model", "protocol", "encoder heads kept", "BLEU"]
    for metric in curves:
        columns += ([f"BLEU, heuristic pruning by {metric}", f"heads kept ({metric})"] if metric
                    else ["BLEU, heuristic pruning", "heads kept (heuristic)"])
    return Table(columns, rows, "; ".join(notes))


# ------------------------------------------------------------------ (2) all attention types


def all_types_table(results: Sequence[dict]) -> Table:
    """Per lambda: heads kept per attention type, BLEU fine-tuned from the trained model and
    BLEU of the same layout trained from scratch: the headline models (see `headline`), then,
    when those are converged, the quick protocol's models as rows labelled so."""
    shown = headline(results)
    pruned = by_kind(shown, ALL_L0)
    if not pruned:
        raise MissingInput("no all-attention-types L0 results (kind all_l0)")
    scratch = {r.get("from_model"): r for r in by_kind(results, FROM_SCRATCH)}
    baseline = baseline_result(results)
    rows = [["baseline", "", *(f"{baseline['heads_kept'][t]}/{baseline['heads_total'][t]}"
                              for t in ATTENTION_TYPES), baseline["bleu"], None]]
    quick = [r for r in by_kind(results, ALL_L0) if protocol_of(r) == QUICK and r not in pruned]
    for result in pruned + quick:
        from_scratch = scratch.get(result["name"])
        label = f"λ={format_lambda(result['l0_lambda'])}"
        rows.append([label if result in pruned else f"{label} (quick protocol)", protocol_label(result),
                     *(f"{result['heads_kept'][t]}/{result['heads_total'][t]}" for t in ATTENTION_TYPES),
                     result["bleu"], from_scratch["bleu"] if from_scratch else None])
    note = QUICK_NOTE if quick else ""
    return Table(["model", "protocol", *ATTENTION_TYPES, "BLEU (from trained)", "BLEU (from scratch)"],
                 rows, note)


def _training_updates(result: dict) -> Optional[int]:
    """The updates this model's own training ran: the summed phases of a converged model
    (result["training"], patience tails included), else its checkpoint's update count."""
    training = result.get("training") or {}
    return training.get("updates", result.get("updates"))


def _phase(result: dict, name: str, field: str):
    return ((result.get("training") or {}).get("phases") or {}).get(name, {}).get(field)


def trained_vs_scratch_table(results: Sequence[dict],
                             translations: Dict[str, Tuple[List[str], List[str]]],
                             samples: int = 1000) -> Table:
    """The fair comparison: every converged all-types model that has its layout trained from
    scratch too, one row per seed (ΔBLEU = scratch - trained, paired bootstrap 95% CI), and per
    lambda a row of the means with the seed spread (max - min over seeds) of either side.
    Updates: trained = the baseline's + the L0 phase's + the fixed-mask phase's (patience tail
    included); scratch = its own (patience tail included)."""
    from .significance import paired_bootstrap, sentence_statistics

    pairs = _converged_pairs(results)
    if not pairs:
        raise MissingInput("no converged all-types model with its layout trained from scratch "
                           "(PROTOCOL=converged, SCRATCH_LAMBDAS)")
    missing = sorted({r["name"] for pair in pairs for r in pair if r["name"] not in translations})
    if missing:
        raise MissingInput("no fairseq-generate output (results/<model>/generate.txt) of " + ", ".join(missing))
    baseline_updates = baseline_result(results).get("updates") or 0
    rows = []
    for trained, from_scratch in pairs:
        difference = paired_bootstrap(sentence_statistics(*translations[from_scratch["name"]]),
                                      sentence_statistics(*translations[trained["name"]]), samples=samples)
        kept = sum(trained["heads_kept"].values())
        total = sum(trained["heads_total"].values())
        trained_updates = _training_updates(trained)
        rows.append([f"λ={format_lambda(trained['l0_lambda'])}", trained.get("seed"), f"{kept}/{total}",
                     trained["bleu"], from_scratch["bleu"], difference.delta, difference.ci_low,
                     difference.ci_high, _phase(trained, "l0", "updates"),
                     _phase(trained, "l0", "converged_at") or "cap",
                     _phase(trained, "fixed_mask", "updates"),
                     None if trained_updates is None else baseline_updates + trained_updates,
                     _training_updates(from_scratch)])
    return Table(["layout", "seed", "heads kept", "BLEU trained", "BLEU scratch", "Δ scratch − trained",
                  "95% CI low", "95% CI high", "L0 updates", "plateau at", "fixed-mask updates",
                  "updates trained (incl. baseline)", "updates scratch"], rows,
                 f"converged protocol; paired bootstrap over the test sentences, {samples} resamples; "
                 "'plateau at' is the update where the plateau rule held ('cap': it never did)")


def _converged_pairs(results: Sequence[dict]) -> List[Tuple[dict, dict]]:
    scratch = {r.get("from_model"): r for r in by_kind(results, FROM_SCRATCH) if protocol_of(r) == CONVERGED}
    return sorted([(r, scratch[r["name"]]) for r in by_kind(results, ALL_L0)
                   if protocol_of(r) == CONVERGED and r["name"] in scratch],
                  key=lambda p: (p[0]["l0_lambda"], p[0].get("seed") or 1))


def pruning_cost_table(results: Sequence[dict],
                       translations: Dict[str, Tuple[List[str], List[str]]],
                       samples: int = 1000) -> Table:
    """Trained vs from scratch with each side measured against its own full layout, for the
    pairs of `trained_vs_scratch_table` whose λ=0 control (`control_model`) was also trained
    from scratch with all heads: cost from trained = BLEU(pruned) - BLEU(control), cost from
    scratch = BLEU(layout from scratch) - BLEU(full layout from scratch), and trained's
    advantage = the first minus the second (> 0: pruning the trained model loses less, the
    paper's claim). It takes the two training schedules out of the comparison, which the
    absolute one cannot. A layout with several seeds gets a row of the three contrasts
    averaged over its seeds, and several layouts a row averaged over every pair. Every system
    shares each bootstrap resample, so the intervals of differences of differences, and of
    their means, are paired too; they hold the test set's sampling, not the seed's."""
    import numpy as np

    from .significance import bootstrap_bleu, contrast, sentence_statistics

    pairs = _converged_pairs(results)
    scratch_of = {trained["name"]: scratch for trained, scratch in pairs}
    # (trained, control, from scratch, full layout from scratch) per seed, grouped by layout
    quadruples: Dict[float, List[List[dict]]] = {}
    # a control counts only with its full layout from scratch: a seed whose own pair is not
    # finished yet is measured against the lowest seed's full layouts meanwhile
    complete = [r for r in results if r.get("l0_lambda") != 0 or r["name"] in scratch_of]
    for trained, from_scratch in pairs:
        control = control_model(trained, complete)
        full_scratch = scratch_of.get(control["name"]) if control else None
        if full_scratch is not None:
            quadruples.setdefault(trained["l0_lambda"], []).append([trained, control, from_scratch, full_scratch])
    if not quadruples:
        raise MissingInput("no converged λ=0 control with its full layout trained from scratch "
                           "(scratch_all_l0_0_conv_s<seed>)")
    # each model once (seeds share a control), in first-seen order
    systems = list({m["name"]: m for group in quadruples.values() for quadruple in group
                    for m in quadruple}.values())
    missing = [r["name"] for r in systems if r["name"] not in translations]
    if missing:
        raise MissingInput("no fairseq-generate output (results/<model>/generate.txt) of " + ", ".join(missing))
    # one bootstrap for every system, so that rows pooling several seeds are paired too
    full, resampled = bootstrap_bleu([sentence_statistics(*translations[r["name"]]) for r in systems], samples)
    index = {r["name"]: i for i, r in enumerate(systems)}

    def costs(group: List[List[dict]]) -> List[float]:
        """The three contrasts averaged over the quadruples of `group` (one seed each)."""
        cells = []
        for signs in ((1, -1, 0, 0), (0, 0, 1, -1), (1, -1, -1, 1)):
            weights = np.zeros(len(systems))
            for quadruple in group:
                for model, sign in zip(quadruple, signs):
                    weights[index[model["name"]]] += sign / len(group)
            cost = contrast(full, resampled, weights)
            cells += [cost.delta, cost.ci_low, cost.ci_high]
        return cells

    def kept(trained: dict) -> str:
        return f"{sum(trained['heads_kept'].values())}/{sum(trained['heads_total'].values())}"

    def shared_bleu(models: List[dict]):  # the BLEU of the one model all rows share, else none
        return models[0]["bleu"] if len({m["name"] for m in models}) == 1 else None

    rows = []
    for l0_lambda, group in sorted(quadruples.items()):
        for quadruple in group:
            trained, control, _, full_scratch = quadruple
            rows.append([f"λ={format_lambda(l0_lambda)}", trained.get("seed"), kept(trained),
                         control["bleu"], full_scratch["bleu"], *costs([quadruple])])
        if len(group) > 1:
            rows.append([f"λ={format_lambda(l0_lambda)}",
                         "mean of " + " ".join(str(q[0].get("seed")) for q in group),
                         " ".join(kept(q[0]) for q in group), shared_bleu([q[1] for q in group]),
                         shared_bleu([q[3] for q in group]), *costs(group)])
    every = [quadruple for group in quadruples.values() for quadruple in group]
    if len(quadruples) > 1:
        rows.append(["all layouts", f"mean of {len(every)} pairs", "-", shared_bleu([q[1] for q in every]),
                     shared_bleu([q[3] for q in every]), *costs(every)])
    return Table(["layout", "seed", "heads kept", "BLEU full layout, trained (λ=0 control)",
                  "BLEU full layout, scratch", "cost from trained", "95% CI low", "95% CI high",
                  "cost from scratch", "95% CI low", "95% CI high", "trained's advantage",
                  "95% CI low", "95% CI high"], rows,
                 "cost = BLEU of the pruned layout - BLEU of the full layout trained the same way; "
                 "trained's advantage = cost from trained - cost from scratch (> 0: pruning the "
                 f"trained model loses less); paired bootstrap over the test sentences, {samples} "
                 "resamples shared by all models; a 'mean of' row averages its seeds' (or pairs') "
                 "contrasts, and its interval holds the test set's sampling only, not the seed's: "
                 "the seed spread is the rows above it")


def seed_summary_table(results: Sequence[dict]) -> Table:
    """Per layout of the fair comparison: mean BLEU of either side over the seeds, the seed
    spread (max - min) of either side, and the mean training updates of either side."""
    pairs = _converged_pairs(results)
    if not pairs:
        raise MissingInput("no converged all-types model with its layout trained from scratch")
    baseline_updates = baseline_result(results).get("updates") or 0
    grouped: Dict[float, List[Tuple[dict, dict]]] = {}
    for trained, from_scratch in pairs:
        grouped.setdefault(trained["l0_lambda"], []).append((trained, from_scratch))

    def mean(values):
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    def mean_count(values):  # updates: whole numbers in the table
        value = mean(values)
        return None if value is None else round(value)

    def spread(values):
        return max(values) - min(values) if len(values) > 1 else None

    rows = []
    for l0_lambda, group in sorted(grouped.items()):
        trained = [t["bleu"] for t, _ in group]
        scratch = [s["bleu"] for _, s in group]
        rows.append([f"λ={format_lambda(l0_lambda)}", " ".join(str(t.get("seed")) for t, _ in group),
                     mean(trained), spread(trained), mean(scratch), spread(scratch),
                     mean(scratch) - mean(trained),
                     mean_count([None if _training_updates(t) is None else baseline_updates + _training_updates(t)
                                 for t, _ in group]),
                     mean_count([_training_updates(s) for _, s in group])])
    return Table(["layout", "seeds", "BLEU trained (mean)", "seed spread trained", "BLEU scratch (mean)",
                  "seed spread scratch", "Δ scratch − trained (means)", "updates trained (mean)",
                  "updates scratch (mean)"], rows,
                 "seed spread: max - min BLEU over the seeds ('-': one seed, no spread)")


def control_model(result: dict, results: Sequence[dict]) -> Optional[dict]:
    """The λ=0 model trained like `result` (same kind, protocol and gate learning rate; its seed
    if that one was run, else the lowest): the baseline given the same extra training without
    a penalty. What pruning costs is measured against it, since the extra updates of a
    fine-tune are worth something on their own when the baseline stopped before converging."""
    if result.get("kind") not in (ENCODER_L0, ALL_L0) or not result.get("l0_lambda"):
        return None
    controls = [r for r in results if r.get("kind") == result["kind"] and r.get("l0_lambda") == 0
                and protocol_of(r) == protocol_of(result)
                and r.get("gate_lr_scale") == result.get("gate_lr_scale")]
    if not controls:
        return None
    return min(controls, key=lambda r: ((r.get("seed") or 1) != (result.get("seed") or 1), r.get("seed") or 1))


def bleu_difference_table(results: Sequence[dict],
                          translations: Dict[str, Tuple[List[str], List[str]]],
                          kinds: Sequence[str], samples: int = 1000) -> Table:
    """Paired-bootstrap BLEU differences (significance.py): each L0 model of `kinds` against the
    baseline and, when one was trained, against its λ=0 control (`control_model`); each
    from-scratch model against the model its layout came from. `translations`: model name ->
    (hypotheses, references) of its fairseq-generate output."""
    from .significance import paired_bootstrap, sentence_statistics

    baseline = baseline_result(results)
    by_name = {r["name"]: r for r in results}
    pairs = []
    for kind in kinds:
        for result in by_kind(results, kind):
            if kind == FROM_SCRATCH:
                against = [by_name.get(result.get("from_model"))]
            else:
                against = [baseline, control_model(result, results)]
            pairs += [(result, other) for other in against if other is not None]
    if not pairs:
        raise MissingInput(f"no results of kind {', '.join(kinds)}")
    missing = sorted({r["name"] for pair in pairs for r in pair if r["name"] not in translations})
    if missing:
        raise MissingInput("no fairseq-generate output (results/<model>/generate.txt) of "
                           + ", ".join(missing))
    statistics = {}

    def statistics_of(name):
        if translations[name][1] != translations[baseline["name"]][1]:
            raise MissingInput(f"{name} was scored on other references than the baseline")
        if name not in statistics:
            statistics[name] = sentence_statistics(*translations[name])
        return statistics[name]

    rows = []
    for result, against in pairs:
        difference = paired_bootstrap(statistics_of(result["name"]), statistics_of(against["name"]),
                                      samples=samples)
        excludes_zero = difference.ci_low > 0 or difference.ci_high < 0
        rows.append([result["name"], against["name"], difference.delta, difference.ci_low,
                     difference.ci_high, "yes" if excludes_zero else "no"])
    return Table(["model", "against", "ΔBLEU", "95% CI low", "95% CI high", "CI excludes 0"], rows,
                 f"paired bootstrap over the test sentences, {samples} resamples (Koehn 2004); "
                 "a CI that includes 0 means this test set cannot tell the two apart; a λ=0 model "
                 "is the baseline trained on under the same protocol without a penalty")


# ------------------------------------------------------------------ (3) what goes first


def heads_kept_by_layer(results: Sequence[dict], kind: str = ALL_L0) -> Table:
    """Heads kept in each (type, layer), one column per lambda (increasing): where heads go first."""
    pruned = by_kind(results, kind)
    if not pruned:
        raise MissingInput(f"no {kind} results")
    types = ["enc-self"] if kind == ENCODER_L0 else list(ATTENTION_TYPES)  # the types that were gated
    rows = []
    for attention_type in types:
        layers, heads = pruned[0]["layout"][attention_type]
        for layer in range(layers):
            rows.append([attention_type, layer] + [f"{sum(r['kept'][attention_type][layer])}/{heads}"
                                                   for r in pruned])
    return Table(["type", "layer", *(f"λ={text}" for text in lambda_texts(pruned))], rows)


def first_losses(results: Sequence[dict], kind: str = ALL_L0) -> Table:
    """For each attention type: the fraction of its heads kept at each lambda, and the smallest
    lambda at which it has lost half of its heads."""
    pruned = by_kind(results, kind)
    if not pruned:
        raise MissingInput(f"no {kind} results")
    rows = []
    for attention_type in ATTENTION_TYPES:
        fractions = [r["heads_kept"][attention_type] / r["heads_total"][attention_type] for r in pruned]
        half = next((r["l0_lambda"] for r, f in zip(pruned, fractions) if f <= 0.5), None)
        rows.append([attention_type, *(f"{f:.0%}" for f in fractions),
                     format_lambda(half) if half is not None else "not reached"])
    return Table(["type", *(f"λ={text}" for text in lambda_texts(pruned)), "half gone at"], rows)


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
    counts = {name: 0 for name in FUNCTIONS + (NO_FUNCTION,)}
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


# ------------------------------------------------------------------ (6) gate trace


def trace_series(trace: Sequence[dict]) -> Dict[Tuple[str, int, int], Tuple[List[int], List[float]]]:
    """{(type, layer, head): (updates, P(open))} from gate-trace records, by update."""
    if not trace:
        raise MissingInput("empty gate trace")
    series: Dict[Tuple[str, int, int], Tuple[List[int], List[float]]] = {}
    for record in sorted(trace, key=lambda r: r["update"]):
        for head in record["heads"]:
            updates, values = series.setdefault((head["type"], head["layer"], head["head"]), ([], []))
            updates.append(int(record["update"]))
            values.append(float(head["p_open"]))
    return series


def with_final_gates(trace: Sequence[dict], result: dict) -> List[dict]:
    """The trace plus the gates of the model's final checkpoint (from its result file) as a last
    record: fairseq's trace is written before an update, so it misses where training ended."""
    records = list(trace)
    last = max((r["update"] for r in records), default=-1)
    if result.get("updates") is None or result["updates"] <= last or not result.get("p_open"):
        return records
    heads = [{"type": t, "layer": layer, "head": head, "p_open": p}
             for t, rows in result["p_open"].items() for layer, row in enumerate(rows)
             for head, p in enumerate(row) if p is not None]
    return records + [{"update": result["updates"], "heads": heads}]


def open_heads_series(trace: Sequence[dict]) -> Tuple[List[int], Dict[str, List[int]]]:
    """(updates, {attention type: open heads at each}) from gate-trace records: the heads the
    head-keeping rule keeps ("open"; P(open) >= 0.5 in a record without it)."""
    if not trace:
        raise MissingInput("empty gate trace")
    updates, counts = [], {}
    records = sorted(trace, key=lambda r: r["update"])
    types = [t for t in ATTENTION_TYPES if any(h["type"] == t for r in records for h in r["heads"])]
    for record in records:
        updates.append(int(record["update"]))
        for attention_type in types:
            counts.setdefault(attention_type, []).append(sum(
                int(h.get("open", h["p_open"] >= 0.5)) for h in record["heads"] if h["type"] == attention_type))
    return updates, counts


def trace_label(result: dict, trace: Sequence[dict] = ()) -> str:
    """λ, protocol and gate lr of a traced run; "L0 phase" for one whose model has no result
    file yet, "still running at update N" (the trace's last record) for one that has not
    finished (build.unfinished_l0_phases)."""
    scale = result.get("gate_lr_scale")
    phase = {"l0": ", L0 phase (no BLEU yet)",
             "l0-running": ", L0 phase still running at update "
                           + str(max((r["update"] for r in trace), default="?"))}
    # a quick run says its length; a converged run's seed is added by the caller where it is not 1
    protocol = protocol_label(result) if protocol_of(result) == QUICK else CONVERGED
    return (f"λ={format_lambda(result['l0_lambda'])}, {protocol}"
            + (f", gate lr ×{scale:g}" if scale is not None else "")
            + phase.get(result.get("phase"), ""))


def trace_summary(series) -> Table:
    """Per attention type: heads traced, and heads with P(open) < 0.5 at the first and last record."""
    rows = []
    for attention_type in ATTENTION_TYPES:
        heads = [values for (t, _, _), (_, values) in series.items() if t == attention_type]
        if heads:
            rows.append([attention_type, len(heads), sum(v[0] < 0.5 for v in heads),
                         sum(v[-1] < 0.5 for v in heads)])
    return Table(["type", "heads", "P(open) < 0.5 at start", "P(open) < 0.5 at end"], rows)


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
    names = FUNCTIONS + (NO_FUNCTION,)
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
