"""The language-model recipe's tables (recipes/lm_english), from its result files: one per model,
`results/<model>/result.json`, written by `fairseq-heads lm-result` (its format:
pruning/lm_result.py). This module reads files only; it loads no model.

`tables.md` answers the questions of the LM issue from those files, the baseline's
`stats/baseline/heads.json` (functions, agreement) and the Michel curves (`curves/<metric>/curve.csv`).
"""
import csv
import json
import os
from typing import Dict, List, Optional, Sequence

from ..files import write_text_atomic
from ..numbers import format_number
from ..stats.table import label_kind, read_json_document
from .block_losses import read_block_losses
from .layout import seeds_of
from .function_tables import head_level_interval
from .lm_protocol_tables import (ADVANTAGE_COLUMNS, advantage_rows, control_of, costs_against_controls,
                                 has_block_losses, has_converged, paired_cost_interval, relative_cost,
                                 removable_per_seed, scratch_quadruples, training_updates)
from .table_basics import protocol_and_seed

LM_FUNCTIONS = ("previous-token", "induction", "duplicate-token", "positional", "rare")  # an LM head's functions


class LMReportError(ValueError):
    pass


# ---------------------------------------------------------------- reading a results folder


def read_results(results_dir: str) -> List[Dict[str, object]]:
    """The result files under RESULTS/results/*/result.json; LMReportError without a baseline."""
    folder = os.path.join(results_dir, "results")
    if not os.path.isdir(folder):
        raise LMReportError(f"{folder}: no results/ folder (run the recipe first)")
    out = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name, "result.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                try:
                    out.append(json.load(f))
                except json.JSONDecodeError as error:
                    raise LMReportError(f"{path}: not valid JSON ({error})") from None
    if not any(r["kind"] == "baseline" for r in out):
        raise LMReportError(f"{folder}: no baseline result")
    return out


def read_curve(path: str) -> List[Dict[str, float]]:
    with open(path, newline="", encoding="utf-8") as f:
        return [{"heads_kept": int(r["heads_kept"]), "perplexity": float(r["perplexity"])}
                for r in csv.DictReader(f)]


def dec_self_functions(heads_doc) -> Dict[tuple, List[str]]:
    """{(layer, head): [function, ...]} of the baseline's dec-self heads ("positional(-1)" ->
    "positional")."""
    out = {}
    for row in heads_doc["heads"]:
        if row["type"] == "dec-self":
            out[(row["layer"], row["head"])] = sorted({label_kind(label) for label in row["labels"] or []})
    return out


def most_removable(points: Sequence[Dict[str, float]], baseline: float, tolerance: float) -> int:
    """The most heads removed at any point of a curve with perplexity <= baseline * (1 + tolerance)."""
    total = max(p["heads_kept"] for p in points)
    ok = [total - p["heads_kept"] for p in points if p["perplexity"] <= baseline * (1 + tolerance)]
    return max(ok) if ok else 0


# ---------------------------------------------------------------- tables


def _fmt(value, digits=2) -> str:
    return format_number(value, digits, "–")


def repeat_copy_drops(induction: dict) -> dict:
    """{"all" | L: {estimate, ci_low, ci_high, probes}} of heads.json meta `induction`: the
    repeat-copy loss drop, named `loss_drop` in stats folders written before it was renamed."""
    return induction.get("repeat_copy_loss_drop", induction.get("loss_drop")) or {}


def _natural_icl_line(meta: dict) -> List[str]:
    """The natural-text in-context learning score of heads.json meta, or why there is none."""
    icl = meta.get("natural_icl")
    if not icl:
        return []
    late, early = icl["late_position"], icl["early_position"]
    if icl.get("reason"):
        return [f"In-context learning on the subset's text (loss at token {late} − loss at token "
                f"{early}): not computed: {icl['reason']}", ""]
    return [f"In-context learning on the subset's text (Olsson et al.; loss at token {late} − loss at "
            f"token {early}, nats, 95% CI; negative = the context helps): {_interval(icl['score'])} "
            f"over {int(icl['blocks'])} blocks (losses {_fmt(icl['early_loss']['estimate'])} → "
            f"{_fmt(icl['late_loss']['estimate'])})", ""]


def _interval(cell) -> str:
    if not cell:
        return "–"
    return f"{_fmt(cell['estimate'])} [{_fmt(cell['ci_low'])}, {_fmt(cell['ci_high'])}]"


