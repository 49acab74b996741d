"""One data pipeline for every corpus: parallel text -> clean -> sentencepiece -> fairseq data-bin.

Layout of the work directory (WORK):

    raw/{split}.{lang}        inputs, decompressed and concatenated (+ {split}.conllu/.align if any)
    clean/{split}.{lang}      normalised text; train also filtered (clean/report.json says what went)
    spm.model, spm.vocab      joint BPE model trained on clean train src+tgt
    spm/{split}.{lang}        pieces joined by spaces
    bin/                      fairseq-preprocess output (+ {split}.conllu/.align copied from clean/)
    .done/{step}.json         written last by each step; holds the step's settings

Each step is skipped when its marker exists and records the same settings; a step that runs
invalidates every later one. Outputs are built in a temp folder and renamed into place, so a
failed step leaves neither a marker nor half-written outputs.

Run it as `python -m fairseq_heads.data.prepare ...` or `fairseq-heads prepare ...`.

The steps live by job: cleaning.py (clean), subwords.py (spm_train, spm_encode), binarising.py
(binarize); the config and work layout in prepare_config.py, the file helpers in text_files.py.
This module checks the config, copies the inputs (raw) and runs the steps in order; its names
(PrepareConfig, prepare, DataPrepError, read_lines, ...) are the package's entry points.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fairseq_heads.data import synthetic_corpus

from .binarising import binarize_fingerprint, fairseq_preprocess_command, run_binarize  # noqa: F401
from .cleaning import clean_fingerprint, drop_reason, filter_pairs, normalise, run_clean  # noqa: F401
from .prepare_config import SIDE_FILES, SPLITS, STEPS, FilePair, PrepareConfig, PrepareResult, WorkPaths  # noqa: F401
from .subwords import run_spm_encode, run_spm_train, spm_train_fingerprint  # noqa: F401
from .text_files import (  # noqa: F401
    DataPrepError,
    StepFolder,
    conllu_blocks,
    file_signature,
    read_lines,
    read_marker,
    read_side_file,
    write_json_atomic,
    write_lines,
    write_side_file,
)

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- validation


def validate_config(config: PrepareConfig) -> None:
    """Check options and inputs before anything is written (so bad input leaves nothing behind)."""
    for option, lang in (("--src", config.src_lang), ("--tgt", config.tgt_lang)):
        if not lang or any(c in lang for c in "./\\ ,-"):
            raise DataPrepError(f"{option}: bad language code {lang!r} (no '.', '/', '-', ',' or spaces)")
    if config.src_lang == config.tgt_lang:
        raise DataPrepError(f"--src and --tgt must differ (both {config.src_lang!r})")
    if config.vocab_size < 10:
        raise DataPrepError(f"--vocab-size: {config.vocab_size} is too small")
    if config.synthetic:
        if config.inputs:
            raise DataPrepError("--synthetic cannot be combined with --train/--valid/--test")
        if config.synthetic_sizes.get("train", 0) <= 0:
            raise DataPrepError("--n-train: the synthetic corpus needs at least one training sentence")
        return
    if not config.inputs.get("train"):
        raise DataPrepError("--train SRC,TGT is required (or --synthetic)")
    for split, pairs in config.inputs.items():
        if split not in SPLITS:
            raise DataPrepError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
        for pair in pairs:
            counts = {}
            for path in (pair.src, pair.tgt):
                if not Path(path).is_file():
                    raise DataPrepError(f"--{split}: file not found: {path}")
                counts[path] = len(read_lines(Path(path)))
            if counts[pair.src] != counts[pair.tgt]:
                raise DataPrepError(
                    f"--{split}: line counts differ: {pair.src} has {counts[pair.src]} lines, "
                    f"{pair.tgt} has {counts[pair.tgt]}"
                )
    for split, path in config.conllu.items():
        option = f"--{split}-conllu"
        if split not in config.inputs:
            raise DataPrepError(f"{option} given but no --{split} text")
        if not Path(path).is_file():
            raise DataPrepError(f"{option}: file not found: {path}")
        n_blocks = len(read_side_file(Path(path), "conllu"))
        n_lines = sum(len(read_lines(Path(p.src))) for p in config.inputs[split])
        if n_blocks != n_lines:
            raise DataPrepError(f"{option}: {path} has {n_blocks} sentences, the {split} source text {n_lines} lines")


# --------------------------------------------------------------------------- steps


def raw_fingerprint(config: PrepareConfig) -> dict:
    if config.synthetic:
        source = {"synthetic": dict(config.synthetic_sizes), "seed": config.seed}
    else:
        source = {
            "inputs": {s: [[file_signature(Path(p.src)), file_signature(Path(p.tgt))] for p in ps] for s, ps in config.inputs.items()},
            "conllu": {s: file_signature(Path(p)) for s, p in config.conllu.items()},
        }
    return {"langs": list(config.langs), **source}


def run_raw(config: PrepareConfig, paths: WorkPaths) -> None:
    """Step raw: the input files (or the toy corpus) copied into WORK/raw."""
    out = StepFolder(paths.root, "raw")
    try:
        if config.synthetic:
            sizes = {s: config.synthetic_sizes.get(s, 0) for s in SPLITS}
            synthetic_corpus.generate_corpus(
                out.path, sizes["train"], sizes["valid"], sizes["test"], seed=config.seed,
                src_lang=config.src_lang, tgt_lang=config.tgt_lang,
            )
            for split in SPLITS:  # drop the empty splits the generator still wrote
                if sizes[split] <= 0:
                    for f in out.path.glob(f"{split}.*"):
                        f.unlink()
        else:
            for split in config.splits:
                for side, lang in (("src", config.src_lang), ("tgt", config.tgt_lang)):
                    lines = [line for pair in config.inputs[split] for line in read_lines(Path(getattr(pair, side)))]
                    write_lines(out.path / f"{split}.{lang}", lines)
            for split, path in config.conllu.items():
                write_side_file(out.path / f"{split}.conllu", "conllu", read_side_file(Path(path), "conllu"))
        out.publish(paths.raw)
    finally:
        out.discard()


@dataclass(frozen=True)
class Step:
    name: str
    fingerprint: Callable[[PrepareConfig], dict]
    run: Callable[[PrepareConfig, WorkPaths], object]


PIPELINE = (
    Step("raw", raw_fingerprint, run_raw),
    Step("clean", clean_fingerprint, run_clean),
    Step("spm_train", spm_train_fingerprint, run_spm_train),
    Step("spm_encode", lambda config: {}, run_spm_encode),
    Step("binarize", binarize_fingerprint, run_binarize),
)


# --------------------------------------------------------------------------- driver


def prepare(config: PrepareConfig) -> PrepareResult:
    """Run the pipeline in `config.work_dir`, skipping the steps already done with the same settings."""
    validate_config(config)
    paths = WorkPaths(Path(config.work_dir))
    paths.root.mkdir(parents=True, exist_ok=True)
    run, skipped = [], []
    for index, step in enumerate(PIPELINE):
        marker = paths.marker(step.name)
        fingerprint = step.fingerprint(config)
        if not run and read_marker(marker) == fingerprint:
            logger.info("step %s: done already, skipped", step.name)
            skipped.append(step.name)
            continue
        if not run:  # first step to run: everything after it is stale from now on
            for later in PIPELINE[index:]:
                paths.marker(later.name).unlink(missing_ok=True)
        logger.info("step %s: running", step.name)
        step.run(config, paths)
        write_json_atomic(marker, fingerprint)  # last: only a finished step looks done
        run.append(step.name)

    report = read_marker(paths.clean / "report.json") or {}
    return PrepareResult(
        work_dir=paths.root,
        data_bin=paths.bin,
        spm_model=paths.spm_model,
        raw_dir=paths.raw,
        clean_dir=paths.clean,
        spm_dir=paths.spm,
        src_lang=config.src_lang,
        tgt_lang=config.tgt_lang,
        splits=config.splits,
        conllu={s: paths.bin / f"{s}.conllu" for s in config.splits if (paths.bin / f"{s}.conllu").exists()},
        clean_report=report,
        steps_run=run,
        steps_skipped=skipped,
        config=config,
    )
