"""The tables of what L0 pruning keeps: encoder heads kept against BLEU and the Michel et al.
curve (1), every attention type with the layout trained from scratch (2), and where heads go
first (3). Pure functions over loaded result files (table_basics.py says what the inputs are).
"""
from typing import Dict, List, Optional, Sequence, Tuple

from ..heads import ATTENTION_TYPES
from .layout import ALL_L0, BASELINE, ENCODER_L0, FROM_SCRATCH, QUICK, protocol_of
from .table_basics import (
    QUICK_NOTE,
    MissingInput,
    Table,
    baseline_result,
    by_kind,
    format_lambda,
    headline,
    lambda_texts,
    protocol_label,
)


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
