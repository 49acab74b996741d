"""`fairseq-heads report RESULTS_DIR`: tables.md, figures/*.png and a self-contained report.html,
from a recipe's result files alone (layout.py). Every table or figure whose inputs are missing
is replaced by a note saying what is missing.

Outputs are written to a staging folder and moved into place at the end, so a failed report
leaves the previous one (or none) behind, never half of one.
"""
import base64
import html
import os
from typing import Callable, List, NamedTuple, Optional, Tuple

from . import figures, layout, tables
from .baseline_seeds import baseline_seed_table
from .decode_speed_table import decode_speed_table
from .formation import formation_rows, formation_table, plot_formation, points_folders
from .michel import michel_comparison_table
from .results_folder import Inputs, load_inputs, read_trace  # noqa: F401  (read_trace: the tests)
from .seed_masks import seed_mask_table
from .seed_means import TooFewSeeds, seed_mean_table
from .tables import MissingInput, Table


class Section(NamedTuple):
    title: str
    tables: List[Tuple[str, Table]]  # (caption, table)
    figures: List[Tuple[str, str]]   # (caption, file name in figures/)
    skipped: str = ""                # why the section is missing, if it is


def write_l0_points(results_dir: str, out: str) -> int:
    """The encoder-only L0 models as (heads_kept, bleu, label) rows for `curve --overlay`."""
    from ..files import write_text_atomic

    points = [p for p in tables.encoder_sweep_points(load_inputs(results_dir).results) if p[0] != "baseline"]
    lines = ["heads_kept,bleu,label"] + [f"{kept},{bleu:.2f},L0 {label}" for label, kept, bleu in points]
    write_text_atomic(out, "\n".join(lines) + "\n")
    return len(points)


# ------------------------------------------------------------------ the sections


_DIFFERENCES = "BLEU differences, paired bootstrap"


def _differences(inputs: Inputs, kinds) -> Tuple[str, Table]:
    try:
        return _DIFFERENCES, tables.bleu_difference_table(inputs.results, inputs.translations, kinds)
    except MissingInput as missing:
        return f"{_DIFFERENCES}: not computed ({missing})", Table([], [])


def _michel_comparison(inputs: Inputs) -> List[Tuple[str, Table]]:
    """The fair comparison with heuristic pruning, where such models were trained (none: no table)."""
    if not tables.by_kind(inputs.results, layout.HEURISTIC):
        return []
    title = "L0 against heuristic pruning at equal heads, the same fine-tune"
    try:
        return [(title, michel_comparison_table(inputs.results, inputs.translations))]
    except MissingInput as missing:
        return [(f"{title}: not computed ({missing})", Table([], []))]


def _seed_masks(inputs: Inputs, kind: str) -> List[Tuple[str, Table]]:
    """Which heads the seeds agree on, where a λ has two converged seeds or more (else no table)."""
    try:
        return [("The heads each seed keeps, and how much the seeds agree", seed_mask_table(inputs.results, kind))]
    except MissingInput:
        return []


def _decode_speed(inputs: Inputs) -> List[Tuple[str, Table]]:
    """What the pruned models decode at, where it was measured (none: no table)."""
    if not inputs.decode_speeds:
        return []
    title = "Decoding speed of the pruned models: measured against masked, and predicted"
    try:
        return [(title, decode_speed_table(inputs.results, inputs.translations, inputs.decode_speeds))]
    except MissingInput as missing:
        return [(f"{title}: not computed ({missing})", Table([], []))]


def _baseline_seeds(inputs: Inputs) -> List[Tuple[str, Table]]:
    """The spread over baselines of several seeds, where the folder has them (else no table)."""
    try:
        return [("The same models over baseline seeds (a baseline each)", baseline_seed_table(inputs.results))]
    except MissingInput:
        return []


def _seed_means(inputs: Inputs, kinds) -> List[Tuple[str, Table]]:
    """Means over seeds with the seed spread in their intervals, where a contrast has two seeds
    or more (else no table)."""
    title = "Means over seeds: intervals holding the seed spread and the test set"
    try:
        return [(title, seed_mean_table(inputs.results, inputs.translations, kinds))]
    except TooFewSeeds:
        return []
    except MissingInput as missing:
        return [(f"{title}: not computed ({missing})", Table([], []))]


