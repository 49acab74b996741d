"""Monolingual text -> sentencepiece -> fairseq language-model data-bin (`--task language_modeling`).

Layout of the work directory (WORK):

    text/{split}.txt          one paragraph per line, documents separated by an empty line
    text/report.json          which document went to which split, and the counts
    spm.model, spm.vocab      BPE model trained on text/train.txt
    spm/{split}.txt           pieces joined by spaces (empty lines kept: fairseq's document breaks)
    bin/                      fairseq-preprocess --only-source output (dict.txt, {split}.bin/.idx)
    .done/{step}.json         written last by each step; holds the step's settings

Splits are by *document* (a book, an article), never by line, so no paragraph of a test book is
seen in training. Corpora:

- `gutenberg`: the nine novels of ../shared/data/gutenberg_en. valid = Frankenstein (pg84),
  test = The Adventures of Sherlock Holmes (pg1661), train = the other seven.
- `gutenberg_large`: the 163 books of ../shared/data/gutenberg_en_large (12.6M words), split by
  book as its `manifest.tsv` says (154 train, 5 valid, 4 test).
- `wikitext2`: ../shared/data/wikitext2 (WikiText-2 validation + test only), split into articles
  at their ` = Title = ` headings; article k goes to valid if k % 10 == 8, test if k % 10 == 9,
  else train.
- `synthetic`: sentences of the built-in toy grammar (tests, SCALE=toy recipes).
- `random_repeats`: lines of 8-24 symbols drawn uniformly from 100 (both settable), each line
  written twice: only in-context copying lowers the loss on the copy.
- `markov_repeats`: the same, but each line is drawn from a random second-order Markov chain over
  the symbols (every pair of symbols has 2 equally likely successors), so a previous-token head
  pays off on its own; induction heads are built on one (Olsson et al. 2022, Sec. 3), and on this
  corpus a 2-layer LM grows them within ~1,000 updates, where on `random_repeats` it stays on
  the loss plateau (the induction-head test corpus).

The symbol corpora use a character-level sentencepiece model (one piece per symbol whatever
`vocab_size` is), so frequent symbol pairs are never merged into one piece.

`repeat_spans` (the labelled *repeated-span* setting, never the default): train paragraphs are cut
into windows of 12-40 words and each window is written twice in a row with probability
`repeat_prob`. valid/test stay natural text, so perplexities are comparable across settings.
"""

from __future__ import annotations

import json
import logging
import random
import re
import subprocess
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_heads.files import write_bytes_atomic, write_text_atomic
from fairseq_heads.data.binarising import fairseq_preprocess_command
from fairseq_heads.data.text_files import (
    DataPrepError,
    StepFolder,
    read_lines,
    read_marker,
    write_json_atomic,
    write_lines,
)

logger = logging.getLogger(__name__)

LM_SPLITS = ("train", "valid", "test")
CORPORA = ("gutenberg", "gutenberg_large", "wikitext2", "synthetic", "random_repeats", "markov_repeats")
SOURCE_CORPORA = ("gutenberg", "gutenberg_large", "wikitext2")  # read from --source-dir
SYMBOL_CORPORA = ("random_repeats", "markov_repeats")
GUTENBERG_VALID = ("pg84",)
GUTENBERG_TEST = ("pg1661",)
_WIKI_TITLE = re.compile(r"^ = [^=].* = $")


@dataclass
class LMCorpusConfig:
    work_dir: Path
    corpus: str = "gutenberg"
    source_dir: Optional[Path] = None  # folder of the corpus files (gutenberg / wikitext2)
    vocab_size: int = 8000
    repeat_spans: bool = False
    repeat_prob: float = 0.5
    synthetic_sentences: int = 4000  # train lines of the synthetic and symbol corpora
    random_symbols: int = 100  # alphabet of the symbol corpora
    random_line_length: Tuple[int, int] = (8, 24)  # symbols per line of a symbol corpus (before doubling)
    seed: int = 1
    workers: int = 1
    fairseq_preprocess: Optional[str] = None


Document = Tuple[str, List[str]]  # (name, paragraphs)


