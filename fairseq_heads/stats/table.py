"""The heads table: one row per head, its one schema, and heads.csv / heads.json read and write.

Columns: `type, layer, head`, then `gate_p_open` for a gated model, then each metric's columns
in registry order (registry.py), then `labels`. Every reader of a stats folder (plot, prune,
curve, report) goes through this module, so the file format is decided here only:
- CSV: NaN and None are empty cells, floats have 9 significant digits, labels are joined by
  LABEL_SEPARATOR;
- JSON: {"meta": ..., "columns": [...], "heads": [{column: value}]}, NaN as null, labels a list.
Cells are floats except the key columns, labels and the metrics' `text_columns`.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..numbers import as_float, json_safe
from . import registry

KEY_COLUMNS = ("type", "layer", "head")
GATE_COLUMN = "gate_p_open"
LABELS_COLUMN = "labels"
LABEL_SEPARATOR = ";"
TABLE_CSV = "heads.csv"
TABLE_JSON = "heads.json"
GATE_HEATMAP = registry.Heatmap(GATE_COLUMN, "gate P(open)", (0.0, 1.0))


@dataclass
class HeadTable:
    """Rows (dicts keyed by `columns`; labels a list) and the run's metadata."""

    columns: List[str]
    rows: List[Dict[str, object]]
    meta: Dict[str, object] = field(default_factory=dict)

    def to_csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.columns)
        for row in self.rows:
            writer.writerow([format_csv_cell(row.get(column)) for column in self.columns])
        return buffer.getvalue()

    def to_json(self) -> str:
        document = {"meta": self.meta, "columns": list(self.columns),
                    "heads": [{c: row.get(c) for c in self.columns} for row in self.rows]}
        return json.dumps(json_safe(document), indent=1, allow_nan=False) + "\n"

    def of_type(self, attention_type: str) -> List[Dict[str, object]]:
        return [row for row in self.rows if row["type"] == attention_type]


# ---------------------------------------------------------------- the schema


def table_columns(run, gated: bool) -> List[str]:
    """The columns of a run's table (run.options.metrics, in registry order)."""
    columns = list(KEY_COLUMNS) + ([GATE_COLUMN] if gated else [])
    for spec in registry.metrics(run.options.metrics):
        columns += spec.columns(run)
    return columns + [LABELS_COLUMN]


def build_table(run, outcomes, gates, meta) -> HeadTable:
    """One row per head of run.shape with every metric's cells and labels.

    outcomes: {(metric, type): collect.Outcome}; gates: {type: (L, H) P(open)} or None."""
    specs = registry.metrics(run.options.metrics)
    rows = []
    for attention_type, (num_layers, num_heads) in run.shape.items():
        ran = [(spec, outcomes[(spec.name, attention_type)].result) for spec in specs
               if (spec.name, attention_type) in outcomes]
        labels: Dict[Tuple[int, int], List[str]] = {}
        for spec, result in ran:
            for index, names in spec.labels(result, run).items():
                labels.setdefault(tuple(index), []).extend(names)
        for layer in range(num_layers):
            for head in range(num_heads):
                row: Dict[str, object] = {"type": attention_type, "layer": layer, "head": head}
                if gates is not None:
                    gate = gates.get(attention_type)
                    row[GATE_COLUMN] = as_float(gate[layer, head]) if gate is not None else float("nan")
                for spec, result in ran:
                    row.update(spec.cells(result, (layer, head), run))
                row[LABELS_COLUMN] = labels.get((layer, head), [])
                rows.append(row)
    return HeadTable(table_columns(run, gates is not None), rows, meta)


def metric_meta(run, outcomes) -> Dict[str, object]:
    """Each registered metric's run metadata (registry order); a metric that did not run gives
    its entries' empty values, so a stats folder always has the same keys."""
    meta: Dict[str, object] = {}
    for spec in registry.metrics():
        by_type = ({t: o.result for (name, t), o in outcomes.items() if name == spec.name}
                   if spec.name in run.options.metrics else None)
        meta.update(spec.meta(by_type, run))
    return meta


