"""`fairseq-heads plot DIR`: redraw a `stats` folder's figures from its tables.

Argument parsing and wiring only; the work is in `fairseq_heads.stats.figures`.
"""
import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="an output folder of `fairseq-heads stats`")


def run(args) -> int:
    from fairseq_heads.stats import redraw_figures

    for path in redraw_figures(args.directory):
        print(path)
    return 0
