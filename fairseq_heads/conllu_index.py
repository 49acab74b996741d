"""Random access to the sentences of a CoNLL-U file without holding them all in memory.

fairseq batches sentences by length, so gold parses are needed in dataset order but visited in
batch order.  We keep only the byte offset of each sentence (one integer per sentence) and
parse a sentence when it is asked for.  A gzipped file is first decompressed to a temporary
file (seeking in gzip would re-read the file from the start).
"""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from typing import List

import conllu


class ConlluIndex:
    """``index[i]`` is the i-th sentence (a ``conllu.TokenList``) of the file; ``len(index)``
    the number of sentences.  Use as a context manager (or call ``close``)."""

    def __init__(self, path: str):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"CoNLL-U file not found: {path}")
        self.path = path
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