def _encoder_section(inputs: Inputs, draw: Callable) -> Section:
    shown = tables.headline(inputs.results)
    table = tables.encoder_pruning_table(inputs.results, inputs.curve, inputs.curves)
    curve = tables.curve_points(inputs.curve) if inputs.curve else []
    more = {metric: tables.curve_points(rows) for metric, rows in inputs.curves.items()}
    name = draw("encoder_pruning.png", figures.encoder_pruning_figure,
                tables.encoder_sweep_points(shown), curve, more_curves=more)
    return Section("1. Encoder heads: BLEU against heads kept (L0 sweep, decoder frozen) and "
                   "heuristic pruning", [("", table), _differences(inputs, [layout.ENCODER_L0])]
                   + _michel_comparison(inputs) + _seed_means(inputs, [layout.ENCODER_L0])
                   + _seed_masks(inputs, layout.ENCODER_L0) + _decode_speed(inputs) + _baseline_seeds(inputs),
                   [("BLEU against encoder heads kept", name)])


def _all_types_section(inputs: Inputs, draw: Callable) -> Section:
    captions = [("", tables.all_types_table(inputs.results)),
                _differences(inputs, [layout.ALL_L0, layout.FROM_SCRATCH])] + _seed_means(inputs, [layout.ALL_L0])
    captions += _seed_masks(inputs, layout.ALL_L0)
    fair = "Trained vs from scratch, converged protocol, per seed"
    try:
        captions += [(fair, tables.trained_vs_scratch_table(inputs.results, inputs.translations)),
                     ("Trained vs from scratch over the seeds", tables.seed_summary_table(inputs.results))]
    except MissingInput as missing:
        captions.append((f"{fair}: not computed ({missing})", Table([], [])))
    relative = "Trained vs from scratch, each against its own full layout"
    try:
        captions.append((relative, tables.pruning_cost_table(inputs.results, inputs.translations)))
    except MissingInput as missing:
        captions.append((f"{relative}: not computed ({missing})", Table([], [])))
    return Section("2. All attention types pruned: heads kept, BLEU from trained vs from scratch",
                   captions, [])


def _first_losses_section(inputs: Inputs, draw: Callable) -> Section:
    inputs = inputs._replace(results=tables.headline(inputs.results))
    pruned = tables.by_kind(inputs.results, layout.ALL_L0)
    if not pruned:
        raise MissingInput("no all-attention-types L0 results (kind all_l0)")
    fractions = {t: [r["heads_kept"][t] / r["heads_total"][t] for r in pruned]
                 for t in pruned[0]["heads_kept"]}
    name = draw("heads_kept_by_type.png", figures.heads_kept_figure,
                [r["l0_lambda"] for r in pruned], fractions)
    captions = [("Fraction of heads kept per attention type", tables.first_losses(inputs.results)),
                ("Heads kept per layer", tables.heads_kept_by_layer(inputs.results))]
    if tables.by_kind(inputs.results, layout.ENCODER_L0):
        captions.append(("Heads kept per layer, encoder-only runs",
                         tables.heads_kept_by_layer(inputs.results, layout.ENCODER_L0)))
    return Section("3. Which attention types and layers lose heads first as λ grows", captions,
                   [("Heads kept per attention type against λ", name)])


def _functions_section(inputs: Inputs, draw: Callable) -> Section:
    if not inputs.heads:
        raise MissingInput("no stats/baseline/heads.csv (`fairseq-heads stats` of the baseline)")
    captions = [("Heads with a function", tables.head_function_table(inputs.heads))]
    try:
        captions.append(("Syntactic relations: best head against the positional baseline",
                         tables.syntactic_relation_table(inputs.heads)))
    except MissingInput as missing:
        captions.append((f"Syntactic relations: skipped ({missing})", Table([], [])))
    if inputs.parsed_set_heads:  # syntax.compare: the same statistics on the parsed set
        for caption, table in (("In domain and on the parsed set: heads with a function",
                                tables.domain_function_table),
                               ("In domain and on the parsed set: how each metric ranks the heads",
                                tables.domain_importance_table)):
            try:
                captions.append((caption, table(inputs.heads, inputs.parsed_set_heads)))
            except MissingInput as missing:
                captions.append((f"{caption}: skipped ({missing})", Table([], [])))
    return Section("4. Head functions of the baseline (positional, syntactic, rare words)", captions, [])


