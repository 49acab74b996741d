"""`fairseq-heads prepare`: parallel text (or the built-in synthetic corpus) -> fairseq data-bin.

Argument parsing and wiring only; the pipeline is `fairseq_heads.data.prepare`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from fairseq_heads.data.prepare import SPLITS, DataPrepError, FilePair, PrepareConfig, prepare

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `fairseq-heads prepare` (also `python -m fairseq_heads.commands.prepare`)."""
    parser.add_argument("--work-dir", required=True, type=Path,
                        help="output folder: raw/, clean/, spm.model, spm/, bin/ (re-runs skip finished steps)")
    parser.add_argument("--src", default="src", help="source language code (default: %(default)s)")
    parser.add_argument("--tgt", default="tgt", help="target language code (default: %(default)s)")

    inputs = parser.add_argument_group("input: the synthetic corpus or parallel files")
    inputs.add_argument("--synthetic", action="store_true",
                        help="generate the built-in synthetic corpus (with gold CoNLL-U) instead of reading files")
    inputs.add_argument("--n-train", type=int, default=10000, help="synthetic train sentences (default: %(default)s)")
    inputs.add_argument("--n-valid", type=int, default=500, help="synthetic valid sentences (default: %(default)s)")
    inputs.add_argument("--n-test", type=int, default=500, help="synthetic test sentences (default: %(default)s)")
    for split in SPLITS:
        inputs.add_argument(f"--{split}", action="append", default=[], metavar="SRC,TGT",
                            help=f"{split} source and target files, plain or .gz; repeat to concatenate")
        inputs.add_argument(f"--{split}-conllu", type=Path, default=None, metavar="PATH",
                            help=f"CoNLL-U parses of the {split} source side (one sentence per line), kept alongside")

    clean = parser.add_argument_group("cleaning (train only; valid/test are only normalised)")
    clean.add_argument("--max-len", type=int, default=250, help="drop train pairs longer than this many whitespace tokens")
    clean.add_argument("--max-ratio", type=float, default=3.0, help="drop train pairs whose token-length ratio exceeds this")
    clean.add_argument("--no-dedup", action="store_true", help="keep duplicate train pairs")

    bpe = parser.add_argument_group("sentencepiece and binarisation")
    bpe.add_argument("--vocab-size", type=int, default=None,
                     help="joint BPE vocabulary size (default: 8000; 2000 with --synthetic)")
    bpe.add_argument("--input-sentence-size", type=int, default=1_000_000,
                     help="at most this many sentences sampled to train sentencepiece")
    bpe.add_argument("--workers", type=int, default=1, help="threads/processes for sentencepiece and fairseq-preprocess")
    bpe.add_argument("--seed", type=int, default=1, help="seed of the synthetic corpus and of sentencepiece sampling")
    bpe.add_argument("--fairseq-preprocess", default=None, metavar="EXE",
                     help="fairseq-preprocess executable (default: next to python, then PATH)")


def parse_file_pair(option: str, value: str) -> FilePair:
    parts = value.split(",")
    if len(parts) != 2 or not all(parts):
        raise DataPrepError(f"{option}: expected SRC,TGT (two paths separated by one comma), got {value!r}")
    return FilePair(Path(parts[0]), Path(parts[1]))


def config_from_args(args: argparse.Namespace) -> PrepareConfig:
    """The PrepareConfig the options describe."""
    inputs: Dict[str, List[FilePair]] = {}
    conllu: Dict[str, Path] = {}
    for split in SPLITS:
        pairs = [parse_file_pair(f"--{split}", v) for v in getattr(args, split) or []]
        if pairs:
            inputs[split] = pairs
        path = getattr(args, f"{split}_conllu")
        if path is not None:
            conllu[split] = path
    vocab_size = args.vocab_size if args.vocab_size is not None else (2000 if args.synthetic else 8000)
    return PrepareConfig(
        work_dir=args.work_dir,
        src_lang=args.src,
        tgt_lang=args.tgt,
        inputs=inputs,
        conllu=conllu,
        synthetic=args.synthetic,
        synthetic_sizes={"train": args.n_train, "valid": args.n_valid, "test": args.n_test},
        seed=args.seed,
        vocab_size=vocab_size,
        max_len=args.max_len,
        max_ratio=args.max_ratio,
        dedup=not args.no_dedup,
        input_sentence_size=args.input_sentence_size,
        workers=args.workers,
        fairseq_preprocess=args.fairseq_preprocess,
    )


def run(args: argparse.Namespace) -> int:
    """Run the pipeline; 0 on success, 2 (the reason in one line on stderr, as every command) on
    bad input or a failed step."""
    try:
        result = prepare(config_from_args(args))
    except DataPrepError as e:
        print(f"fairseq-heads prepare: error: {e}", file=sys.stderr)
        return 2
    print(f"data-bin: {result.data_bin}")
    print(f"sentencepiece model: {result.spm_model}")
    print(f"steps run: {', '.join(result.steps_run) or '-'}; skipped (done): {', '.join(result.steps_skipped) or '-'}")
    for split in result.splits:
        counts = result.clean_report[split]
        dropped = {k: v for k, v in counts.items() if k not in ("input", "kept") and v}
        print(f"{split}: {counts['kept']} of {counts['input']} pairs kept" + (f", dropped {dropped}" if dropped else ""))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_heads.commands.prepare",
                                     description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                        force=True)  # importing fairseq may have configured logging already
    return run(args)


if __name__ == "__main__":  # data-prep/prepare.sh
    sys.exit(main())
