"""Random access to the sentences of a CoNLL-U file without holding them all in memory.

fairseq batches sentences by length, so gold parses are needed in dataset order but visited in
batch order.  We keep only the byte offset of each sentence (one integer per sentence) and
parse a sentence when it is asked for.  A gzipped file is first decompressed to a temporary
file (seeking in gzip would re-read the file from the start).

`check_conllu` reads a whole file once, up front, so that a malformed line is reported (file and
line) before any model runs rather than when its batch comes.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
import tempfile
from typing import Iterator, List, Tuple

import conllu


CONLLU_FIELDS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
_ID = re.compile(r"[1-9]\d*(?:-[1-9]\d*|\.[1-9]\d*)?")  # word, multiword range, empty node


class ConlluError(ValueError):
    """A malformed CoNLL-U file; the message names the file and line."""


def _sentences(path: str) -> Iterator[List[Tuple[int, str]]]:
    """Each sentence of the file as [(line number, line)], comments included."""
    opener = gzip.open if path.endswith(".gz") else open
    block: List[Tuple[int, str]] = []
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise ConlluError(f"{path}:{number}: not UTF-8") from None
            if line.strip():
                block.append((number, line))
            elif block:
                yield block
                block = []
    if block:
        yield block


def check_conllu(path: str) -> int:
    """Validate every sentence of a CoNLL-U file (plain or .gz); returns the sentence count.

    Each word line needs the 10 tab-separated fields, a numeric ID and a HEAD that is 0 or a
    word of its sentence; the conllu parser (what the statistics read it with) must accept it."""
    if not os.path.isfile(path):
        raise ConlluError(f"--conllu: file not found: {path}")
    count = 0
    for block in _sentences(path):
        words, heads = set(), []
        for number, line in block:
            if line.startswith("#"):
                continue
            fields = line.split("\t")
            if len(fields) != len(CONLLU_FIELDS):
                raise ConlluError(f"{path}:{number}: expected {len(CONLLU_FIELDS)} tab-separated "
                                  f"fields ({' '.join(CONLLU_FIELDS)}), found {len(fields)}")
            token_id, head = fields[0], fields[6]
            if not _ID.fullmatch(token_id):
                raise ConlluError(f"{path}:{number}: ID {token_id!r} is not a number (n, n-m or n.m)")
            if token_id.isdigit():
                words.add(int(token_id))
                if not (head.isdigit() or head == "_"):
                    raise ConlluError(f"{path}:{number}: HEAD {head!r} is not a number")
                if head.isdigit():
                    heads.append((number, int(head)))
        for number, head in heads:
            if head != 0 and head not in words:
                raise ConlluError(f"{path}:{number}: HEAD {head} is not a word of its sentence")
        try:
            parsed = conllu.parse("\n".join(line for _, line in block) + "\n\n")
        except Exception as error:  # conllu's ParseException and friends
            raise ConlluError(f"{path}:{block[0][0]}: sentence not readable: {error}") from None
        if len(parsed) != 1:
            raise ConlluError(f"{path}:{block[0][0]}: not one sentence")
        count += 1
    return count


class ConlluIndex:
    """``index[i]`` is the i-th sentence (a ``conllu.TokenList``) of the file; ``len(index)``
    the number of sentences.  Use as a context manager (or call ``close``)."""

    def __init__(self, path: str):
        self.path = path  # checked by check_conllu, before the run
        self._tmp_path = None
        if path.endswith(".gz"):
            fd, self._tmp_path = tempfile.mkstemp(suffix=".conllu")
            with gzip.open(path, "rb") as source, os.fdopen(fd, "wb") as target:
                shutil.copyfileobj(source, target)
        self._handle = open(self._tmp_path or path, "rb")
        self.offsets = self._sentence_offsets()

    def _sentence_offsets(self) -> List[int]:
        offsets: List[int] = []
        in_sentence = False
        position = self._handle.tell()
        for line in iter(self._handle.readline, b""):
            blank = not line.strip()
            if not blank and not in_sentence:
                offsets.append(position)
            in_sentence = not blank
            position += len(line)
        return offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index: int) -> conllu.TokenList:
        self._handle.seek(self.offsets[index])
        lines = []
        for line in iter(self._handle.readline, b""):
            if not line.strip():
                break
            lines.append(line.decode("utf-8"))
        sentences = conllu.parse("".join(lines) + "\n")
        if len(sentences) != 1:
            raise ValueError(f"{self.path}: sentence {index} could not be parsed")
        return sentences[0]

    def close(self) -> None:
        self._handle.close()
        if self._tmp_path is not None:
            os.unlink(self._tmp_path)
            self._tmp_path = None

    def __enter__(self) -> "ConlluIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
