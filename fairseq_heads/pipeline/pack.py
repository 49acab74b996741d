"""The committed subset of a recipe's results folder: what the report reads and what a reader
needs to check it (result files, translations' T-/D- lines, head statistics, curves, gate
traces, training summaries, step times and logs), without checkpoints or data, with absolute
paths of the results folder made relative. `pack` writes it as one .tar.gz (a GPU run packs
after every step, so that a run killed at its time limit still returns what it finished);
`unpack` lays it out as a docs/results folder that `fairseq-heads report` renders again.
"""
import fnmatch
import glob
import gzip
import io
import os
import tarfile
from typing import Iterator, Tuple

from ..files import atomic_path

# (glob under the results folder, how the file is stored): "copy", "gzip" (adds .gz),
# "translations" (fairseq-generate output: its T- and D- lines only, gzipped); "run": the run's
# own files (under runs/RUN/ when packed with a run name)
COMMITTED = (
    ("tables.md", "copy"), ("report.html", "copy"), ("figures/*.png", "copy"),
    ("recipe.json", "run"), ("steps.json", "run"),
    ("results/*/result.json", "copy"), ("results/*/training.json", "copy"), ("results/*/block_losses.json", "copy"),
    ("results/*/generate.txt", "translations"),
    ("stats/*/heads.csv", "copy"), ("stats/*/heads.json", "copy"), ("stats/*/agreement.json", "copy"),
    ("curve/curve.csv", "copy"), ("curves/*/curve.csv", "copy"), ("masks/*/head_mask.json", "copy"),
    ("models/*/gate_trace.jsonl", "gzip"), ("models/*/validations*.jsonl", "gzip"), ("models/*/settings.json", "copy"),
    ("logs/*.log", "run gzip"), ("bench/summary/throughput.json", "copy"), ("bench/decode/decode.json", "copy"),
    ("speed/*/decode_speed.json", "copy"),
    # the formation curve: each kept checkpoint's point and its heads tables (report section 8),
    # `formation_points_s<N>` and `formation_s<N>` for a baseline of seed N
    ("formation_points*/*/point.json", "copy"), ("formation_points*/*/*/heads.csv", "copy"),
    ("formation_points*/*/*/heads.json", "copy"), ("formation/*", "copy"), ("formation_s[0-9]*/*", "copy"),
)


def _translations(data: bytes) -> bytes:
    lines = data.decode("utf-8").splitlines(True)
    return "".join(line for line in lines if line[:2] in ("T-", "D-")).encode("utf-8")


def committed_files(results: str, run: str = "") -> Iterator[Tuple[str, bytes]]:
    """(path in the published folder, contents) of every committed file of `results`. A run's
    own files (its config, step times, logs; "run" above) go under runs/RUN/ when `run` names
    it, so that several runs (seeds) of a recipe unpack into one folder side by side."""
    results = os.path.abspath(results)
    prefix = (results + os.sep).encode("utf-8")
    for pattern, how in COMMITTED:
        for path in sorted(glob.glob(os.path.join(results, pattern))):
            relative = os.path.relpath(path, results)
            if any(part.endswith(".partial") for part in relative.split(os.sep)):
                continue  # a step still running or stopped: not a result
            with open(path, "rb") as f:
                data = f.read()
            if fnmatch.fnmatch(relative, "stats/*/heads.json") or fnmatch.fnmatch(relative, "formation_points*/*/*/heads.json"):
                data = data.replace(b'"' + prefix, b'"')
            elif fnmatch.fnmatch(relative, "logs/*.log"):
                data = data.replace(prefix, b"")  # paths relative to the results folder
            if how.startswith("run") and run:
                relative = os.path.join("runs", run, relative)
            if how == "translations":
                yield relative + ".gz", gzip.compress(_translations(data), mtime=0)
            elif how.endswith("gzip"):
                yield relative + ".gz", gzip.compress(data, mtime=0)
            else:
                yield relative, data


def pack(results: str, archive: str, run: str = "") -> None:
    """Write the committed subset of `results` to the .tar.gz `archive`, atomically."""
    with atomic_path(archive) as tmp:
        with tarfile.open(tmp, "w:gz") as tar:
            for name, data in committed_files(results, run):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))


def unpack(archive: str, docs: str) -> None:
    """Extract a packed results archive into `docs` (its files replace their namesakes)."""
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(docs, filter="data")
