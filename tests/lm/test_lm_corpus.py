"""prepare-lm: documents split whole (never by line), the repeated-span setting, re-runs skip."""
import gzip
import json

import pytest

from fairseq_heads.data.lm_corpus import LMCorpusConfig, prepare_lm, repeat_windows
from fairseq_heads.data.prepare import DataPrepError


def book(words: str, paragraphs: int) -> bytes:
    text = "\n\n".join(f"{words} {i} line one\nand line two." for i in range(paragraphs))
    return gzip.compress(text.encode("utf-8"))


def test_books_go_whole_to_one_split_and_a_rerun_skips(tmp_path):
    source = tmp_path / "books"
    source.mkdir()
    for name, words in (("pg84", "frankenstein"), ("pg1661", "holmes"), ("pg1", "alpha"), ("pg2", "beta")):
        (source / f"{name}.txt.gz").write_bytes(book(words, 30))
    config = LMCorpusConfig(work_dir=tmp_path / "work", corpus="gutenberg", source_dir=source, vocab_size=60)
    data_bin = prepare_lm(config)
    report = json.loads((tmp_path / "work" / "text" / "report.json").read_text())
    assert {s: v["documents"] for s, v in report["splits"].items()} == \
        {"train": ["pg1", "pg2"], "valid": ["pg84"], "test": ["pg1661"]}
    valid = (tmp_path / "work" / "text" / "valid.txt").read_text().splitlines()
    # paragraphs are one line each (the book's line breaks joined); the document ends with a break
    assert valid[0] == "frankenstein 0 line one and line two." and valid[-1] == ""
    assert "holmes" not in (tmp_path / "work" / "text" / "train.txt").read_text()
    assert (data_bin / "train.bin").is_file() and (data_bin / "dict.txt").is_file()
    markers = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "work" / ".done").iterdir()}
    prepare_lm(config)
    assert markers == {p.name: p.stat().st_mtime_ns for p in (tmp_path / "work" / ".done").iterdir()}


MANIFEST = "file\tgutenberg_id\tsplit\twords\tauthor\ttitle\tsource_path\n"


def test_gutenberg_large_splits_the_books_as_its_manifest_says(tmp_path):
    source = tmp_path / "books"
    source.mkdir()
    rows = [("pg10", "train", "alpha"), ("pg20", "valid", "beta"), ("pg30", "test", "gamma"), ("pg40", "train", "delta")]
    for name, _, words in rows:
        (source / f"{name}.txt.gz").write_bytes(book(words, 30))
    (source / "manifest.tsv").write_text(MANIFEST + "".join(
        f"{name}.txt.gz\t{name[2:]}\t{split}\t1\tA\tT\tA/T\\r.txt\n" for name, split, _ in rows))
    prepare_lm(LMCorpusConfig(work_dir=tmp_path / "work", corpus="gutenberg_large", source_dir=source, vocab_size=60))
    report = json.loads((tmp_path / "work" / "text" / "report.json").read_text())
    assert {s: v["documents"] for s, v in report["splits"].items()} == \
        {"train": ["pg10", "pg40"], "valid": ["pg20"], "test": ["pg30"]}


def test_a_manifest_naming_a_missing_book_fails_in_one_line_naming_its_line(tmp_path):
    (tmp_path / "manifest.tsv").write_text(MANIFEST + "pg10.txt.gz\t10\ttrain\t1\tA\tT\tA/T.txt\n")
    with pytest.raises(DataPrepError) as error:
        prepare_lm(LMCorpusConfig(work_dir=tmp_path / "work", corpus="gutenberg_large", source_dir=tmp_path))
    assert str(error.value) == f"{tmp_path / 'manifest.tsv'}:2: {tmp_path / 'pg10.txt.gz'} not found"
    assert not (tmp_path / "work" / "text").exists()


def test_repeated_spans_write_windows_twice():
    import random

    words = " ".join(f"w{i}" for i in range(100))
    once = repeat_windows(words, random.Random(0), prob=0.0)
    twice = repeat_windows(words, random.Random(0), prob=1.0)
    assert once == words
    assert len(twice.split()) == 200 and sorted(twice.split()) == sorted(words.split() * 2)


def test_markov_repeats_lines_are_doubled_chain_draws_one_piece_per_symbol(tmp_path):
    config = LMCorpusConfig(work_dir=tmp_path / "work", corpus="markov_repeats",
                            synthetic_sentences=400, random_symbols=12, vocab_size=8000)
    data_bin = prepare_lm(config)
    lines = [x for x in (tmp_path / "work" / "text" / "train.txt").read_text().splitlines() if x]
    assert len(lines) == 400
    successors = {}
    for line in lines:
        half = len(line) // 2
        assert line[:half] == line[half:] and 8 <= half <= 24
        for a, b, c in zip(line[:half], line[1:half], line[2:half]):
            successors.setdefault((a, b), set()).add(c)
    # second order: each pair of symbols is followed by one of its 2 successors, never a third
    assert max(len(s) for s in successors.values()) <= 2
    assert len({c for line in lines for c in line}) == 12
    # a character model: each symbol one piece (a BPE model would merge the frequent pairs)
    pieces = (tmp_path / "work" / "spm" / "train.txt").read_text().splitlines()[0].split()
    assert pieces[0] == "\u2581" and len(pieces) == 1 + len(lines[0])
    symbols = {line.split()[0] for line in open(data_bin / "dict.txt")}
    assert {c for line in lines for c in line} <= symbols
