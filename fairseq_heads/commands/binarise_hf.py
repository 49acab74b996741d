"""`fairseq-heads binarise-hf MODEL_DIR --text TEXT_DIR --out DATA_BIN` (a language model) or
`... --train SRC,TGT [--valid SRC,TGT] [--test SRC,TGT] --out DATA_BIN` (a translation model):
text -> a data-bin with a Hugging Face model's own tokenizer, for the checkpoint `import-hf`
makes from MODEL_DIR. Wiring only; see `fairseq_heads.hf.binarise` and
`fairseq_heads.hf.binarise_translation`."""
import argparse

from ..errors import CommandError


def file_pair(text: str):
    source, sep, target = text.partition(",")
    if not sep or not source or not target or "," in target:
        raise argparse.ArgumentTypeError(f"expected SRC_FILE,TGT_FILE, got {text!r}")
    return source, target


def split_file(text: str):
    split, sep, path = text.partition("=")
    if not sep or not split or not path:
        raise argparse.ArgumentTypeError(f"expected SPLIT=FILE, got {text!r}")
    return split, path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="the HF model directory (its tokenizer)")
    parser.add_argument("--text", metavar="TEXT_DIR",
                        help="language models: folder with train.txt / valid.txt / test.txt, one "
                             "paragraph a line (e.g. the text/ folder `prepare-lm` writes)")
    for split in ("train", "valid", "test"):
        parser.add_argument(f"--{split}", type=file_pair, metavar="SRC_FILE,TGT_FILE",
                            help=f"translation models: the {split} split's source and target text, "
                                 f"one sentence a line (plain or gzip)")
    parser.add_argument("--source-lang", metavar="SRC",
                        help="translation models: the dictionaries' names, as given to import-hf "
                             "(M2M100 / NLLB: also the tokenizer's language codes)")
    parser.add_argument("--target-lang", metavar="TGT")
    parser.add_argument("--conllu", type=split_file, action="append", default=[], metavar="SPLIT=FILE",
                        help="translation models: gold parses of a split's source side, checked to "
                             "align with its pieces and copied as SPLIT.conllu[.gz] (stats --conllu)")
    parser.add_argument("--out", required=True, metavar="DATA_BIN", help="the data-bin folder")


def run_translation(args, splits) -> int:
    from ..hf.binarise_translation import binarise_parallel

    result = binarise_parallel(args.model_dir, splits, args.out, args.source_lang, args.target_lang,
                               dict(args.conllu))
    src, tgt = result.langs
    for split, lines in result.lines.items():
        (source, target), (source_unk, target_unk) = result.tokens[split], result.unknown[split]
        print(f"{split}: {lines} pairs, {source} {src} tokens ({source_unk} <unk>), "
              f"{target} {tgt} tokens ({target_unk} <unk>)")
    print(f"tokenizer: {result.tokenizer}; dict.{src}.txt / dict.{tgt}.txt counts: the tokens of "
          f"{', '.join(result.counted)}")
    print(f"data-bin: {args.out} (fairseq: -s {src} -t {tgt})")
    return 0


def run(args) -> int:
    from ..hf.binarise import binarise_with_hf_tokenizer
    from ..hf.translation_config import is_translation_config

    splits = {s: getattr(args, s) for s in ("train", "valid", "test") if getattr(args, s)}
    if is_translation_config(args.model_dir):
        if args.text:
            raise CommandError(f"--text: {args.model_dir} is a translation model; give --train / --valid / "
                               f"--test SRC_FILE,TGT_FILE")
        return run_translation(args, splits)
    if splits or args.conllu or args.source_lang or args.target_lang:
        raise CommandError("--train / --valid / --test / --conllu / --source-lang / --target-lang: only for "
                           "translation models (a language model takes --text)")
    if not args.text:
        raise CommandError(f"--text: required for the language model {args.model_dir}")
    result = binarise_with_hf_tokenizer(args.model_dir, args.text, args.out)
    for split in result.lines:
        print(f"{split}: {result.lines[split]} lines, {result.tokens[split]} tokens")
    print(f"dict.txt counts: the tokens of {', '.join(result.counted)}")
    print(f"data-bin: {args.out}")
    return 0
