"""Parallel text -> a fairseq translation data-bin with a Hugging Face translation model's own
tokenizer, for the checkpoint `import-hf` makes from the same directory (docs/hf_translation.md,
"Data"): dict.SRC.txt and dict.TGT.txt in the importer's order (the same `VocabularyMap`s), each
HF id mapped to its dictionary index, and {split}.SRC-TGT.{SRC,TGT}.bin/.idx, fairseq's
translation layout.

Each side is encoded as HF encodes it for the model, special tokens included, so fairseq's
teacher forcing reads what HF's does: the source as HF's `input_ids`, the target as HF's `labels`
(its prev_output_tokens, eos + labels[:-1], are HF's decoder_input_ids: the decoder start is the
model's, `--decoder-start-token`). Both end with the model's eos, fairseq's </s>.

- Marian (OPUS-MT), read here without `transformers`: source.spm / target.spm pieces, each
  looked up in vocab.json (<unk> when absent), a leading `>>xx<<` target-language code of a
  multilingual model kept as one token (MarianTokenizer's `remove_language_code`), then </s>.
- FSMT, M2M100 and NLLB through `transformers`' own tokenizer of the directory (FSMT's Moses
  and BPE also need `sacremoses`); M2M100 / NLLB with `src_lang` / `tgt_lang` = the language
  names, so the source starts with the source-language token and the target with the target's
  (generation then forces that first token: `fairseq-generate --prefix-size 1`).

dict.SRC.txt / dict.TGT.txt count the tokens of each side of the train split (of every split
written when there is none), eos included: what rare-word statistics rank tokens by.

`conllu` (SPLIT -> gold parses of the source side) is copied beside the split as
{split}.conllu[.gz] after a check that `stats --conllu` will align every sentence: the source
pieces, as dictionary strings, must spell the parsed text character by character
(stats/syntax/alignment.py; <unk> pieces are filled from the text). Sentencepiece tokenizers
(Marian, M2M100, NLLB) do, as long as no language token precedes the source; FSMT's Moses
escapes and `</w>` markers and any source language token do not, and are refused here in one
line rather than in the middle of a statistics run.
"""
import os
import shutil
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import torch

from ..data.text_files import DataPrepError, read_lines
from ..files import write_files_into, write_text_atomic
from ..stats.syntax.alignment import align_subwords_to_words, fill_unknown_pieces, parse_conllu
from .hf_config import HFImportError
from .import_translation import language_pair, read_vocabulary_maps
from .translation_config import TranslationShape, read_translation_config
from .translation_vocabulary import EOS, FAIRSEQ_STRINGS, PAD, UNK
from .vocabulary import VocabularyMap, dictionary_text

SPLITS = ("train", "valid", "test")
Encode = Callable[[str], List[int]]


class PairEncoder(NamedTuple):
    source: Encode  # line -> HF ids, special tokens included
    target: Encode
    tokenizer: str  # what encodes, for messages


def split_language_code(line: str) -> Tuple[List[str], str]:
    """MarianTokenizer.remove_language_code: a leading `>>xx<<` is a token of its own."""
    if line.startswith(">>"):
        end = line.find("<<")
        if end != -1:
            return [line[: end + 2]], line[end + 2:]
    return [], line


def marian_encoder(model_dir: str, shape: TranslationShape) -> PairEncoder:
    """MarianTokenizer's encoding, read from source.spm, target.spm and vocab.json."""
    import json

    import sentencepiece

    paths = {name: os.path.join(model_dir, name) for name in ("source.spm", "target.spm", "vocab.json")}
    for path in paths.values():
        if not os.path.isfile(path):
            raise HFImportError(f"{model_dir}: no {os.path.basename(path)} (MarianTokenizer's files)")
    with open(paths["vocab.json"], encoding="utf-8") as f:
        vocab = {str(k): int(v) for k, v in json.load(f).items()}
    if "<unk>" not in vocab:
        raise HFImportError(f"{paths['vocab.json']}: no <unk>")
    unk = vocab["<unk>"]

    def encoder(spm_path: str) -> Encode:
        try:
            processor = sentencepiece.SentencePieceProcessor(model_file=spm_path)
        except (RuntimeError, OSError) as error:
            raise HFImportError(f"{spm_path}: not a sentencepiece model ({error})") from None

        def encode(line: str) -> List[int]:
            code, text = split_language_code(line)
            return [vocab.get(p, unk) for p in code + processor.encode(text, out_type=str)] + [shape.eos_id]
        return encode

    return PairEncoder(encoder(paths["source.spm"]), encoder(paths["target.spm"]), "MarianTokenizer (sentencepiece)")