def normalise(text: str) -> str:
    """NFKC, every run of whitespace to one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def paragraphs_of(lines: Sequence[str]) -> List[str]:
    """Blank-line separated paragraphs, each joined into one normalised line."""
    paragraphs, current = [], []
    for line in list(lines) + [""]:
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append(normalise(" ".join(current)))
            current = []
    return [p for p in paragraphs if p]


def gutenberg_documents(source: Path) -> Dict[str, List[Document]]:
    books = sorted(source.glob("pg*.txt*"))
    if not books:
        raise DataPrepError(f"{source}: no pg*.txt[.gz] books found (--source-dir)")
    splits: Dict[str, List[Document]] = {s: [] for s in LM_SPLITS}
    for path in books:
        name = path.name.split(".")[0]
        split = "valid" if name in GUTENBERG_VALID else "test" if name in GUTENBERG_TEST else "train"
        splits[split].append((name, paragraphs_of(read_lines(path))))
    for split in ("valid", "test"):
        if not splits[split]:
            raise DataPrepError(f"{source}: the {split} book ({(GUTENBERG_VALID if split == 'valid' else GUTENBERG_TEST)[0]}) is missing")
    return splits


def manifest_documents(source: Path) -> Dict[str, List[Document]]:
    """The books of `source`, each in the split its manifest.tsv names (columns file, split)."""
    import csv

    manifest = source / "manifest.tsv"
    if not manifest.is_file():
        raise DataPrepError(f"{source}: no manifest.tsv (--source-dir of gutenberg_large)")
    with open(manifest, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    splits: Dict[str, List[Document]] = {s: [] for s in LM_SPLITS}
    for line, row in enumerate(rows, start=2):
        if row.get("split") not in splits or not row.get("file"):
            raise DataPrepError(f"{manifest}:{line}: expected a file and a split in {', '.join(LM_SPLITS)}")
        path = source / row["file"]
        if not path.is_file():
            raise DataPrepError(f"{manifest}:{line}: {path} not found")
        splits[row["split"]].append((row["file"].split(".")[0], paragraphs_of(read_lines(path))))
    empty = [split for split, documents in splits.items() if not documents]
    if empty:
        raise DataPrepError(f"{manifest}: no book in split {empty[0]}")
    return splits


def wikitext_documents(source: Path) -> Dict[str, List[Document]]:
    """WikiText-2's articles (valid + test files; a ` = Title = ` line starts each) as documents,
    every 10th to valid and the next to test."""
    files = [source / name for name in ("valid.txt.gz", "test.txt.gz")]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise DataPrepError(f"{missing[0]}: missing (--source-dir should hold WikiText-2 valid.txt.gz, test.txt.gz)")
    articles: List[Document] = []
    for path in files:
        for line in read_lines(path):
            if _WIKI_TITLE.match(line):
                articles.append((normalise(line.strip(" =")), []))
            elif line.strip() and articles:
                articles[-1][1].append(normalise(line))
    splits: Dict[str, List[Document]] = {s: [] for s in LM_SPLITS}
    for k, article in enumerate(articles):
        splits["valid" if k % 10 == 8 else "test" if k % 10 == 9 else "train"].append(article)
    return splits


def synthetic_documents(n_sentences: int, seed: int) -> Dict[str, List[Document]]:
    from fairseq_heads.data import synthetic_corpus

    sizes = {"train": n_sentences, "valid": max(50, n_sentences // 20), "test": max(50, n_sentences // 20)}
    _, corpus = synthetic_corpus.generate_splits(sizes, seed=seed)
    splits: Dict[str, List[Document]] = {}
    for split in LM_SPLITS:
        sentences = [pair.source_text for pair in corpus[split]]
        # ten sentences a paragraph, a hundred a document: gives the LM a context to use
        docs = [sentences[i:i + 100] for i in range(0, len(sentences), 100)]
        splits[split] = [(f"{split}{k}", [" ".join(d[j:j + 10]) for j in range(0, len(d), 10)])
                         for k, d in enumerate(docs)]
    return splits


def _symbols(n_symbols: int) -> List[str]:
    # CJK characters written without spaces: the character-level sentencepiece model keeps each
    # one a single piece, so a line of k symbols is k tokens.
    return [chr(0x4E00 + i) for i in range(n_symbols)]


def _doubled_line_documents(draw_line, n_lines: int, rng: random.Random,
                            line_length: Tuple[int, int]) -> Dict[str, List[Document]]:
    """Lines from `draw_line(length)`, each written twice in a row, 50 lines a document."""
    sizes = {"train": n_lines, "valid": max(20, n_lines // 20), "test": max(20, n_lines // 20)}
    splits: Dict[str, List[Document]] = {}
    for split, size in sizes.items():
        lines = []
        for _ in range(size):
            line = "".join(draw_line(rng.randint(*line_length)))
            lines.append(line + line)
        splits[split] = [(f"{split}{k}", lines[k:k + 50]) for k in range(0, size, 50)]
    return splits


def random_repeat_documents(n_lines: int, seed: int, n_symbols: int = 100,
                            line_length: Tuple[int, int] = (8, 24)) -> Dict[str, List[Document]]:
    """Lines of uniform random symbols, each written twice in a row, 50 lines a document."""
    rng = random.Random(seed)
    symbols = _symbols(n_symbols)
    return _doubled_line_documents(lambda n: [rng.choice(symbols) for _ in range(n)],
                                   n_lines, rng, line_length)


def second_order_markov_chain(n_symbols: int, successors: int, rng: random.Random
                              ) -> Dict[Tuple[int, int], List[int]]:
    """A random chain: each pair (previous, current) of symbol ids -> `successors` next ids."""
    return {(a, b): [rng.randrange(n_symbols) for _ in range(successors)]
            for a in range(n_symbols) for b in range(n_symbols)}


def markov_line(chain: Dict[Tuple[int, int], List[int]], n_symbols: int, length: int,
                rng: random.Random) -> List[int]:
    """`length` symbol ids: two uniform ones, then each drawn from the chain given the last two."""
    ids = [rng.randrange(n_symbols), rng.randrange(n_symbols)][:length]
    while len(ids) < length:
        ids.append(rng.choice(chain[(ids[-2], ids[-1])]))
    return ids


def markov_repeat_documents(n_lines: int, seed: int, n_symbols: int = 100,
                            line_length: Tuple[int, int] = (8, 24), successors: int = 2
                            ) -> Dict[str, List[Document]]:
    """Lines of a random second-order Markov chain, each written twice, 50 lines a document."""
    rng = random.Random(seed)
    symbols = _symbols(n_symbols)
    chain = second_order_markov_chain(n_symbols, successors, rng)
    return _doubled_line_documents(
        lambda n: [symbols[i] for i in markov_line(chain, n_symbols, n, rng)], n_lines, rng, line_length)


def repeat_windows(paragraph: str, rng: random.Random, prob: float) -> str:
    """Cut into windows of 12-40 words; write each twice in a row with probability `prob`."""
    words, out, i = paragraph.split(), [], 0
    while i < len(words):
        window = words[i:i + rng.randint(12, 40)]
        i += len(window)
        out.extend(window * 2 if rng.random() < prob else window)
    return " ".join(out)


def build_text(config: LMCorpusConfig, out: Path) -> dict:
    """Write each split's documents as text (a blank line between documents: fairseq's break;
    spans repeated in train with --repeat-spans); returns the report written beside it."""
    if config.corpus == "gutenberg":
        splits = gutenberg_documents(Path(config.source_dir))
    elif config.corpus == "gutenberg_large":
        splits = manifest_documents(Path(config.source_dir))
    elif config.corpus == "wikitext2":
        splits = wikitext_documents(Path(config.source_dir))
    elif config.corpus == "random_repeats":
        splits = random_repeat_documents(config.synthetic_sentences, config.seed,
                                         config.random_symbols, tuple(config.random_line_length))
    elif config.corpus == "markov_repeats":
        splits = markov_repeat_documents(config.synthetic_sentences, config.seed,
                                         config.random_symbols, tuple(config.random_line_length))
    else:
        splits = synthetic_documents(config.synthetic_sentences, config.seed)
    rng = random.Random(config.seed)
    report = {"corpus": config.corpus, "repeat_spans": config.repeat_spans, "splits": {}}
    for split, documents in splits.items():
        lines: List[str] = []
        for name, paragraphs in documents:
            if config.repeat_spans and split == "train":
                paragraphs = [repeat_windows(p, rng, config.repeat_prob) for p in paragraphs]
            lines.extend(paragraphs)
            lines.append("")  # fairseq's document break
        write_lines(out / f"{split}.txt", lines)
        report["splits"][split] = {"documents": [name for name, _ in documents],
                                   "paragraphs": sum(len(p) for _, p in documents),
                                   "words": sum(len(x.split()) for _, p in documents for x in p)}
    write_text_atomic(out / "report.json", json.dumps(report, indent=1) + "\n")
    return report


def train_spm(config: LMCorpusConfig, text: Path, model_path: Path, vocab_path: Path) -> None:
    """Train the BPE sentencepiece model on the training text; write it and its vocabulary."""
    import io

    import sentencepiece as spm

    spm.set_random_generator_seed(config.seed)
    model = io.BytesIO()
    lines = [line for line in read_lines(text / "train.txt") if line]
    model_type = "char" if config.corpus in SYMBOL_CORPORA else "bpe"  # symbols: never merged
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=config.vocab_size,
            model_type=model_type, character_coverage=1.0, input_sentence_size=1_000_000,
            shuffle_input_sentence=True, num_threads=max(1, config.workers), pad_id=-1,
            max_sentence_length=1 << 16, minloglevel=2)
    except RuntimeError as e:
        raise DataPrepError(f"sentencepiece training failed (--vocab-size {config.vocab_size}?): {e}") from None
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    write_bytes_atomic(model_path, model.getvalue())
    write_text_atomic(vocab_path, "".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n"
                                          for i in range(processor.get_piece_size())))


def encode_spm(model_path: Path, text: Path, out: Path) -> None:
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=str(model_path))
    for split in LM_SPLITS:
        lines = read_lines(text / f"{split}.txt")
        write_lines(out / f"{split}.txt", [" ".join(processor.encode(line, out_type=str)) if line else ""
                                           for line in lines])


def binarize(config: LMCorpusConfig, pieces: Path, out: Path) -> None:
    command = fairseq_preprocess_command(config.fairseq_preprocess) + [
        "--only-source", "--destdir", str(out), "--workers", str(max(1, config.workers))]
    for split in LM_SPLITS:
        command += [f"--{split}pref", str(pieces / f"{split}.txt")]
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-20:])
        raise DataPrepError(f"binarize: {command[0]} exited with {proc.returncode}:\n{tail}")


def validate(config: LMCorpusConfig) -> None:
    if config.corpus not in CORPORA:
        raise DataPrepError(f"--corpus: unknown corpus {config.corpus!r}; choose {', '.join(CORPORA)}")
    if config.corpus in SOURCE_CORPORA:
        if config.source_dir is None or not Path(config.source_dir).is_dir():
            raise DataPrepError(f"--source-dir: {config.source_dir} is not a folder (the {config.corpus} files)")
    if not 0.0 <= config.repeat_prob <= 1.0:
        raise DataPrepError(f"--repeat-prob: {config.repeat_prob} is not in [0, 1]")


def prepare_lm(config: LMCorpusConfig, text_only: bool = False) -> Path:
    """Run the three steps in WORK, skipping those done with the same settings; returns WORK/bin
    (text_only: only the text step, for another tokenizer, e.g. `prepare-lm --tokenizer`;
    returns WORK/text)."""
    validate(config)
    root = Path(config.work_dir)
    root.mkdir(parents=True, exist_ok=True)
    settings = asdict(config)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in settings.items() if k not in ("work_dir", "workers")}
    settings = json.loads(json.dumps(settings))  # as the marker reads back (tuples become lists)
    steps = (
        ("text", root / "text", lambda tmp: build_text(config, tmp)),
        ("spm", root / "spm", None),
        ("binarize", root / "bin", lambda tmp: binarize(config, root / "spm", tmp)),
    )
    if text_only:
        steps = steps[:1]
    stale = False
    for name, final, run in steps:
        marker = root / ".done" / f"{name}.json"
        if not stale and read_marker(marker) == settings and final.exists():
            logger.info("step %s: done already, skipped", name)
            continue
        stale = True
        marker.unlink(missing_ok=True)
        folder = StepFolder(root, name)
        try:
            if name == "spm":
                train_spm(config, root / "text", root / "spm.model", root / "spm.vocab")
                encode_spm(root / "spm.model", root / "text", folder.path)
            else:
                run(folder.path)
            folder.publish(final)
        finally:
            folder.discard()
        write_json_atomic(marker, settings)
    return root / ("text" if text_only else "bin")