def _agreement_section(inputs: Inputs, draw: Callable) -> Section:
    if inputs.agreement is None:
        raise MissingInput("no stats/baseline/agreement.json")
    return Section("5. Agreement between head-importance metrics (baseline)",
                   [("", tables.agreement_table(inputs.agreement))], [])


def _trace_section(inputs: Inputs, draw: Callable, trace_lambda: Optional[float]) -> Section:
    traced = [r for r in tables.by_kind(list(inputs.results) + list(inputs.l0_phases), layout.ALL_L0)
              if r["name"] in inputs.traces]
    candidates = traced
    if trace_lambda is not None:
        candidates = [r for r in candidates if r["l0_lambda"] == trace_lambda]
    if not candidates:
        raise MissingInput("no gate trace of an all-attention-types run"
                           + (f" with λ={trace_lambda:g}" if trace_lambda is not None else ""))
    # The slowest gates (smallest gate lr scale: heads die one by one there), then the largest
    # lambda (the most heads die); a file without a scale counts as the fastest.
    chosen = min(candidates, key=lambda r: (r.get("gate_lr_scale") or float("inf"), -r["l0_lambda"],
                                            layout.seeds_of(r)))
    traces = {r["name"]: read_trace(inputs.traces[r["name"]]) for r in traced}
    series = tables.trace_series(tables.with_final_gates(traces[chosen["name"]], chosen))
    title = f"P(open) of every head over fine-tuning, {tables.trace_label(chosen, traces[chosen['name']])}"
    name = draw("gate_trace.png", figures.gate_trace_figure, series, title)
    runs = [(tables.trace_label(r, traces[r["name"]])
             + ("" if layout.seeds_of(r) == (1, 1) else f", seed {layout.seed_label(r)}"),
             *tables.open_heads_series(traces[r["name"]])) for r in traced]
    dying = draw("open_heads.png", figures.open_heads_figure, runs)
    return Section("6. Heads dying over training", [(title, tables.trace_summary(series))],
                   [(title, name), ("Open heads over the L0 fine-tune, every traced run", dying)])


def _survivors_section(inputs: Inputs, draw: Callable) -> Section:
    inputs = inputs._replace(results=tables.headline(inputs.results))
    if not inputs.heads:
        raise MissingInput("no stats/baseline/heads.csv (head functions of the baseline)")
    runs, open_counts, _ = tables.survivor_counts(inputs.results, inputs.heads)
    labels = [f"{kind} λ={l0_lambda}" for kind, l0_lambda in runs]
    name = draw("survivors.png", figures.survivors_figure, labels, open_counts)
    return Section("7. What the surviving heads do",
                   [("", tables.survivor_functions(inputs.results, inputs.heads))],
                   [("Open heads by function at each λ", name)])


def _formation_section(inputs: Inputs, draw: Callable) -> Optional[Section]:
    """Only in a folder whose recipe keeps its baseline's checkpoints (the `formation` step): a
    table per baseline seed, one figure with every seed."""
    runs = {label: formation_rows(folder) for label, folder in points_folders(inputs.results_dir).items()}
    if not runs:
        return None
    name = draw("formation.png", plot_formation, runs if len(runs) > 1 else next(iter(runs.values())))
    single = len(runs) == 1
    return Section("8. When the head functions formed",
                   [("One row per kept checkpoint of the baseline" + ("" if single else f" ({label})"),
                     formation_table(rows)) for label, rows in runs.items()],
                   [("Head functions over training (thresholds dashed)" + ("" if single else "; one line style a seed"),
                     name)])


SECTION_TITLES = (
    "1. Encoder heads: BLEU against heads kept",
    "2. All attention types pruned",
    "3. Which attention types and layers lose heads first",
    "4. Head functions of the baseline",
    "5. Agreement between head-importance metrics",
    "6. Heads dying over training",
    "7. What the surviving heads do",
    "8. When the head functions formed",
)


def build_sections(inputs: Inputs, figure_dir: str, trace_lambda: Optional[float] = None) -> List[Section]:
    """Every section, drawing its figures into figure_dir; a section whose inputs are missing
    comes back with `skipped` set."""
    def draw(name, function, *args, **options):
        function(*args, os.path.join(figure_dir, name), **options)
        return name

    builders = [_encoder_section, _all_types_section, _first_losses_section, _functions_section,
                _agreement_section, lambda i, d: _trace_section(i, d, trace_lambda), _survivors_section,
                _formation_section]
    sections = []
    for title, builder in zip(SECTION_TITLES, builders):
        try:
            section = builder(inputs, draw)
            if section is not None:
                sections.append(section)
        except MissingInput as missing:
            sections.append(Section(title, [], [], skipped=str(missing)))
    return sections