def text_columns() -> Tuple[str, ...]:
    """Columns whose cells are not floats."""
    return KEY_COLUMNS + (LABELS_COLUMN,) + registry.text_columns()


def heatmaps() -> List[registry.Heatmap]:
    """The heatmaps a table can have: each metric's, then the gates'."""
    return registry.heatmaps() + [GATE_HEATMAP]


# ---------------------------------------------------------------- cells


def format_csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.9g}"
    if isinstance(value, (list, tuple)):
        return LABEL_SEPARATOR.join(str(v) for v in value)
    return str(value)


def parse_number(text) -> float:
    """A numeric CSV cell: '' (or None) -> NaN; ValueError for anything else not a number."""
    if isinstance(text, (int, float)):
        return float(text)
    text = (text or "").strip()
    return float(text) if text else math.nan


def number_or_nan(text) -> float:
    """Like parse_number, but text that is no number is NaN too (for display)."""
    try:
        return parse_number(text)
    except (TypeError, ValueError):
        return math.nan


def parse_labels(text) -> List[str]:
    """A CSV labels cell -> the labels ('' -> [])."""
    return [label.strip() for label in (text or "").split(LABEL_SEPARATOR) if label.strip()]


def label_kind(label: str) -> str:
    """'positional(-1)' -> 'positional', 'syntactic(nsubj,dep->head)' -> 'syntactic'."""
    return label.strip().split("(", 1)[0]


# ---------------------------------------------------------------- reading


def iter_csv(path: str) -> Tuple[List[str], Iterator[Tuple[int, Dict[str, str]]]]:
    """(columns, (line number, row of text cells) ...) of a heads.csv (or any scores CSV with
    type, layer, head columns); the caller checks what it needs."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or [])
        rows = [(line, row) for line, row in enumerate(reader, start=2)]
    return columns, iter(rows)


def read_csv_rows(path: str) -> List[Dict[str, str]]:
    """The rows of a heads.csv as text cells (what report.tables reads)."""
    return [row for _, row in iter_csv(path)[1]]


def read_json(directory: str) -> HeadTable:
    """DIR/heads.json as a HeadTable (null -> NaN in numeric cells)."""
    path = os.path.join(directory, TABLE_JSON)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {TABLE_JSON} in {directory} (run `fairseq-heads stats` first)")
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    keep = set(text_columns())
    rows = [{k: (float("nan") if v is None and k not in keep else v) for k, v in row.items()}
            for row in document["heads"]]
    return HeadTable(document["columns"], rows, document["meta"])


def read_json_document(directory: str) -> Optional[dict]:
    """DIR/heads.json as written (None if absent): for readers that want the raw document."""
    path = os.path.join(directory, TABLE_JSON)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def grid(rows: Sequence[Mapping], attention_type: str, column: str):
    """(layers, heads) list of lists of floats (NaN where empty) of one type's column, or None
    when the table has no such column or no such type."""
    cells = [r for r in rows if r["type"] == attention_type]
    if not cells or column not in cells[0]:
        return None
    layers = max(int(r["layer"]) for r in cells) + 1
    heads = max(int(r["head"]) for r in cells) + 1
    values = [[math.nan] * heads for _ in range(layers)]
    for r in cells:
        value = r.get(column)
        values[int(r["layer"])][int(r["head"])] = math.nan if value is None else float(value)
    return values


def merge_head_statistics(heads: List[Dict[str, str]], more: List[Dict[str, str]]) -> List[Dict[str, str]]:
    """The rows of `heads` with the columns of `more` (the same heads' statistics on another
    set: syntactic heads on a parsed one) that they lack, and both sets' labels."""
    by_head = {(row["type"], row["layer"], row["head"]): row for row in more}
    merged = []
    for row in heads:
        extra = by_head.get((row["type"], row["layer"], row["head"]), {})
        combined = {**{k: v for k, v in extra.items() if k != "labels"}, **row}
        labels = [text for text in (row.get("labels", ""), extra.get("labels", "")) if text]
        combined["labels"] = ";".join(labels)
        merged.append(combined)
    return merged
