"""`fairseq-heads report`: tables.md, figures and report.html from a recipe's results folder.

Argument parsing and wiring only; the work is in `fairseq_heads.report.build`.
"""
import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="RESULTS_DIR", help="a recipe's results folder")
    parser.add_argument("--out-dir", default=None, metavar="DIR",
                        help="where tables.md, report.html and figures/ go (default: RESULTS_DIR)")
    parser.add_argument("--trace-lambda", type=float, default=None, metavar="LAMBDA",
                        help="the all-types run whose gate trace to plot (default: the largest lambda)")
    parser.add_argument("--l0-points", default=None, metavar="L0_POINTS.csv",
                        help="only write the encoder-pruning points (heads_kept,bleu,label) for "
                             "`fairseq-heads curve --overlay`, then stop")


def run(args) -> int:
    """Write tables.md, figures/ and report.html (or only the L0 points with --l0-points)."""
    from ..report.build import build_report, write_l0_points

    if not os.path.isdir(args.results_dir):
        raise FileNotFoundError(f"results folder not found: {args.results_dir}")
    if args.l0_points:
        rows = write_l0_points(args.results_dir, args.l0_points)
        print(f"{rows} encoder-pruning points; wrote {args.l0_points}")
        return 0
    written, skipped = build_report(args.results_dir, args.out_dir, trace_lambda=args.trace_lambda)
    for title, reason in skipped:
        print(f"skipped: {title}: {reason}")
    for path in written:
        print(f"wrote {path}")
    return 0
