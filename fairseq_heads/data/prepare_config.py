"""What the data pipeline (data/prepare.py) is told and what it gives back: its config, the
layout of its work directory, its result."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

SPLITS = ("train", "valid", "test")
# Files kept next to the text of a split and filtered with it: CoNLL-U (one block per
# sentence) and Pharaoh word alignments (one line per sentence).
SIDE_FILES = ("conllu", "align")
STEPS = ("raw", "clean", "spm_train", "spm_encode", "binarize")


@dataclass(frozen=True)
class FilePair:
    src: Path
    tgt: Path


@dataclass
class PrepareConfig:
    """Everything the pipeline needs. Either `synthetic` or `inputs` (with a train split)."""

    work_dir: Path
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    # split -> file pairs, concatenated in order (e.g. several newstest years as one train set)
    inputs: Mapping[str, Sequence[FilePair]] = field(default_factory=dict)
    # split -> CoNLL-U of the source side (one sentence per source line)
    conllu: Mapping[str, Path] = field(default_factory=dict)
    synthetic: bool = False
    synthetic_sizes: Mapping[str, int] = field(default_factory=lambda: {"train": 10000, "valid": 500, "test": 500})
    seed: int = 1
    vocab_size: int = 8000
    max_len: int = 250  # whitespace tokens, per side (train only)
    max_ratio: float = 3.0  # longer/shorter side in whitespace tokens (train only)
    dedup: bool = True
    input_sentence_size: int = 1_000_000  # sentencepiece sample cap
    workers: int = 1
    fairseq_preprocess: Optional[str] = None  # executable; default: next to python, then PATH

    @property
    def splits(self) -> List[str]:
        if self.synthetic:
            return [s for s in SPLITS if self.synthetic_sizes.get(s, 0) > 0]
        return [s for s in SPLITS if self.inputs.get(s)]

    @property
    def langs(self) -> Tuple[str, str]:
        return (self.src_lang, self.tgt_lang)


@dataclass(frozen=True)
class WorkPaths:
    root: Path

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def clean(self) -> Path:
        return self.root / "clean"

    @property
    def spm(self) -> Path:
        return self.root / "spm"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def spm_model(self) -> Path:
        return self.root / "spm.model"

    @property
    def spm_vocab(self) -> Path:
        return self.root / "spm.vocab"

    def marker(self, step: str) -> Path:
        return self.root / ".done" / f"{step}.json"


@dataclass
class PrepareResult:
    work_dir: Path
    data_bin: Path
    spm_model: Path
    raw_dir: Path
    clean_dir: Path
    spm_dir: Path
    src_lang: str
    tgt_lang: str
    splits: List[str]
    conllu: Dict[str, Path]  # split -> bin/{split}.conllu, where a parse exists
    clean_report: Dict[str, Dict[str, int]]
    steps_run: List[str]
    steps_skipped: List[str]
    config: PrepareConfig
