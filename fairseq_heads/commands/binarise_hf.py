"""`fairseq-heads binarise-hf MODEL_DIR --text TEXT_DIR --out DATA_BIN`: text -> a data-bin with a
Hugging Face model's own tokenizer, for the checkpoint `import-hf` makes from MODEL_DIR. Wiring
only; see `fairseq_heads.hf.binarise`."""
import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="MODEL_DIR", help="the HF model directory (its tokenizer)")
    parser.add_argument("--text", required=True, metavar="TEXT_DIR",
                        help="folder with train.txt / valid.txt / test.txt, one paragraph a line "
                             "(e.g. the text/ folder `prepare-lm` writes)")
    parser.add_argument("--out", required=True, metavar="DATA_BIN", help="the data-bin folder")


def run(args) -> int:
    from ..hf.binarise import binarise_with_hf_tokenizer

    result = binarise_with_hf_tokenizer(args.model_dir, args.text, args.out)
    for split in result.lines:
        print(f"{split}: {result.lines[split]} lines, {result.tokens[split]} tokens")
    print(f"data-bin: {args.out}")
    return 0
