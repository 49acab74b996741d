"""Step binarize of the data pipeline (data/prepare.py): fairseq-preprocess with a joined
dictionary, the parses and alignments copied beside the binarised splits."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

from .prepare_config import SIDE_FILES, PrepareConfig, WorkPaths
from .text_files import DataPrepError, StepFolder

logger = logging.getLogger("fairseq_heads.data.prepare")  # the pipeline's one logger


def fairseq_preprocess_command(explicit: Optional[str] = None) -> List[str]:
    """How to call fairseq-preprocess: the given one, the one next to this python, PATH, or -m."""
    if explicit:
        return [explicit]
    beside_python = Path(sys.executable).parent / "fairseq-preprocess"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return [str(beside_python)]
    on_path = shutil.which("fairseq-preprocess")
    if on_path:
        return [on_path]
    return [sys.executable, "-m", "fairseq_cli.preprocess"]


def binarize_fingerprint(config: PrepareConfig) -> dict:
    return {"joined_dictionary": True}


def run_binarize(config: PrepareConfig, paths: WorkPaths) -> None:
    """Step binarize: fairseq-preprocess with a joined dictionary (+ parses copied beside)."""
    out = StepFolder(paths.root, "bin")
    try:
        command = fairseq_preprocess_command(config.fairseq_preprocess) + [
            "--source-lang", config.src_lang, "--target-lang", config.tgt_lang,
            "--destdir", str(out.path), "--joined-dictionary", "--workers", str(max(1, config.workers)),
        ]
        for split in config.splits:
            command += [f"--{split}pref", str(paths.spm / split)]
        logger.info("binarize: %s", " ".join(command))
        try:
            proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except OSError as e:
            raise DataPrepError(f"binarize: cannot run {command[0]}: {e}") from None
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.splitlines()[-20:])
            raise DataPrepError(f"binarize: {command[0]} exited with {proc.returncode}:\n{tail}")
        for split in config.splits:
            for kind in SIDE_FILES:
                side = paths.clean / f"{split}.{kind}"
                if side.exists():
                    shutil.copy2(side, out.path / f"{split}.{kind}")
        out.publish(paths.bin)
    finally:
        out.discard()
