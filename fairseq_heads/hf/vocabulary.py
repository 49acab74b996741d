"""An HF tokenizer's vocabulary as a fairseq dictionary (dict.txt), and the map between them.

fairseq's `Dictionary.load` always starts with its own four symbols, <s>=0, <pad>=1, </s>=2,
<unk>=3, then one entry per line of dict.txt. Every HF vocabulary string gets an entry:

- an HF string equal to one of fairseq's <s>, </s>, <unk> is that symbol (LLaMA's three
  specials are exactly these strings);
- every other string is a new line, in HF id order, so HF id i is fairseq index
  `hf_to_fairseq[i]`. A string dict.txt cannot hold (empty, a line break, trailing white space:
  `Dictionary.load` strips lines) and a model row with no tokenizer string (embedding matrices
  padded past the tokenizer) are written as `<hf_id_N>`; "<pad>" gets fairseq's overwrite flag
  (an entry of its own; fairseq's padding index stays 1).

fairseq's data ends every line with its </s> (index 2), which the model must predict. When the HF
end-of-sequence string is another one (Qwen2's <|endoftext|>), index 2 takes that token's rows
and its place in the map, and the string's own entry is blocked (log-prob -inf): one symbol,
one share of the probability. fairseq's <pad>, and <s> / <unk> where HF has no such string, are
blocked too. So the softmax runs over exactly HF's vocabulary: for every HF id i,
log p_fairseq(hf_to_fairseq[i]) = log p_HF(i).
"""
import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from .hf_config import HFImportError

FAIRSEQ_SPECIALS = {"<s>": 0, "</s>": 2, "<unk>": 3}
PAD, EOS, FAIRSEQ_SYMBOLS = 1, 2, 4
OVERWRITE_FLAG = "#fairseq:overwrite"


class VocabularyMap(NamedTuple):
    entries: List[str]  # dict.txt words, in order: fairseq index 4 + n
    overwrite: List[bool]  # per entry: needs fairseq's overwrite flag
    hf_to_fairseq: List[int]  # fairseq index of each HF id
    row_source: List[Optional[int]]  # per fairseq index: the HF row its weights come from
    blocked: List[int]  # fairseq indices never predicted

    @property
    def size(self) -> int:
        return FAIRSEQ_SYMBOLS + len(self.entries)


def writable(word: str) -> bool:
    """Can `word` be one dict.txt entry that `Dictionary.load` reads back unchanged?"""
    return bool(word) and "\n" not in word and "\r" not in word and word == word.rstrip() \
        and not word.endswith(OVERWRITE_FLAG)


def vocabulary_map(strings: List[Optional[str]], eos_id: Optional[int], bos_id: Optional[int],
                   unk_id: Optional[int]) -> VocabularyMap:
    """The dictionary of HF vocabulary `strings` (index = HF id; None: a row without a string)
    and the maps (module docstring)."""
    entries, overwrite, hf_to_fairseq = [], [], []
    taken = set(FAIRSEQ_SPECIALS) | {"<pad>"}
    placeholders = [f"<hf_id_{i}>" for i in range(len(strings))]
    used = set(s for s in strings if s is not None) | set(FAIRSEQ_SPECIALS)
    for i, word in enumerate(strings):
        if word in FAIRSEQ_SPECIALS:
            hf_to_fairseq.append(FAIRSEQ_SPECIALS[word])
            continue
        if word is None or not writable(word) or (word in taken and word != "<pad>"):
            word = placeholders[i]
            while word in used:  # a real string of that form: make ours unique
                word = "<" + word + ">"
            used.add(word)
        hf_to_fairseq.append(FAIRSEQ_SYMBOLS + len(entries))
        entries.append(word)
        overwrite.append(word == "<pad>")
        taken.add(word)
    size = FAIRSEQ_SYMBOLS + len(entries)
    row_source: List[Optional[int]] = [None] * size
    for hf_id, index in enumerate(hf_to_fairseq):
        row_source[index] = hf_id
    blocked = [PAD]
    if eos_id is not None and hf_to_fairseq[eos_id] != EOS:
        blocked.append(hf_to_fairseq[eos_id])  # the eos string's own entry: an alias of index 2
        hf_to_fairseq[eos_id] = EOS
        row_source[EOS] = eos_id
    for symbol, hf_id in ((0, bos_id), (3, unk_id), (EOS, eos_id)):
        if row_source[symbol] is None:  # no such HF string: an input alias, never predicted
            blocked.append(symbol)
            row_source[symbol] = hf_id  # (None: zero rows)
    return VocabularyMap(entries, overwrite, hf_to_fairseq, row_source, sorted(set(blocked)))


