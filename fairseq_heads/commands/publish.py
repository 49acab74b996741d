"""`fairseq-heads publish RESULTS DOCS [--merge]`: a recipe's committed results (no checkpoints,
no data) into a docs folder.

Argument parsing and wiring only; the work is in `fairseq_heads.pipeline.publish`.
"""
import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", metavar="RESULTS", help="a recipe's results folder")
    parser.add_argument("docs", metavar="DOCS", help="the published folder, e.g. docs/results/NAME")
    parser.add_argument("--merge", action="store_true",
                        help="keep what DOCS holds and add (or replace) the results' files; no report files")


def run(args) -> int:
    from ..pipeline.publish import publish

    publish(args.results, args.docs, merge=args.merge)
    print(f"published {args.results} into {args.docs}"
          + (" (merged: render its report with `fairseq-heads report DOCS`)" if args.merge else ""))
    return 0
