"""How often each token occurs, for the rare-word statistics: real counts, and where they come from.

In order, the first that exists (docs/metrics.md, "Token frequencies"):

1. `train`: the data-bin's training split, counted token by token through fairseq's indexed
   dataset (an LM's `train`, a translation model's source side `train.SRC-TGT.SRC`, with the
   shards `train1`, `train2`, ... fairseq combines with it);
2. `dictionary`: dict.txt's counts (what fairseq-preprocess and `binarise-hf` write: the training
   text's), unless they are all equal: a dictionary written without text (`import-hf`'s, or one
   of 1s) says nothing of frequency;
3. `scored subset`: the subset the statistics are computed on, counted the same way.

When even the scored subset has every type it holds equally often, no token is rarer than
another and the statistics would label every head: `StatsError`, one line, before the pass.
"""
from __future__ import annotations

import itertools
import os
from typing import List, NamedTuple, Optional

import numpy as np
import torch

from .registry import StatsError

TRAIN, DICTIONARY, SCORED = "train", "dictionary", "scored subset"
_CHUNK = 1 << 24  # tokens counted at a time: bounded memory on a large training split


class TokenCounts(NamedTuple):
    counts: torch.Tensor  # (vocabulary,) float64, by dictionary index
    source: str  # TRAIN, DICTIONARY or SCORED
    files: List[str]  # what was counted

    def describe(self) -> dict:
        """For heads.json meta."""
        return {"source": self.source, "files": self.files, "tokens": int(self.counts.sum())}


def count_indexed_tokens(prefix: str, vocabulary: int) -> Optional[np.ndarray]:
    """Tokens of the fairseq indexed dataset at `prefix` (.bin/.idx), counted by index; None when
    there is none. The mmap format's .bin holds the items' tokens back to back in the dtype its
    index names, so it is counted in chunks without building one tensor per item."""
    from fairseq.data import data_utils, indexed_dataset

    dataset = data_utils.load_indexed_dataset(prefix, None)
    if dataset is None:
        return None
    counts = np.zeros(vocabulary, dtype=np.int64)
    if isinstance(dataset, indexed_dataset.MMapIndexedDataset):
        dtype = indexed_dataset.MMapIndexedDataset.Index(indexed_dataset.index_file_path(prefix)).dtype
        if int(dataset.sizes.sum()) == 0:
            return counts
        tokens = np.memmap(indexed_dataset.data_file_path(prefix), dtype=dtype, mode="r")
        for start in range(0, len(tokens), _CHUNK):
            counts += np.bincount(np.asarray(tokens[start:start + _CHUNK], dtype=np.int64),
                                  minlength=vocabulary)[:vocabulary]
        return counts
    for i in range(len(dataset)):  # other formats: item by item
        counts += np.bincount(dataset[i].numpy().astype(np.int64), minlength=vocabulary)[:vocabulary]
    return counts


def split_prefix(data: str, split: str, source_lang: Optional[str], target_lang: Optional[str]) -> str:
    """The file prefix of `split`'s source side (an LM's one side)."""
    if source_lang is None:
        return os.path.join(data, split)
    for pair in (f"{source_lang}-{target_lang}", f"{target_lang}-{source_lang}"):
        prefix = os.path.join(data, f"{split}.{pair}.{source_lang}")
        if os.path.exists(prefix + ".idx"):
            return prefix
    return os.path.join(data, f"{split}.{source_lang}-{target_lang}.{source_lang}")


def count_split(data: str, split: str, vocabulary: int, source_lang=None, target_lang=None,
                shards: bool = False):
    """(counts, files) of a split's source side (and its shards split1, split2, ... when
    `shards`, as fairseq's `combine` reads them); (None, []) when it is not there."""
    total, files = None, []
    for k in itertools.count():
        prefix = split_prefix(data, split + (str(k) if k > 0 else ""), source_lang, target_lang)
        counts = count_indexed_tokens(prefix, vocabulary)
        if counts is None:
            break
        total = counts if total is None else total + counts
        files.append(prefix + ".bin")
        if not shards:
            break
    return total, files


def ordinary(counts, dictionary) -> np.ndarray:
    """The counts of the dictionary's ordinary types (no specials, no `madeupword` fillers)."""
    keep = [i for i in range(dictionary.nspecial, len(dictionary))
            if not dictionary[i].startswith("madeupword")]
    return np.asarray(counts, dtype=np.float64)[keep]


def degenerate(values: np.ndarray) -> bool:
    """All equal (or none): no type is rarer than another."""
    return values.size == 0 or bool(np.all(values == values[0]))


def resolve_token_counts(dictionary, data: str, subset: str, source_lang: Optional[str] = None,
                         target_lang: Optional[str] = None) -> TokenCounts:
    """The token frequencies of the rare-word statistics (module docstring)."""
    vocabulary = len(dictionary)
    data = data.split(os.pathsep)[0]  # fairseq's data may list several folders: the first's
    counts, files = count_split(data, "train", vocabulary, source_lang, target_lang, shards=True)
    if counts is not None:
        seen = ordinary(counts, dictionary)
        if not degenerate(seen[seen > 0]):
            return TokenCounts(torch.tensor(counts, dtype=torch.float64), TRAIN, files)
    in_dictionary = ordinary(dictionary.count, dictionary)
    if not degenerate(in_dictionary):
        return TokenCounts(torch.tensor(dictionary.count, dtype=torch.float64), DICTIONARY,
                           [os.path.join(data, "dict.txt" if source_lang is None else f"dict.{source_lang}.txt")])
    counts, files = count_split(data, subset, vocabulary, source_lang, target_lang)
    if counts is not None:
        seen = ordinary(counts, dictionary)
        if not degenerate(seen[seen > 0]):
            return TokenCounts(torch.tensor(counts, dtype=torch.float64), SCORED, files)
    count = int(in_dictionary[0]) if in_dictionary.size else 0
    raise StatsError(f"rare: no token frequencies: {data} has no training split to count, its "
                     f"dictionary's counts are all {count} (written without text, e.g. by import-hf) "
                     f"and subset {subset!r} holds every type equally often; binarise the training "
                     f"text into the data-bin (binarise-hf counts it) or leave rare out of --metrics")
