"""`fairseq-heads prepare-lm`: monolingual text -> fairseq language-model data-bin.

Argument parsing and wiring only; the pipeline is `fairseq_heads.data.lm_corpus`.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from fairseq_heads.data.lm_corpus import CORPORA, LMCorpusConfig, prepare_lm


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `fairseq-heads prepare-lm`."""
    parser.add_argument("--work-dir", required=True, type=Path,
                        help="output folder: text/, spm.model, spm/, bin/ (re-runs skip finished steps)")
    parser.add_argument("--corpus", choices=CORPORA, default="gutenberg",
                        help="gutenberg (novels, split by book), gutenberg_large (163 books, split as "
                             "its manifest.tsv says), wikitext2 (split by article) or "
                             "synthetic (the toy grammar); default: %(default)s")
    parser.add_argument("--source-dir", type=Path, default=None,
                        help="folder of the corpus files, e.g. ../shared/data/gutenberg_en")
    parser.add_argument("--vocab-size", type=int, default=8000, help="BPE vocabulary (default: %(default)s)")
    parser.add_argument("--repeat-spans", action="store_true",
                        help="the labelled repeated-span setting: train windows of 12-40 words "
                             "written twice with probability --repeat-prob (valid/test unchanged)")
    parser.add_argument("--repeat-prob", type=float, default=0.5)
    parser.add_argument("--synthetic-sentences", type=int, default=4000,
                        help="train lines of --corpus synthetic, random_repeats, markov_repeats (valid/test: 1/20 each)")
    parser.add_argument("--tokenizer", type=Path, default=None, metavar="MODEL_DIR",
                        help="binarise with this Hugging Face model's own tokenizer into WORK/hf_bin "
                             "(its dictionary: the one `import-hf MODEL_DIR` writes) instead of "
                             "training a sentencepiece model")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    config = LMCorpusConfig(work_dir=args.work_dir, corpus=args.corpus, source_dir=args.source_dir,
                            vocab_size=args.vocab_size, repeat_spans=args.repeat_spans,
                            repeat_prob=args.repeat_prob, synthetic_sentences=args.synthetic_sentences,
                            seed=args.seed, workers=args.workers)
    if args.tokenizer is not None:
        from fairseq_heads.hf.binarise import binarise_with_hf_tokenizer
        from fairseq_heads.hf.hf_config import read_hf_config

        read_hf_config(str(args.tokenizer))  # a bad model directory fails before the corpus work
        text = prepare_lm(config, text_only=True)
        data_bin = Path(args.work_dir) / "hf_bin"
        binarise_with_hf_tokenizer(str(args.tokenizer), str(text), str(data_bin))
    else:
        data_bin = prepare_lm(config)
    report = json.loads((Path(args.work_dir) / "text" / "report.json").read_text())
    for split, counts in report["splits"].items():
        print(f"{split}: {len(counts['documents'])} documents, {counts['paragraphs']} paragraphs, "
              f"{counts['words']} words")
    print(f"data-bin: {data_bin}")
    return 0