# ------------------------------------------------------------------ writing


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(tables.format_cell(v))}</td>" for v in row) + "</tr>"
                   for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _provenance(inputs: Inputs) -> List[str]:
    baseline = [r for r in inputs.results if r.get("kind") == layout.BASELINE]
    # Relative: a committed report must not name the folders of the machine that made it.
    lines = [f"{len(inputs.results)} result files in {layout.RESULTS}/"]
    if baseline:
        lines.append(f"BLEU on '{baseline[0]['subset']}' ({baseline[0]['sentences']} sentences), "
                     f"sacreBLEU {baseline[0]['sacrebleu_signature']}")
    return lines


def markdown_report(sections: List[Section], inputs: Inputs) -> str:
    """tables.md: every section's tables and figures, or the note saying why it is missing."""
    parts = ["# Tables: pruning and analysing attention heads", ""]
    parts += [f"_{line}_  " for line in _provenance(inputs)] + [""]
    for section in sections:
        parts.append(f"## {section.title}")
        parts.append("")
        if section.skipped:
            parts += [f"_Skipped: {section.skipped}._", ""]
            continue
        for caption, table in section.tables:
            if caption:
                parts += [f"**{caption}**", ""]
            if table.columns:
                parts += [tables.markdown_table(table), ""]
            if table.note:
                parts += [f"_{table.note}_", ""]
        for caption, name in section.figures:
            parts += [f"![{caption}]({layout.FIGURES}/{name})", ""]
    return "\n".join(parts)


def html_report(sections: List[Section], inputs: Inputs, figure_dir: str) -> str:
    """report.html: the same sections with the figures embedded (self-contained)."""
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em}"
             "img{max-width:100%}.skip{color:#888}")
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\">",
             "<title>fairseq-heads report</title>", f"<style>{style}</style></head><body>",
             "<h1>Pruning and analysing attention heads</h1>"]
    parts += [f"<p><em>{html.escape(line)}</em></p>" for line in _provenance(inputs)]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.skipped:
            parts.append(f"<p class=\"skip\">Skipped: {html.escape(section.skipped)}.</p>")
            continue
        for caption, table in section.tables:
            if caption:
                parts.append(f"<p><strong>{html.escape(caption)}</strong></p>")
            if table.columns:
                parts.append(_html_table(table))
            if table.note:
                parts.append(f"<p><em>{html.escape(table.note)}</em></p>")
        for caption, name in section.figures:
            with open(os.path.join(figure_dir, name), "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            parts.append(f"<figure><img alt=\"{html.escape(caption)}\" src=\"data:image/png;base64,{data}\">"
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def build_report(results_dir: str, out_dir: Optional[str] = None,
                 trace_lambda: Optional[float] = None) -> Tuple[List[str], List[Tuple[str, str]]]:
    """Write OUT_DIR/tables.md, OUT_DIR/figures/*.png and OUT_DIR/report.html (OUT_DIR defaults
    to RESULTS_DIR). Returns (paths written, [(section, why skipped)])."""
    from ..files import staged_dir, write_text_atomic

    out_dir = os.path.abspath(out_dir or results_dir)
    os.makedirs(out_dir, exist_ok=True)
    inputs = load_inputs(results_dir)
    figure_dir = os.path.join(out_dir, layout.FIGURES)
    with staged_dir(figure_dir) as staged_figures:
        sections = build_sections(inputs, staged_figures, trace_lambda)
        documents = {layout.TABLES_MD: markdown_report(sections, inputs),
                     layout.REPORT_HTML: html_report(sections, inputs, staged_figures)}
    # Into place: the figures folder as a whole (above), then the two documents that point at it.
    written = [os.path.join(figure_dir, name) for name in sorted(os.listdir(figure_dir))]
    for name, text in documents.items():
        write_text_atomic(os.path.join(out_dir, name), text)
        written.append(os.path.join(out_dir, name))
    return written, [(s.title, s.skipped) for s in sections if s.skipped]