def build_lm_tables(results_dir: str) -> str:
    """tables.md of the LM recipe: baseline, L0 sweep, removable heads, agreement, induction."""
    results = read_results(results_dir)
    baseline = next(r for r in results if r["kind"] == "baseline")
    base_ppl = float(baseline["perplexity"])
    heads_doc = read_json_document(os.path.join(results_dir, "stats", "baseline"))
    functions = dec_self_functions(heads_doc) if heads_doc else {}
    lines = [f"# Language-model heads: {os.path.basename(os.path.abspath(results_dir))}", ""]

    lines += ["## 1. Baseline", "",
              "| model | perplexity (" + str(baseline["subset"]) + ") | parameters | heads | updates |",
              "|---|---|---|---|---|",
              f"| baseline | {_fmt(base_ppl)} | {baseline['parameters']:,} | {baseline['heads_total']} | "
              f"{baseline['updates']} |", ""]
    if heads_doc:
        counts = {f: sum(f in fs for fs in functions.values()) for f in LM_FUNCTIONS}
        none = sum(not fs for fs in functions.values())
        lines += ["Head functions of the baseline (thresholds in `heads.json` meta; docs/metrics.md):", "",
                  "| " + " | ".join(LM_FUNCTIONS) + " | none |", "|" + "---|" * (len(LM_FUNCTIONS) + 1),
                  "| " + " | ".join(str(counts[f]) for f in LM_FUNCTIONS) + f" | {none} |", ""]
        induction = heads_doc["meta"].get("induction")
        if induction:
            drops = repeat_copy_drops(induction)
            lines += [f"Repeat-copy loss drop (in-context copying of repeated random probes, nats/token, "
                      f"95% CI): {_interval(drops.get('all'))}; per length: "
                      + ", ".join(f"L={k}: {_interval(v)}" for k, v in drops.items() if k != "all"),
                      ""]
        lines += _natural_icl_line(heads_doc["meta"])
        best = sorted(heads_doc["heads"], key=lambda r: -(r.get("previous_token_mass") or 0))[:3]
        if best and "previous_token_mass" in best[0]:
            lines += ["Strongest heads per function (estimate [95% CI]):", "",
                      "| head | previous-token mass | induction | copying (OV) | duplicate-token mass | labels |",
                      "|---|---|---|---|---|---|"]
            by_induction = sorted(heads_doc["heads"], key=lambda r: -(r.get("induction") or 0))[:3]
            for row in list(dict.fromkeys([(r["layer"], r["head"]) for r in best + by_induction])):
                r = next(x for x in heads_doc["heads"] if (x["layer"], x["head"]) == row)
                lines.append(
                    f"| L{r['layer']}H{r['head']} | {_fmt(r.get('previous_token_mass'))} "
                    f"[{_fmt(r.get('previous_token_mass_ci_low'))}, {_fmt(r.get('previous_token_mass_ci_high'))}] | "
                    f"{_fmt(r.get('induction'))} [{_fmt(r.get('induction_ci_low'))}, {_fmt(r.get('induction_ci_high'))}] | "
                    f"{_fmt(r.get('copying_score'))} | {_fmt(r.get('duplicate_token_mass'))} | {', '.join(r.get('labels') or []) or '–'} |")
            lines.append("")

    l0 = sorted((r for r in results if r["kind"] == "l0"),
                key=lambda r: (protocol_and_seed(r) != "quick", r["l0_lambda"], seeds_of(r)))
    protocols = has_converged(l0)  # a protocol column only where there is more than one
    controls = {r["name"]: control_of(r, l0) for r in l0}
    blocks = {}  # {model: (per-block NLL, tokens)} of the result files that kept them
    for r in results:
        losses = read_block_losses(results_dir, r["name"])
        if losses is not None:
            blocks[r["name"]] = (losses.nll, losses.tokens)
    controlled = any(controls.values())
    if l0:
        lines += ["## 2. L0 sweep: heads kept, perplexity, surviving functions", "",
                  "| λ | " + ("protocol | updates | " if protocols else "") + "heads kept | perplexity | Δ vs baseline | "
                  + ("Δ vs its λ=0 control | " if controlled else "") + " | ".join(f"{f} kept" for f in LM_FUNCTIONS)
                  + " | none kept |", "|" + "---|" * (5 + len(LM_FUNCTIONS) + 2 * protocols + controlled)]
        for r in l0:
            kept = {(layer, head) for layer, row in enumerate(r["kept"]) for head in row}
            cells = []
            for f in LM_FUNCTIONS + ("none",):
                members = [k for k, fs in functions.items() if (f in fs if f != "none" else not fs)]
                cells.append(f"{sum(k in kept for k in members)}/{len(members)}" if members else "–")
            protocol = f"{protocol_and_seed(r)} | {_fmt(training_updates(r) or r.get('updates'))} | " if protocols else ""
            versus_control = _versus_control(r, controls[r["name"]], blocks) if controlled else ""
            lines.append(f"| {r['l0_lambda']:g} | {protocol}{r['heads_kept']}/{r['heads_total']} | {_fmt(r['perplexity'])} | "
                         f"{100 * (r['perplexity'] / base_ppl - 1):+.1f}% | {versus_control}" + " | ".join(cells) + " |")
        if controlled:
            lines += ["", "Δ vs its λ=0 control: the perplexity over that of the λ=0 model of the same protocol and "
                      "seed (fine-tuned under the same protocol without a penalty), with a 95% paired-bootstrap interval over the "
                      "test blocks where both models kept their block losses."]
        lines.append("")

    curves = read_curves(results_dir)
    if curves or l0:
        lines += ["## 3. How many heads can go (Michel-style removal by each metric, no fine-tuning; L0 with fine-tuning)", "",
                  "| method | heads removable at ≤ +2% perplexity | at ≤ +5% | points |", "|---|---|---|---|"]
        for metric, points in curves.items():
            lines.append(f"| {metric} | {most_removable(points, base_ppl, 0.02)} | {most_removable(points, base_ppl, 0.05)} | "
                         + ", ".join(f"{p['heads_kept']}:{_fmt(p['perplexity'], 1)}" for p in points) + " |")
        if l0:
            points = [{"heads_kept": r["heads_kept"], "perplexity": r["perplexity"]} for r in l0]
            points.append({"heads_kept": baseline["heads_total"], "perplexity": base_ppl})
            lines.append(f"| L0, against the baseline | {most_removable(points, base_ppl, 0.02)} | "
                         f"{most_removable(points, base_ppl, 0.05)} | "
                         + ", ".join(f"{p['heads_kept']}:{_fmt(p['perplexity'], 1)}" for p in points[:-1]) + " |")
        if controlled:  # the fine-tune's own gain taken out: each model against its λ=0 control
            costs = costs_against_controls(l0)
            cells = []
            for tolerance in (0.02, 0.05):
                most = removable_per_seed(costs, tolerance)
                cells.append(", ".join(f"s{seed}: {n}" for seed, n in most.items()) if len(most) > 1
                             else str(*most.values()))
            lines.append(f"| L0, each against its λ=0 control | {cells[0]} | {cells[1]} | "
                         + ", ".join(f"{r['heads_kept']}:{100 * cost:+.0f}%" for r, cost in costs) + " |")
        lines.append("")

    agreement_path = os.path.join(results_dir, "stats", "baseline", "agreement.json")
    if os.path.isfile(agreement_path):
        with open(agreement_path, encoding="utf-8") as f:
            agreement = json.load(f).get("dec-self", {})
        if agreement:
            lines += ["## 4. Do the importance metrics agree? (Spearman over heads, 95% CIs)", "",
                      "Intervals: resampling blocks (the heads fixed: the metrics' sampling noise), and "
                      "over heads (Fisher z, variance 1.06/(n − 3); docs/metrics.md).", "",
                      "| pair | Spearman [blocks] | [heads] | within-layer mean |", "|---|---|---|---|"]
            constant = [pair for pair, cell in agreement.items() if cell.get("spearman") is None]
            for pair, cell in agreement.items():
                if pair in constant:
                    continue
                low, high = head_level_interval(cell)
                within = (cell.get("within_layer") or {}).get("spearman_mean")
                lines.append(f"| {pair} | {_fmt(cell['spearman'])} [{_fmt(cell['ci_low'])}, {_fmt(cell['ci_high'])}] "
                             f"| [{_fmt(low)}, {_fmt(high)}] | {_fmt(within)} |")
            if constant:  # e.g. gate_p_open of a baseline whose gates are all fixed open
                lines += ["", "No rank correlation (a metric equal on every head): " + ", ".join(constant) + "."]
            lines.append("")

    induction_rows = []
    for r in l0:
        doc = read_json_document(os.path.join(results_dir, "stats", r["name"]))
        if doc and doc["meta"].get("induction"):
            induction_rows.append((r, repeat_copy_drops(doc["meta"]["induction"]).get("all")))
    if induction_rows and heads_doc and heads_doc["meta"].get("induction"):
        lines += ["## 5. In-context copying as heads go (repeat-copy loss drop on repeated random probes, nats/token)", "",
                  "| model | heads kept | repeat-copy loss drop [95% CI] |", "|---|---|---|",
                  f"| baseline | {baseline['heads_total']} | {_interval(repeat_copy_drops(heads_doc['meta']['induction']).get('all'))} |"]
        for r, cell in induction_rows:
            label = f"λ={r['l0_lambda']:g}" + (f", {protocol_and_seed(r)}" if protocols else "")
            lines.append(f"| {label} | {r['heads_kept']} | {_interval(cell)} |")
        lines.append("")

    scratch = [r for r in results if r["kind"] == "from_scratch"]
    if scratch:
        lines += ["## 6. The same layout from scratch vs pruned from the trained model", "",
                  "| layout of | heads | from trained (ppl, updates) | from scratch (ppl, updates) |", "|---|---|---|---|"]
        for s in scratch:
            trained = next((r for r in l0 if r["name"] == s["from_model"]), None)
            lines.append(f"| {s['from_model']} | {s['heads_kept']} | "
                         f"{_fmt(trained['perplexity']) if trained else '–'} "
                         f"({(training_updates(trained) or trained['updates']) if trained else '–'}) | "
                         f"{_fmt(s['perplexity'])} ({training_updates(s) or s['updates']}) |")
        lines.append("")
    quadruples = scratch_quadruples(results)
    if quadruples:
        rows = advantage_rows(quadruples, blocks)
        intervals = ("Each seed's costs and advantage carry a 95% paired-bootstrap interval over the test blocks "
                     "(its four models scored on the same resampled blocks); a mean row gives each column's mean "
                     "with a 95% interval holding both the spread between the seeds and the blocks' sampling "
                     "(docs/pruning.md, \"Means over seeds\") and its range over the seeds."
                     if has_block_losses(quadruples, blocks) else
                     "A mean row gives each column's mean, its 95% Student's t interval over the seeds (these "
                     "results keep no per-block losses, so the test set's sampling is not in it) and its range "
                     "over the seeds.")
        lines += ["## 7. Trained vs scratch, each against its own full layout (converged protocol)", "",
                  "Cost from trained: the pruned model's perplexity over its seed's λ=0 control's; cost "
                  "from scratch: the layout from scratch over the full layout from scratch (the same seed, "
                  "schedule and patience). Advantage > 0: pruning the trained model lost less. " + intervals, "",
                  "| " + " | ".join(ADVANTAGE_COLUMNS) + " |", "|" + "---|" * len(ADVANTAGE_COLUMNS)]
        lines += ["| " + " | ".join(_fmt(cell) if isinstance(cell, float) else ("–" if cell is None else str(cell))
                                    for cell in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines) + "\n"


def _versus_control(result: dict, control: Optional[dict], blocks: Dict[str, tuple]) -> str:
    """The §2 cell: RESULT's relative perplexity cost against CONTROL, with its paired interval
    where both kept their block losses."""
    if control is None:
        return "– | "
    cell = f"{100 * relative_cost(result['perplexity'], control['perplexity']):+.1f}%"
    if result["name"] in blocks and control["name"] in blocks:
        low, high = paired_cost_interval(blocks[result["name"]], blocks[control["name"]])
        cell += f" [{low:+.1f}, {high:+.1f}]"
    return cell + " | "


def read_curves(results_dir: str) -> Dict[str, List[Dict[str, float]]]:
    """{metric: points} from RESULTS/curves/<metric>/curve.csv."""
    curve_dir = os.path.join(results_dir, "curves")
    names = sorted(os.listdir(curve_dir)) if os.path.isdir(curve_dir) else []
    return {name: read_curve(os.path.join(curve_dir, name, "curve.csv")) for name in names
            if os.path.isfile(os.path.join(curve_dir, name, "curve.csv"))}


def draw_lm_figure(curves, l0, path: str) -> None:
    """Perplexity against heads kept: each metric's curve and the L0 models."""
    from ..plotting import pyplot

    plt = pyplot()
    l0 = sorted(l0, key=lambda r: r["heads_kept"])
    figure, axes = plt.subplots(figsize=(6, 4))
    for metric, points in curves.items():
        axes.plot([p["heads_kept"] for p in points], [p["perplexity"] for p in points], "o-", label=f"remove by {metric}")
    if l0:
        axes.plot([r["heads_kept"] for r in l0], [r["perplexity"] for r in l0], "ks--", label="L0 (fine-tuned)")
    axes.set_xlabel("heads kept")
    axes.set_ylabel("perplexity")
    axes.invert_xaxis()
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def build_lm_report(results_dir: str, out_dir: Optional[str] = None) -> List[str]:
    """Write tables.md and the perplexity-vs-heads figure of an LM results folder, each atomically."""
    from ..files import atomic_path

    out_dir = out_dir or results_dir
    os.makedirs(os.path.join(out_dir, "figures"), exist_ok=True)
    written = []
    tables = build_lm_tables(results_dir)
    path = os.path.join(out_dir, "tables.md")
    write_text_atomic(path, tables)
    written.append(path)
    curves = read_curves(results_dir)
    l0 = [r for r in read_results(results_dir) if r["kind"] == "l0"]
    if curves or l0:
        figure = os.path.join(out_dir, "figures", "perplexity_vs_heads.png")
        with atomic_path(figure) as tmp:
            draw_lm_figure(curves, l0, tmp)
        written.append(figure)
    return written
