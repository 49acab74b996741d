"""Writing `fairseq-heads stats` results: heads.csv, heads.json, agreement.json and figures.

Everything is first written to a temporary folder beside DIR, which then replaces DIR as a whole:
a failure leaves DIR as it was (for a new DIR: absent), and a re-run with fewer metrics leaves no
figure of the earlier run behind. So that replacing DIR loses nothing else, DIR must be new,
empty or hold only what `stats` writes (`check_out_dir`, run before the computation).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from typing import Dict, List, Sequence

from .atomic import make_staging_dir, staged_dir

# What a stats folder holds: the tables and the figures (kinds, so that new figures need no list).
OUTPUT_EXTENSIONS = (".csv", ".json", ".png")
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


def check_out_dir(directory: str) -> None:
    """Raise ValueError (one line, naming DIR) unless `stats` may write DIR: absent, empty, or
    an earlier stats folder, which is then replaced as a whole."""
    if not os.path.lexists(directory):
        return
    if not os.path.isdir(directory):
        raise ValueError(f"--out-dir {directory}: exists and is not a folder")
    foreign = sorted(name for name in os.listdir(directory)
                     if not (os.path.splitext(name)[1] in OUTPUT_EXTENSIONS
                             and os.path.isfile(os.path.join(directory, name))))
    if foreign:
        raise ValueError(f"--out-dir {directory}: holds {foreign[0]!r}, which `stats` did not write "
                         f"(the folder is replaced as a whole); choose a new or empty folder")


def move_into(staging: str, directory: str) -> List[str]:
    """Move every file of `staging` into `directory` (created if needed); returns the paths."""
    os.makedirs(directory, exist_ok=True)
    moved = []
    for name in sorted(os.listdir(staging)):
        target = os.path.join(directory, name)
        os.replace(os.path.join(staging, name), target)
        moved.append(target)
    return moved


def write_statistics(statistics, directory: str) -> List[str]:
    """Write the tables, agreement and figures of a HeadStatistics as folder `directory`,
    atomically, replacing an earlier stats folder there as a whole."""
    from .stats_plots import draw_figures

    check_out_dir(directory)
    with staged_dir(directory) as staging:
        with open(os.path.join(staging, TABLE_CSV), "w", encoding="utf-8") as f:
            f.write(table_csv(statistics.rows, statistics.columns))
        with open(os.path.join(staging, TABLE_JSON), "w", encoding="utf-8") as f:
            f.write(table_json(statistics.rows, statistics.columns, statistics.meta))
        with open(os.path.join(staging, AGREEMENT_JSON), "w", encoding="utf-8") as f:
            f.write(json.dumps(_json_value(statistics.agreement), indent=1, allow_nan=False) + "\n")
        draw_figures(statistics.rows, statistics.meta, staging)
        names = sorted(os.listdir(staging))
    return [os.path.join(directory, name) for name in names]


def redraw_figures(directory: str) -> List[str]:
    """`fairseq-heads plot DIR`: the figures again, from DIR/heads.json alone."""
    from .stats_plots import draw_figures

    rows, _, meta = read_table(directory)
    staging = make_staging_dir(directory)
    try:
        draw_figures(rows, meta, staging)
        return move_into(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
