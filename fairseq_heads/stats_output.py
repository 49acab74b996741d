"""Writing `fairseq-heads stats` results: heads.csv, heads.json, agreement.json and figures.

Everything is first written to a temporary folder beside DIR and moved into DIR only once all
files exist, so a failure leaves DIR as it was (for a new DIR: absent or empty).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from typing import Dict, List, Sequence

TABLE_CSV = "heads.csv"
TABLE_JSON = "heads.json"
AGREEMENT_JSON = "agreement.json"


def _json_value(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


def _csv_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.9g}"
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) for v in value)
    return str(value)


def table_csv(rows: Sequence[Dict[str, object]], columns: Sequence[str]) -> str:
    """CSV text: one row per head; NaN/None as empty cells, labels joined by ';'."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(row.get(column)) for column in columns])
    return buffer.getvalue()


def table_json(rows, columns, meta) -> str:
    document = {"meta": meta, "columns": list(columns),
                "heads": [{c: row.get(c) for c in columns} for row in rows]}
    return json.dumps(_json_value(document), indent=1, allow_nan=False) + "\n"


def read_table(directory: str):
    """(rows, columns, meta) from DIR/heads.json (None -> NaN for numeric cells)."""
    path = os.path.join(directory, TABLE_JSON)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no {TABLE_JSON} in {directory} (run `fairseq-heads stats` first)")
    with open(path, encoding="utf-8") as f:
        document = json.load(f)
    rows = [{k: (float("nan") if v is None and k not in ("labels", "positional_offset",
                                                          "syntactic_best") else v)
             for k, v in row.items()} for row in document["heads"]]
    return rows, document["columns"], document["meta"]


def move_into(staging: str, directory: str) -> List[str]:
    """Move every file of `staging` into `directory` (created if needed); returns the paths."""
    os.makedirs(directory, exist_ok=True)
    moved = []
    for name in sorted(os.listdir(staging)):
        target = os.path.join(directory, name)
        os.replace(os.path.join(staging, name), target)
        moved.append(target)
    return moved


def staging_folder(directory: str) -> str:
    """A temporary folder on DIR's file system (so the final moves are renames)."""
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(dir=parent, prefix=f".{os.path.basename(os.path.abspath(directory))}.tmp-")


def write_statistics(statistics, directory: str) -> List[str]:
    """Write the tables, agreement and figures of a HeadStatistics into `directory`, atomically."""
    from .stats_plots import draw_figures

    staging = staging_folder(directory)
    try:
        with open(os.path.join(staging, TABLE_CSV), "w", encoding="utf-8") as f:
            f.write(table_csv(statistics.rows, statistics.columns))
        with open(os.path.join(staging, TABLE_JSON), "w", encoding="utf-8") as f:
            f.write(table_json(statistics.rows, statistics.columns, statistics.meta))
        with open(os.path.join(staging, AGREEMENT_JSON), "w", encoding="utf-8") as f:
            f.write(json.dumps(_json_value(statistics.agreement), indent=1, allow_nan=False) + "\n")
        draw_figures(statistics.rows, statistics.meta, staging)
        return move_into(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def redraw_figures(directory: str) -> List[str]:
    """`fairseq-heads plot DIR`: the figures again, from DIR/heads.json alone."""
    from .stats_plots import draw_figures

    rows, _, meta = read_table(directory)
    staging = staging_folder(directory)
    try:
        draw_figures(rows, meta, staging)
        return move_into(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
