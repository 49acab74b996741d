"""The text files of the data pipeline (data/prepare.py): reading and writing lines and CoNLL-U
blocks, a step's temp folder and its marker. Shared by the corpus steps and the extra subsets.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import List, Optional, Sequence

from fairseq_heads.files import make_staging_dir, replace_dir, write_text_atomic


class DataPrepError(ValueError):
    """Bad input or a failed step; the message names the file or option at fault."""


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


def read_marker(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
