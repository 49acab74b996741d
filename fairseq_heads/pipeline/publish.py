"""A results folder's committed subset (pack.py's) written into a docs folder: the library of
`fairseq-heads publish RESULTS DOCS [--merge]` (commands/publish.py).

Without --merge, DOCS is replaced by the subset (the results must have their report). With
--merge, DOCS keeps what it holds (its README, earlier sessions' results) and the session's
files are added or replace their namesakes; no report files are copied (render them on the
merged folder: `fairseq-heads report DOCS`). That is for a study spread over sessions whose
results folders may not outlive them.

The traces of an L0 phase still running (`models/<m>_l0.partial/`) are published too, and the
report draws them as such; the finished phase replaces them in a later merge and keeps out
those of a re-run (a session whose results folder was lost trains the phase again).
"""
import glob
import gzip
import os
import shutil
from typing import Iterator, Tuple

from ..errors import CommandError
from .pack import committed_files

REPORT_FILES = ("tables.md", "report.html")
RUNNING_TRACES = ("models/*_l0.partial/gate_trace.jsonl", "models/*_l0.partial/validations*.jsonl")


def run_name(results: str) -> str:
    """runs/<this>/ for the run's own files: from its recipe.json (the config with its `--set`s, so
    that `train.seed=2` names `_s2`), "" without one."""
    from .recipe_json import packed_run_name, read_recipe_json, recorded_config

    try:
        recipe, scale, _, config = recorded_config(read_recipe_json(results))
    except (ValueError, KeyError):
        return ""
    return packed_run_name(recipe, scale, config)


def running_traces(results: str) -> Iterator[Tuple[str, bytes]]:
    for pattern in RUNNING_TRACES:
        for path in sorted(glob.glob(os.path.join(results, pattern))):
            with open(path, "rb") as f:
                yield os.path.relpath(path, results) + ".gz", gzip.compress(f.read(), mtime=0)


def publish(results: str, docs: str, merge: bool = False) -> None:
    """Write the committed subset of `results` into `docs` (see the module docstring)."""
    if not os.path.isdir(results):
        raise CommandError(f"publish: {results} is not a folder")
    if not merge and not os.path.isfile(os.path.join(results, "tables.md")):
        raise CommandError(f"publish: {os.path.join(results, 'tables.md')} missing (run the report first, or --merge)")
    docs = os.path.abspath(docs)
    partial = docs + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    if merge and os.path.isdir(docs):
        shutil.copytree(docs, partial, symlinks=True)
    else:
        os.makedirs(partial)
    for name, data in [*committed_files(results, run_name(results)), *running_traces(results)]:
        if merge and (name in REPORT_FILES or name.startswith("figures/")):
            continue
        path = os.path.join(partial, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    # a finished L0 phase, of this session or an earlier one, drops its running copy
    for finished in glob.glob(os.path.join(partial, "models", "*_l0")):
        shutil.rmtree(finished + ".partial", ignore_errors=True)
    shutil.rmtree(docs, ignore_errors=True)
    os.replace(partial, docs)