def dictionary_text(vocab: VocabularyMap, counts: Optional[Sequence[int]] = None) -> str:
    """dict.txt: one `word count` line per entry. `counts` (by fairseq index, e.g. the training
    text's tokens, `binarise-hf`) or, where there is no text (`import-hf`), 0: no count is
    known, and fairseq's `Dictionary.load` keeps the file's order whatever the counts."""
    return "".join(f"{w} {int(counts[FAIRSEQ_SYMBOLS + i]) if counts is not None else 0}"
                   f"{' ' + OVERWRITE_FLAG if o else ''}\n"
                   for i, (w, o) in enumerate(zip(vocab.entries, vocab.overwrite)))


def tokenizer_adds_bos(model_dir: str, bos_token_id: Optional[int], vocab: VocabularyMap) -> bool:
    """Was the model trained with <s> at each document start? Where config.json names a BOS
    token that fairseq's <s> (index 0) reads, unless tokenizer_config.json says its tokenizer
    adds none (`add_bos_token` false, or `bos_token` null: Qwen2); LLaMA's and Mistral's add it."""
    if bos_token_id is None or vocab.row_source[0] != bos_token_id:
        return False
    path = os.path.join(model_dir, "tokenizer_config.json")
    if not os.path.isfile(path):
        return True
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise HFImportError(f"{path}: not JSON ({error})") from None
    if not isinstance(config, dict):
        raise HFImportError(f"{path}: not a JSON object")
    if "add_bos_token" in config:
        return bool(config["add_bos_token"])
    return not ("bos_token" in config and config["bos_token"] is None)


class TokenizerVocabulary(NamedTuple):
    strings: List[Optional[str]]  # by HF id, padded with None to the model's rows
    unk_id: Optional[int]
    source: str


def _tokenizer_json_vocabulary(path: str) -> Tuple[Dict[str, int], Optional[int]]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        model = data["model"]
        vocab = model["vocab"]
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            by_string = {piece: i for i, (piece, _) in enumerate(vocab)}
        else:
            by_string = {str(k): int(v) for k, v in vocab.items()}
        for token in data.get("added_tokens") or []:
            by_string[token["content"]] = int(token["id"])
        unk = model.get("unk_token")
        if unk is None and isinstance(model.get("unk_id"), int):
            unk_id = model["unk_id"]
        else:
            unk_id = by_string.get(unk) if unk is not None else None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as error:
        raise HFImportError(f"{path}: not a tokenizers JSON file ({type(error).__name__}: {error})") from None
    return by_string, unk_id


def read_tokenizer_vocabulary(model_dir: str, rows: int) -> TokenizerVocabulary:
    """The HF strings of ids 0 .. rows-1, from tokenizer.json (preferred) or tokenizer.model."""
    json_path = os.path.join(model_dir, "tokenizer.json")
    spm_path = os.path.join(model_dir, "tokenizer.model")
    if os.path.isfile(json_path):
        by_string, unk_id = _tokenizer_json_vocabulary(json_path)
        source = json_path
    elif os.path.isfile(spm_path):
        import sentencepiece

        try:
            processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
        except (RuntimeError, OSError) as error:
            raise HFImportError(f"{spm_path}: not a sentencepiece model ({error})") from None
        by_string = {processor.id_to_piece(i): i for i in range(processor.get_piece_size())}
        unk_id = processor.unk_id() if processor.unk_id() >= 0 else None
        source = spm_path
    else:
        raise HFImportError(f"{model_dir}: no tokenizer.json or tokenizer.model")
    strings: List[Optional[str]] = [None] * rows
    for word, hf_id in by_string.items():
        if hf_id >= rows or hf_id < 0:
            raise HFImportError(f"{source}: token {word!r} has id {hf_id}, beyond the model's "
                                f"{rows} embedding rows (vocab_size)")
        if strings[hf_id] is not None:
            raise HFImportError(f"{source}: two strings for id {hf_id}")
        strings[hf_id] = word
    return TokenizerVocabulary(strings, unk_id, source)
