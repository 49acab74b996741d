"""A translation model's vocabularies as fairseq dictionaries (dict.SRC.txt, dict.TGT.txt).

fairseq's `Dictionary.load` starts with <s>=0, <pad>=1, </s>=2, <unk>=3, then one entry per line.
The HF ids the config names as bos, pad and eos (and the tokenizer's <unk>) become those four
indices, whatever their strings (Marian's </s> is id 0 and its <pad> the last id); every other
HF id is one dict.txt line, in HF id order. FSMT's and M2M100's vocabularies are fairseq's
dictionaries already: their map is the identity. A fairseq symbol with no HF id (Marian has no
<s>) gets zero rows and is blocked from the output (`--blocked-output-symbols`).

Read without `transformers`: Marian's vocab.json (one vocabulary), FSMT's vocab-src.json and
vocab-tgt.json, M2M100's tokenizer.json (NLLB) or vocab.json; model rows the files do not name
(M2M100's language tokens after vocab.json) get placeholder entries `<hf_id_N>`.
"""
import json
import os
from typing import Dict, List, Optional, Tuple

from .hf_config import HFImportError
from .translation_config import TranslationShape
from .vocabulary import FAIRSEQ_SYMBOLS, VocabularyMap, read_tokenizer_vocabulary, writable

FAIRSEQ_STRINGS = ("<s>", "<pad>", "</s>", "<unk>")
BOS, PAD, EOS, UNK = range(4)


def read_vocab_json(path: str, rows: int) -> List[Optional[str]]:
    """{string: id} of `path` as strings by id, padded with None to `rows`."""
    try:
        with open(path, encoding="utf-8") as f:
            by_string = json.load(f)
        ids = {str(word): int(i) for word, i in by_string.items()}
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, TypeError, ValueError) as error:
        raise HFImportError(f"{path}: not a {{token: id}} JSON file ({error})") from None
    strings: List[Optional[str]] = [None] * rows
    for word, hf_id in ids.items():
        if not 0 <= hf_id < rows:
            raise HFImportError(f"{path}: token {word!r} has id {hf_id}, beyond the model's {rows} "
                                f"embedding rows")
        if strings[hf_id] is not None:
            raise HFImportError(f"{path}: two strings for id {hf_id}")
        strings[hf_id] = word
    return strings


def _strings(model_dir: str, names: Tuple[str, ...], rows: int) -> List[Optional[str]]:
    for name in names:
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            if name == "tokenizer.json":
                return read_tokenizer_vocabulary(model_dir, rows).strings
            return read_vocab_json(path, rows)
    raise HFImportError(f"{model_dir}: no {' or '.join(names)}")


def read_translation_vocabularies(model_dir: str, shape: TranslationShape
                                  ) -> Tuple[List[Optional[str]], List[Optional[str]]]:
    """(source strings, target strings) by HF id; the same list when the vocabulary is shared."""
    if shape.model_type == "fsmt":
        return (_strings(model_dir, ("vocab-src.json",), shape.source_vocab_size),
                _strings(model_dir, ("vocab-tgt.json",), shape.target_vocab_size))
    names = ("tokenizer.json", "vocab.json") if shape.model_type == "m2m_100" else ("vocab.json",)
    strings = _strings(model_dir, names, shape.source_vocab_size)
    return strings, strings


def special_ids(strings: List[Optional[str]], shape: TranslationShape) -> Dict[int, Optional[int]]:
    """fairseq index -> the HF id that plays its part (None: HF has none)."""
    unk = strings.index("<unk>") if "<unk>" in strings else None
    specials = {BOS: shape.bos_id, PAD: shape.pad_id, EOS: shape.eos_id, UNK: unk}
    taken = [i for i in specials.values() if i is not None]
    if len(set(taken)) < len(taken) or any(not 0 <= i < len(strings) for i in taken):
        raise HFImportError(f"special token ids {specials} (bos, pad, eos, unk) are not distinct "
                            f"ids of the {len(strings)}-row vocabulary")
    return specials


def translation_vocabulary_map(strings: List[Optional[str]],
                               specials: Dict[int, Optional[int]]) -> VocabularyMap:
    """The dictionary of one HF vocabulary and the maps between them (module docstring)."""
    hf_to_fairseq: List[Optional[int]] = [None] * len(strings)
    for index, hf_id in specials.items():
        if hf_id is not None:
            hf_to_fairseq[hf_id] = index
    entries: List[str] = []
    used = set(s for s in strings if s is not None) | set(FAIRSEQ_STRINGS)
    seen = set(FAIRSEQ_STRINGS)
    for hf_id, word in enumerate(strings):
        if hf_to_fairseq[hf_id] is not None:
            continue
        if word is None or not writable(word) or word in seen:
            word = f"<hf_id_{hf_id}>"
            while word in used:  # a real string of that form: make ours unique
                word = "<" + word + ">"
            used.add(word)
        seen.add(word)
        hf_to_fairseq[hf_id] = FAIRSEQ_SYMBOLS + len(entries)
        entries.append(word)
    row_source: List[Optional[int]] = [None] * (FAIRSEQ_SYMBOLS + len(entries))
    for hf_id, index in enumerate(hf_to_fairseq):
        row_source[index] = hf_id
    blocked = [index for index, hf_id in specials.items() if hf_id is None]
    return VocabularyMap(entries, [False] * len(entries), hf_to_fairseq, row_source, sorted(blocked))
