"""The formation curve: when each head function appears while a model trains. One row per kept
checkpoint (the `formation` step, pipeline/formation.py, writes a folder per checkpoint: its in-domain
statistics, its syntactic heads on the parsed set, and `point.json` with its update, epoch, valid loss
and BLEU on a valid sample); this module only reads those folders.

A row's columns, each from the heads table (stats/table.py) of that checkpoint:
  best positional share per attention type  the largest share of queries whose most-attended key sits
                                            at one relative offset (the paper's positional function:
                                            >= 0.9 makes a head positional), and how many heads pass;
  syntactic gain                            the best encoder head's accuracy on its best relation minus
                                            that relation's positional baseline (the paper: >= 0.10);
  rare share                                the best head's share of sentences whose most-attended key is
                                            the rarest token, beside the share a uniform head would get;
  enc-dec confidence                        the mean (and largest) confidence of encoder-decoder heads;
  BLEU                                      on the valid sample (pipeline/formation.py says which).

Below the table, `formation_verdict` says when each function first had a head past its threshold
(or that none has after N epochs) and whether the curve has flattened, by a rule fixed before the
Europarl run's late points existed (issue 50): flat once, over the last epoch (the window of that
baseline's plateau stop: 6 validations 500 updates apart), no tracked statistic moved by as much
as 0.02 (absolute, on shares and gains in [0, 1]: a fifth of the syntactic margin of 0.10).
"""
import csv
import io
import json
import math
import os
import re
from typing import Dict, List, Optional

from ..numbers import is_missing
from ..stats.table import label_kind, parse_labels, read_json

POINT_FILE = "point.json"
POINTS_FOLDER = "formation_points"  # in a results folder: the formation step (and a watcher) fill it
TYPES = ("enc-self", "dec-self", "enc-dec")
COLUMNS = ("update", "epoch", "valid_loss", "bleu",
           *(f"positional_best_{t}" for t in TYPES), *(f"positional_heads_{t}" for t in TYPES),
           "syntactic_best_gain", "syntactic_best_relation", "syntactic_heads",
           "rare_best_share", "rare_chance", "rare_heads", "enc_dec_confidence_mean", "enc_dec_confidence_max")


# the formation verdict's rule (module docstring)
FLAT_WINDOW_EPOCHS = 1.0
FLAT_TOLERANCE = 0.02
TRACKED = ("positional_best_enc-self", "positional_best_dec-self", "syntactic_best_gain", "rare_best_share",
           "enc_dec_confidence_mean")
FUNCTION_COUNTS = {"positional": tuple(f"positional_heads_{t}" for t in TYPES), "syntactic": ("syntactic_heads",),
                   "rare-word": ("rare_heads",)}


def _float(value) -> Optional[float]:
    if value is None or value == "" or is_missing(value):
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _labels(row) -> List[str]:
    labels = row.get("labels") or []
    return [label_kind(label) for label in (parse_labels(labels) if isinstance(labels, str) else labels)]


def _labelled(rows, kind: str) -> int:
    """How many of `rows` carry a label of `kind` ('positional', 'syntactic', 'rare')."""
    return sum(1 for row in rows if kind in _labels(row))


def summarise_point(point_dir: str) -> Dict[str, object]:
    """One formation row from a checkpoint's folder (point.json, stats/, syntax/)."""
    with open(os.path.join(point_dir, POINT_FILE), encoding="utf-8") as f:
        point = json.load(f)
    row: Dict[str, object] = {name: point.get(name) for name in ("update", "epoch", "valid_loss", "bleu")}
    row["bleu_sample"] = (f"{'greedy' if point['settings']['bleu_beam'] == 1 else 'beam ' + str(point['settings']['bleu_beam'])}"
                          f", the first {point['settings']['bleu_sentences']} sentences of "
                          f"'{point['settings']['subset']}'")
    stats = read_json(os.path.join(point_dir, "stats"))
    by_type = {t: [r for r in stats.rows if r["type"] == t] for t in TYPES}
    for attention_type, rows in by_type.items():
        shares = [s for s in (_float(r.get("positional_share")) for r in rows) if s is not None]
        row[f"positional_best_{attention_type}"] = max(shares) if shares else None
        row[f"positional_heads_{attention_type}"] = _labelled(rows, "positional")
    rare_rows = [r for r in stats.rows if _float(r.get("rare_share")) is not None]
    row["rare_best_share"] = max((_float(r["rare_share"]) for r in rare_rows), default=None)
    row["rare_chance"] = max((_float(r.get("rare_chance")) or 0.0 for r in rare_rows), default=None)
    row["rare_heads"] = _labelled(stats.rows, "rare")
    confidence = [c for c in (_float(r.get("confidence")) for r in by_type["enc-dec"]) if c is not None]
    row["enc_dec_confidence_mean"] = sum(confidence) / len(confidence) if confidence else None
    row["enc_dec_confidence_max"] = max(confidence) if confidence else None
    syntax_dir = os.path.join(point_dir, "syntax")
    row["syntactic_best_gain"] = row["syntactic_best_relation"] = None
    row["syntactic_heads"] = None
    if os.path.isdir(syntax_dir):
        syntax = [r for r in read_json(syntax_dir).rows if r["type"] == "enc-self"]
        gains = [(g, r.get("syntactic_best")) for r in syntax
                 for g in [_float(r.get("syntactic_best_gain"))] if g is not None]
        if gains:
            row["syntactic_best_gain"], row["syntactic_best_relation"] = max(gains, key=lambda pair: pair[0])
        row["syntactic_heads"] = _labelled(syntax, "syntactic")
    return row