def transformers_encoder(model_dir: str, shape: TranslationShape, langs: Tuple[str, str]) -> PairEncoder:
    """The directory's own tokenizer, through transformers (FSMT, M2M100, NLLB)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise HFImportError(f"{model_dir}: binarising {shape.architecture} text needs its tokenizer from "
                            f"`transformers` (pip install transformers)") from None
    options = {} if shape.model_type == "fsmt" else {"src_lang": langs[0], "tgt_lang": langs[1]}
    try:  # (transformers raises many kinds here, a missing package, file or setting among them)
        tokenizer = AutoTokenizer.from_pretrained(model_dir, **options)
    except Exception as error:  # noqa: BLE001 - reported in one line, whatever it is
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise HFImportError(f"{model_dir}: its tokenizer does not load ({message})") from None
    if not callable(tokenizer):  # what AutoTokenizer returns for an M2M100 folder without its spm file
        raise HFImportError(f"{model_dir}: its tokenizer does not load (no tokenizer files for "
                            f"{shape.architecture})")
    return PairEncoder(lambda line: list(tokenizer(line)["input_ids"]),
                       lambda line: list(tokenizer(text_target=line)["input_ids"]),
                       type(tokenizer).__name__)


def pair_encoder(model_dir: str, shape: TranslationShape, langs: Tuple[str, str]) -> PairEncoder:
    return marian_encoder(model_dir, shape) if shape.marian else transformers_encoder(model_dir, shape, langs)


def fairseq_indices(ids: List[int], vocab: VocabularyMap, where: str) -> List[int]:
    """HF ids -> dictionary indices; the line must end with eos (fairseq's targets do)."""
    rows = len(vocab.hf_to_fairseq)
    bad = [i for i in ids if not 0 <= i < rows]
    if bad:
        raise HFImportError(f"{where}: the tokenizer gives id {bad[0]}, beyond the model's {rows} rows")
    indices = [vocab.hf_to_fairseq[i] for i in ids]
    if not indices or indices[-1] != EOS:
        raise HFImportError(f"{where}: the tokenizer's encoding does not end with the model's eos")
    return indices


def source_pieces(indices: List[int], dictionary_words: List[str]) -> List[str]:
    """What `stats --conllu` reads of a source sentence: its dictionary strings, less eos / pad."""
    return [dictionary_words[i] for i in indices if i not in (EOS, PAD)]


def check_parses_align(conllu_path: str, sources: List[List[int]], vocab: VocabularyMap, split: str,
                       tokenizer: str) -> None:
    """Every parse of `conllu_path` aligns with its binarised source sentence (module docstring)."""
    try:
        parses = parse_conllu("\n".join(read_lines(conllu_path)) + "\n")
    except DataPrepError as error:
        raise HFImportError(f"--conllu {split}={conllu_path}: {error}") from None
    if len(parses) != len(sources):
        raise HFImportError(f"--conllu {split}={conllu_path}: {len(parses)} sentences, but split {split} has "
                            f"{len(sources)} lines; they must match line by line")
    words = list(FAIRSEQ_STRINGS) + list(vocab.entries)  # fairseq's Dictionary, index by index
    for i, (parse, indices) in enumerate(zip(parses, sources)):
        pieces = source_pieces(indices, words)
        try:
            if words[UNK] in pieces:
                pieces = fill_unknown_pieces(pieces, parse, words[UNK])
            align_subwords_to_words(pieces, parse, sentence_index=i)
        except ValueError as error:
            raise HFImportError(f"--conllu {split}={conllu_path}: sentence {i + 1}: {tokenizer}'s source pieces do "
                                f"not spell the parsed text, so syntactic heads cannot align them ({error})") from None


class TranslationBinariseResult(NamedTuple):
    langs: Tuple[str, str]
    lines: Dict[str, int]
    tokens: Dict[str, Tuple[int, int]]  # (source, target) tokens per split, eos included
    counted: List[str]  # the splits whose tokens are the dictionaries' counts
    unknown: Dict[str, Tuple[int, int]]  # (source, target) <unk> tokens per split
    tokenizer: str
    files: List[str]


def encode_split(paths: Tuple[str, str], split: str, encoder: PairEncoder, source: VocabularyMap,
                 target: VocabularyMap) -> Tuple[List[List[int]], List[List[int]]]:
    sides = []
    for path in paths:
        try:
            sides.append(read_lines(path))
        except DataPrepError as error:
            raise HFImportError(f"--{split} {path}: {error}") from None
    if len(sides[0]) != len(sides[1]):
        raise HFImportError(f"--{split}: {paths[0]} has {len(sides[0])} lines, {paths[1]} has {len(sides[1])}")
    if not sides[0]:
        raise HFImportError(f"--{split}: {paths[0]} is empty")
    encoded = []
    for path, lines, encode, vocab in zip(paths, sides, (encoder.source, encoder.target), (source, target)):
        encoded.append([fairseq_indices(encode(line), vocab, f"{path} line {n + 1}") for n, line in enumerate(lines)])
    return encoded[0], encoded[1]


def binarise_parallel(model_dir: str, splits: Dict[str, Tuple[str, str]], out_dir: str,
                      source_lang: Optional[str] = None, target_lang: Optional[str] = None,
                      conllu: Optional[Dict[str, str]] = None) -> TranslationBinariseResult:
    """{split: (source file, target file)} -> `out_dir` (module docstring): everything is encoded
    and checked first, then written together or not at all."""
    from fairseq.data import indexed_dataset

    conllu = conllu or {}
    unknown_splits = sorted(set(splits) - set(SPLITS)) or sorted(set(conllu) - set(splits))
    if unknown_splits:
        raise HFImportError(f"split {unknown_splits[0]!r}: expected one of the given {', '.join(splits) or 'none'} "
                            f"({', '.join(SPLITS)})")
    if not splits:
        raise HFImportError("no split to binarise: give --train, --valid or --test SRC_FILE,TGT_FILE")
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise HFImportError(f"--out {out_dir}: is a file, not a folder")
    shape = read_translation_config(model_dir)
    langs = language_pair(shape, source_lang, target_lang)
    source, target = read_vocabulary_maps(model_dir, shape)
    encoder = pair_encoder(model_dir, shape, langs)
    encoded = {split: encode_split(paths, split, encoder, source, target) for split, paths in splits.items()}
    for split, path in conllu.items():
        check_parses_align(path, encoded[split][0], source, split, encoder.tokenizer)
    counted = ["train"] if "train" in encoded else list(encoded)
    counts = [torch.zeros(vocab.size, dtype=torch.long) for vocab in (source, target)]
    for split in counted:
        for side, count in zip(encoded[split], counts):
            for indices in side:
                count.add_(torch.bincount(torch.tensor(indices), minlength=count.numel()))
    pair = f"{langs[0]}-{langs[1]}"

    def write(staging: str) -> None:
        for lang, vocab, count in zip(langs, (source, target), counts):
            write_text_atomic(os.path.join(staging, f"dict.{lang}.txt"), dictionary_text(vocab, count.tolist()))
        for split, sides in encoded.items():
            for lang, side, vocab in zip(langs, sides, (source, target)):
                prefix = os.path.join(staging, f"{split}.{pair}.{lang}")
                builder = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=vocab.size)
                for indices in side:
                    builder.add_item(torch.IntTensor(indices))
                builder.finalize(prefix + ".idx")
        for split, path in conllu.items():
            shutil.copyfile(path, os.path.join(staging, f"{split}.conllu" + (".gz" if path.endswith(".gz") else "")))

    files = write_files_into(out_dir, write)
    return TranslationBinariseResult(
        langs, {s: len(sides[0]) for s, sides in encoded.items()},
        {s: tuple(sum(map(len, side)) for side in sides) for s, sides in encoded.items()}, counted,
        {s: tuple(sum(i.count(UNK) for i in side) for side in sides) for s, sides in encoded.items()},
        encoder.tokenizer, files)

