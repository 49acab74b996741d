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
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from fairseq_heads.files import make_staging_dir, replace_dir, write_bytes_atomic, write_text_atomic
from fairseq_heads.data import synthetic_corpus

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
# Files kept next to the text of a split and filtered with it: CoNLL-U (one block per
# sentence) and Pharaoh word alignments (one line per sentence).
SIDE_FILES = ("conllu", "align")
STEPS = ("raw", "clean", "spm_train", "spm_encode", "binarize")


class DataPrepError(ValueError):
    """Bad input or a failed step; the message names the file or option at fault."""


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


# --------------------------------------------------------------------------- small file helpers


def read_lines(path: Path) -> List[str]:
    """Lines of a plain or gzip UTF-8 file (gzip told by magic bytes, not name), split on \\n only.

    Splitting on \\n alone gives `wc -l` semantics: a stray \\r or U+2028 inside a line must not
    split it and desynchronise src from tgt (cleaning turns them into spaces later). Whole files
    are read at once: fine for the corpora this project uses (up to a few 100k lines).
    """
    try:
        data = Path(path).read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        text = data.decode("utf-8-sig")  # -sig: a leading BOM is not part of the first sentence
    except UnicodeDecodeError as e:
        raise DataPrepError(f"{path}: not valid UTF-8 ({e})") from None
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise DataPrepError(f"{path}: cannot read ({e})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def write_lines(path: Path, lines: Sequence[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(line + "\n" for line in lines)


def conllu_blocks(text: str) -> List[str]:
    """Sentence blocks of a CoNLL-U text (each without its trailing blank line)."""
    blocks, current = [], []
    for line in text.split("\n"):
        if line.strip():
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    return blocks


def write_side_file(path: Path, kind: str, items: Sequence[str]) -> None:
    if kind == "conllu":
        text = "".join(block + "\n\n" for block in items)
    else:
        text = "".join(item + "\n" for item in items)
    path.write_text(text, encoding="utf-8", newline="\n")


def read_side_file(path: Path, kind: str) -> List[str]:
    if kind == "conllu":
        return conllu_blocks("\n".join(read_lines(path)))
    return read_lines(path)


def file_signature(path: Path) -> List:
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


class StepFolder:
    """A temp folder in WORK for a step's outputs; `publish` renames it onto the final folder."""

    def __init__(self, work: Path, name: str):
        self.path = Path(make_staging_dir(Path(work) / name))

    def publish(self, final: Path) -> None:
        replace_dir(self.path, final)

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def write_json_atomic(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


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


def spm_train_fingerprint(config: PrepareConfig) -> dict:
    return {"vocab_size": config.vocab_size, "input_sentence_size": config.input_sentence_size,
            "seed": config.seed, "model_type": "bpe"}


def run_spm_train(config: PrepareConfig, paths: WorkPaths) -> None:
    """Step spm: a joint sentencepiece model trained on the clean training text."""
    import sentencepiece as spm

    def sentences():
        for lang in config.langs:
            yield from read_lines(paths.clean / f"train.{lang}")

    # Sentences and model go through Python, not file names: a model trained from files
    # records their paths, so the same data in another work dir would give other bytes.
    spm.set_random_generator_seed(config.seed)  # makes the sentence sampling reproducible
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=model,
            vocab_size=config.vocab_size,
            model_type="bpe",
            character_coverage=1.0,
            input_sentence_size=config.input_sentence_size,
            shuffle_input_sentence=True,
            num_threads=max(1, config.workers),
            pad_id=-1,
            minloglevel=2,  # keep the trainer's progress chatter off stderr
        )
    except RuntimeError as e:
        raise DataPrepError(f"sentencepiece training failed (--vocab-size {config.vocab_size}?): {e}") from None
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = "".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(processor.get_piece_size()))
    write_bytes_atomic(paths.spm_model, model.getvalue())
    write_text_atomic(paths.spm_vocab, vocab)


def run_spm_encode(config: PrepareConfig, paths: WorkPaths) -> None:
    import sentencepiece as spm

    model = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    out = StepFolder(paths.root, "spm")
    try:
        for split in config.splits:
            for lang in config.langs:
                lines = read_lines(paths.clean / f"{split}.{lang}")
                pieces = model.encode(lines, out_type=str) if lines else []
                write_lines(out.path / f"{split}.{lang}", [" ".join(p) for p in pieces])
        out.publish(paths.spm)
    finally:
        out.discard()


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


def read_marker(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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
