"""Text -> a fairseq language-model data-bin with a Hugging Face model's own tokenizer, for the
model `import-hf` made from the same directory: the same dict.txt, each HF id mapped to its
dictionary index (`vocabulary.vocabulary_map`), fairseq's </s> after every line as
fairseq-preprocess writes it (an empty line is a lone </s>: fairseq's document break).

Lines are encoded without the tokenizer's special tokens (no <s>): fairseq's LM data has none
(a model trained with <s> reads one at each block's start: `gated_llama --block-start bos`).
dict.txt's counts are the tokens of train.txt, as fairseq-preprocess counts its training text (of
every split written when there is no train.txt), each line's </s> included: what rare-word
statistics rank tokens by.
"""
import os
from typing import Callable, Dict, List, NamedTuple

import torch

from ..files import write_files_into, write_text_atomic
from .hf_config import HFImportError, read_hf_config
from .vocabulary import EOS, dictionary_text, read_tokenizer_vocabulary, vocabulary_map

SPLITS = ("train", "valid", "test")


def hf_encoder(model_dir: str) -> Callable[[str], List[int]]:
    """line -> HF ids, by tokenizer.json (the `tokenizers` library) or tokenizer.model."""
    json_path = os.path.join(model_dir, "tokenizer.json")
    if os.path.isfile(json_path):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(json_path)
        return lambda line: tokenizer.encode(line, add_special_tokens=False).ids
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    return lambda line: processor.encode(line)


class BinariseResult(NamedTuple):
    lines: Dict[str, int]
    tokens: Dict[str, int]
    files: List[str]
    counted: List[str]  # the splits whose tokens are dict.txt's counts


def binarise_with_hf_tokenizer(model_dir: str, text_dir: str, out_dir: str) -> BinariseResult:
    """{train,valid,test}.txt of `text_dir` (those present) -> `out_dir`: dict.txt and
    {split}.bin/.idx (fairseq's mmap format), written together or not at all."""
    from fairseq.data import indexed_dataset

    shape = read_hf_config(model_dir)
    tokenizer = read_tokenizer_vocabulary(model_dir, shape.vocab_size)
    vocab = vocabulary_map(tokenizer.strings, shape.eos_token_id, shape.bos_token_id, tokenizer.unk_id)
    texts = {s: os.path.join(text_dir, f"{s}.txt") for s in SPLITS
             if os.path.isfile(os.path.join(text_dir, f"{s}.txt"))}
    if not texts:
        raise HFImportError(f"--text {text_dir}: no train.txt, valid.txt or test.txt")
    encode = hf_encoder(model_dir)
    index = vocab.hf_to_fairseq
    lines, tokens = {}, {}
    counted = ["train"] if "train" in texts else list(texts)
    counts = torch.zeros(vocab.size, dtype=torch.long)

    def write(staging: str) -> None:
        for split, path in texts.items():
            prefix = os.path.join(staging, split)
            builder = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=vocab.size)
            lines[split] = tokens[split] = 0
            with open(path, encoding="utf-8") as f:
                for line in f:
                    ids = torch.IntTensor([index[i] for i in encode(line.rstrip("\n"))] + [EOS])
                    builder.add_item(ids)
                    if split in counted:
                        counts.add_(torch.bincount(ids.long(), minlength=vocab.size))
                    lines[split] += 1
                    tokens[split] += len(ids)
            builder.finalize(prefix + ".idx")
        write_text_atomic(os.path.join(staging, "dict.txt"), dictionary_text(vocab, counts.tolist()))

    files = write_files_into(out_dir, write)
    return BinariseResult(lines, tokens, files, counted)
