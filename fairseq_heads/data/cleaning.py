"""Step clean of the data pipeline (data/prepare.py): normalise every line, and drop the
training pairs that are empty, too long, of too unequal lengths or repeated."""
from __future__ import annotations

import json
import logging
import shutil
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

from .prepare_config import SIDE_FILES, PrepareConfig, WorkPaths
from .text_files import DataPrepError, StepFolder, read_lines, read_side_file, write_lines, write_side_file

logger = logging.getLogger("fairseq_heads.data.prepare")  # the pipeline's one logger


def normalise(line: str) -> str:
    """NFKC, every kind of whitespace (tabs, no-break spaces, ...) to one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", line).split())


def drop_reason(src: str, tgt: str, max_len: int, max_ratio: float) -> Optional[str]:
    """Why a training pair is dropped (None: keep). Lengths are whitespace tokens."""
    n_src, n_tgt = len(src.split()), len(tgt.split())
    if n_src == 0 or n_tgt == 0:
        return "empty"
    if n_src > max_len or n_tgt > max_len:
        return "too_long"
    if max(n_src, n_tgt) / min(n_src, n_tgt) > max_ratio:
        return "length_ratio"
    return None


def filter_pairs(
    pairs: Sequence[Tuple[str, str]], max_len: int, max_ratio: float, dedup: bool
) -> Tuple[List[int], Dict[str, int]]:
    """Indices of the training pairs to keep, and counts of what was dropped and why."""
    kept: List[int] = []
    counts = {"input": len(pairs), "empty": 0, "too_long": 0, "length_ratio": 0, "duplicate": 0}
    seen = set()
    for index, (src, tgt) in enumerate(pairs):
        reason = drop_reason(src, tgt, max_len, max_ratio)
        if reason is None and dedup:
            if (src, tgt) in seen:
                reason = "duplicate"
            seen.add((src, tgt))
        if reason is None:
            kept.append(index)
        else:
            counts[reason] += 1
    counts["kept"] = len(kept)
    return kept, counts


def clean_fingerprint(config: PrepareConfig) -> dict:
    return {"max_len": config.max_len, "max_ratio": config.max_ratio, "dedup": config.dedup}


def run_clean(config: PrepareConfig, paths: WorkPaths) -> Dict[str, Dict[str, int]]:
    """Step clean: normalise, filter and deduplicate the pairs; counts per reason."""
    out = StepFolder(paths.root, "clean")
    report: Dict[str, Dict[str, int]] = {}
    try:
        for split in config.splits:
            src = [normalise(line) for line in read_lines(paths.raw / f"{split}.{config.src_lang}")]
            tgt = [normalise(line) for line in read_lines(paths.raw / f"{split}.{config.tgt_lang}")]
            if split == "train":
                kept, counts = filter_pairs(list(zip(src, tgt)), config.max_len, config.max_ratio, config.dedup)
            else:  # valid/test are references: normalised, never dropped
                kept, counts = list(range(len(src))), {"input": len(src), "kept": len(src)}
            report[split] = counts
            write_lines(out.path / f"{split}.{config.src_lang}", [src[i] for i in kept])
            write_lines(out.path / f"{split}.{config.tgt_lang}", [tgt[i] for i in kept])
            for kind in SIDE_FILES:
                side_path = paths.raw / f"{split}.{kind}"
                if side_path.exists():
                    items = read_side_file(side_path, kind)
                    if len(items) != len(src):
                        raise DataPrepError(f"{side_path}: {len(items)} entries for {len(src)} sentences")
                    write_side_file(out.path / f"{split}.{kind}", kind, [items[i] for i in kept])
            dropped = {k: v for k, v in counts.items() if k not in ("input", "kept") and v}
            logger.info("clean %s: kept %d of %d pairs%s", split, counts["kept"], counts["input"],
                        f", dropped {dropped}" if dropped else "")
        if report["train"]["kept"] == 0:
            raise DataPrepError("clean: no training pair survived cleaning (check --max-len/--max-ratio)")
        for f in ("lexicon.tsv",):  # synthetic corpus metadata travels with the text
            if (paths.raw / f).exists():
                shutil.copy2(paths.raw / f, out.path / f)
        (out.path / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        out.publish(paths.clean)
    finally:
        out.discard()
    return report