def formation_rows(points_dir: str) -> List[Dict[str, object]]:
    """Every point folder under `points_dir` (named by update), in update order."""
    names = [n for n in os.listdir(points_dir) if os.path.isfile(os.path.join(points_dir, n, POINT_FILE))]
    return [summarise_point(os.path.join(points_dir, n)) for n in sorted(names, key=int)]


def _cell(value, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def formation_csv(rows: List[Dict[str, object]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: _cell(row.get(name), 5) for name in COLUMNS})
    return out.getvalue()


def formation_markdown(rows: List[Dict[str, object]]) -> str:
    """The table of tables.md: one line per checkpoint."""
    header = ("| update | epoch | valid loss | BLEU | best positional share (enc-self / dec-self / enc-dec) "
              "| positional heads | syntactic gain (relation) | syntactic heads | rare share (chance) | rare heads "
              "| enc-dec confidence mean / max |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in rows:
        positional = " / ".join(_cell(r.get(f"positional_best_{t}"), 2) for t in TYPES)
        heads = " / ".join(_cell(r.get(f"positional_heads_{t}")) for t in TYPES)
        syntactic = (f"{r['syntactic_best_gain']:+.3f} ({r['syntactic_best_relation']})"
                     if r.get("syntactic_best_gain") is not None else "")
        rare = (f"{_cell(r.get('rare_best_share'), 2)} ({_cell(r.get('rare_chance'), 2)})"
                if r.get("rare_best_share") is not None else "")
        confidence = f"{_cell(r.get('enc_dec_confidence_mean'), 2)} / {_cell(r.get('enc_dec_confidence_max'), 2)}"
        lines.append(f"| {r['update']} | {_cell(r.get('epoch'), 2)} | {_cell(r.get('valid_loss'))} | "
                     f"{_cell(r.get('bleu'), 2)} | {positional} | {heads} | {syntactic} | "
                     f"{_cell(r.get('syntactic_heads'))} | {rare} | {_cell(r.get('rare_heads'))} | {confidence} |")
    return "\n".join(lines) + "\n"


def first_appearance(rows: List[Dict[str, object]], function: str) -> Optional[Dict[str, object]]:
    """The first row with a head of `function` (a FUNCTION_COUNTS key) past its threshold, or None."""
    for row in rows:
        if sum(int(row.get(column) or 0) for column in FUNCTION_COUNTS[function]) > 0:
            return row
    return None


def last_epoch_moves(rows: List[Dict[str, object]], window: float = FLAT_WINDOW_EPOCHS) -> Optional[Dict[str, float]]:
    """How far each TRACKED statistic ranged (max - min) over the last `window` epochs: the rows
    from the last one at least `window` epochs before the final row, through the final row; None
    when the rows do not yet span `window` epochs (or lack epochs)."""
    epochs = [_float(r.get("epoch")) for r in rows]
    if not rows or any(e is None for e in epochs):
        return None
    starts = [i for i, e in enumerate(epochs) if epochs[-1] - e >= window]
    if not starts:
        return None
    span = rows[starts[-1]:]
    moves = {}
    for column in TRACKED:
        values = [v for v in (_float(r.get(column)) for r in span) if v is not None]
        if values:
            moves[column] = max(values) - min(values)
    return moves


def formation_verdict(rows: List[Dict[str, object]], window: float = FLAT_WINDOW_EPOCHS,
                      tolerance: float = FLAT_TOLERANCE) -> str:
    """When each function appeared, and whether the curve has flattened (module docstring)."""
    if not rows:
        return ""
    last = rows[-1]
    where = f"update {last['update']}" + (f", epoch {_cell(_float(last.get('epoch')), 2)}" if last.get("epoch") else "")
    parts = []
    for function in FUNCTION_COUNTS:
        row = first_appearance(rows, function)
        parts.append(f"{function}: first at update {row['update']}" if row is not None
                     else f"{function}: no head by {where}")
    moves = last_epoch_moves(rows, window)
    span, a_span = ("epoch", "an epoch") if window == 1 else (f"{window:g} epochs",) * 2
    if moves is None:
        flat = f"The curve does not yet span {a_span}: its flatness is not judged"
    else:
        moving = {k: v for k, v in moves.items() if v >= tolerance}
        flat = (f"The curve is flat: over the last {span} no statistic moved by {tolerance:g} or more"
                if not moving else
                f"The curve still moves over the last {span}: "
                + ", ".join(f"{k.replace('_', ' ')} by {v:.2f}" for k, v in sorted(moving.items())))
    return "; ".join(parts) + ". " + flat + "."


def formation_table(rows: List[Dict[str, object]]):
    """The rows as the report's Table (report/table_basics.py)."""
    from .table_basics import Table

    lines = formation_markdown(rows).splitlines()
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    return Table(cells[0], cells[2:], note="best positional share: the largest share of queries whose "
                 "most-attended key sits at one offset (>= 0.9: positional); syntactic gain: the best encoder "
                 "head's accuracy on its best relation minus that relation's positional baseline (>= 0.10); "
                 "rare share: of sentences whose most-attended key is the rarest token (>= 0.5), chance beside it; "
                 f"BLEU: {'; '.join(sorted({str(r.get('bleu_sample')) for r in rows}))}. {formation_verdict(rows)}")


def points_folders(results_dir: str) -> Dict[str, str]:
    """{"seed N": folder} of a results folder's formation points: `formation_points` is the
    seed-1 baseline's, `formation_points_s<N>` seed N's (the baselines' own step suffixes)."""
    found = {}
    for name in os.listdir(results_dir) if os.path.isdir(results_dir) else []:
        match = re.fullmatch(re.escape(POINTS_FOLDER) + r"(?:_s(\d+))?", name)
        folder = os.path.join(results_dir, name)
        if match and os.path.isdir(folder) and formation_rows(folder):
            found[int(match.group(1) or 1)] = folder
    return {f"seed {seed}": found[seed] for seed in sorted(found)}


def plot_formation(runs, path: str, thresholds=(0.9, 0.1, 0.5)) -> None:
    """Four panels against epochs: best positional share per type, syntactic gain, rare share,
    enc-dec confidence with BLEU; each function's threshold dashed. `runs`: one run's rows, or
    {label: rows} (seeds), each run in its own line style."""
    from ..plotting import pyplot

    runs = runs if isinstance(runs, dict) else {"": runs}
    plt = pyplot()
    figure, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    bleu = axes[3].twinx()
    xlabels = set()
    for (label, rows), style in zip(runs.items(), ("-", "--", ":", "-.") * len(runs)):
        x = [r.get("epoch") if r.get("epoch") is not None else r["update"] for r in rows]
        xlabels.add("epoch" if all(r.get("epoch") is not None for r in rows) else "update")
        tag = f" ({label})" if label else ""
        for attention_type in ("enc-self", "dec-self"):  # offsets within one sequence: self-attention only
            axes[0].plot(x, [r.get(f"positional_best_{attention_type}") for r in rows], marker="o", linestyle=style,
                         color="tab:blue" if attention_type == "enc-self" else "tab:orange",
                         label=attention_type + tag)
        axes[1].plot(x, [r.get("syntactic_best_gain") for r in rows], marker="o", linestyle=style,
                     color="tab:green", label=label or None)
        axes[2].plot(x, [r.get("rare_best_share") for r in rows], marker="o", linestyle=style, color="tab:red",
                     label="best head" + tag)
        axes[2].plot(x, [r.get("rare_chance") for r in rows], linestyle=":", color="tab:pink", label="chance" + tag)
        axes[3].plot(x, [r.get("enc_dec_confidence_mean") for r in rows], marker="o", linestyle=style,
                     color="tab:blue", label="enc-dec confidence (mean)" + tag)
        axes[3].plot(x, [r.get("enc_dec_confidence_max") for r in rows], marker=".", linestyle=style,
                     color="tab:purple", label="enc-dec confidence (max)" + tag)
        bleu.plot(x, [r.get("bleu") for r in rows], marker="s", linestyle=style, color="black",
                  label="BLEU (valid sample)" + tag)
    for axis, threshold in zip(axes, thresholds):
        axis.axhline(threshold, linestyle="--", color="grey")
    axes[0].set_title("best positional share")
    axes[1].set_title("best syntactic gain over positional baseline")
    axes[2].set_title("rare-word share")
    bleu.set_ylabel("BLEU")
    axes[3].set_title("encoder-decoder attention and BLEU")
    for axis in axes:
        axis.set_xlabel(" / ".join(sorted(xlabels)))
    axes[0].legend(fontsize=8)
    if len(runs) > 1:
        axes[1].legend(fontsize=8)
    axes[2].legend(fontsize=8)
    # below the panel, on the twin axis (drawn last) and with BLEU's lines: inside it, the legend
    # covered the confidence curves once a second seed doubled its entries
    confidence_handles, confidence_labels = axes[3].get_legend_handles_labels()
    bleu_handles, bleu_labels = bleu.get_legend_handles_labels()
    bleu.legend(confidence_handles + bleu_handles, confidence_labels + bleu_labels, fontsize=7,
                loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
