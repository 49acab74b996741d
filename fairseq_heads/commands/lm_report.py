"""`fairseq-heads lm-report`: tables.md and figures from the LM recipe's results folder.

Argument parsing and wiring only; the work is in `fairseq_heads.report.lm_report`.
"""
import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="RESULTS_DIR", help="the LM recipe's results folder")
    parser.add_argument("--out-dir", default=None, metavar="DIR",
                        help="where tables.md and figures/ go (default: RESULTS_DIR)")


def run(args) -> int:
    from ..report.lm_report import build_lm_report

    if not os.path.isdir(args.results_dir):
        raise FileNotFoundError(f"results folder not found: {args.results_dir}")
    for path in build_lm_report(args.results_dir, args.out_dir):
        print(path)
    return 0
