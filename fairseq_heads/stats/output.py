"""Writing a stats folder: heads.csv, heads.json, agreement.json and the figures.

Everything is first written to a temporary folder beside DIR, which then replaces DIR as a whole:
a failure leaves DIR as it was (for a new DIR: absent), and a re-run with fewer metrics leaves no
figure of the earlier run behind. So that replacing DIR loses nothing else, DIR must be new,
empty or hold only what `stats` writes (`check_out_dir`, run before the computation).
"""
from __future__ import annotations

import json
import os
from typing import List

from ..files import staged_dir, write_files_into
from ..numbers import json_safe
from .table import TABLE_CSV, TABLE_JSON, read_json

# What a stats folder holds: the tables and the figures (kinds, so that new figures need no list).
OUTPUT_EXTENSIONS = (".csv", ".json", ".png")
AGREEMENT_JSON = "agreement.json"


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


def write_statistics(statistics, directory: str) -> List[str]:
    """Write the tables, agreement and figures of a HeadStatistics as folder `directory`,
    atomically, replacing an earlier stats folder there as a whole."""
    from .figures import draw_figures

    check_out_dir(directory)  # again: replacing DIR would delete what appeared there during the run
    with staged_dir(directory) as staging:
        with open(os.path.join(staging, TABLE_CSV), "w", encoding="utf-8") as f:
            f.write(statistics.table.to_csv())
        with open(os.path.join(staging, TABLE_JSON), "w", encoding="utf-8") as f:
            f.write(statistics.table.to_json())
        with open(os.path.join(staging, AGREEMENT_JSON), "w", encoding="utf-8") as f:
            f.write(json.dumps(json_safe(statistics.agreement), indent=1, allow_nan=False) + "\n")
        draw_figures(statistics.rows, statistics.meta, staging)
        names = sorted(os.listdir(staging))
    return [os.path.join(directory, name) for name in names]


def redraw_figures(directory: str) -> List[str]:
    """`fairseq-heads plot DIR`: the figures again, from DIR/heads.json alone."""
    from .figures import draw_figures

    table = read_json(directory)
    return write_files_into(directory, lambda staging: draw_figures(table.rows, table.meta, staging))
