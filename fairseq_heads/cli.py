"""`fairseq-heads`: argument parsing and wiring only; the work is in the library modules."""
import argparse
import os
import sys
from typing import List, Optional


class CommandError(Exception):
    """A user-facing error: printed as one line, exit status 2."""


def cmd_gates(args) -> int:
    from .compat import load_checkpoint
    from .gate_table import format_gate_table, gate_rows

    if not os.path.isfile(args.checkpoint):
        raise CommandError(f"checkpoint not found: {args.checkpoint}")
    rows = gate_rows(load_checkpoint(args.checkpoint))
    if not rows:
        raise CommandError(f"{args.checkpoint}: no gated attention heads in this checkpoint")
    print(format_gate_table(rows))
    return 0


def cmd_user_dir(args) -> int:
    print(os.path.dirname(os.path.abspath(__file__)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="fairseq-heads",
        description="Analyse and prune the attention heads of fairseq Transformer models.")
    parser.add_argument("--version", action="version", version=f"fairseq-heads {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    gates = commands.add_parser("gates", help="print each gated head's P(open) and deterministic gate")
    gates.add_argument("checkpoint", help="a gated_transformer checkpoint")
    gates.set_defaults(run=cmd_gates)

    user_dir = commands.add_parser("user-dir", help="print the path to pass to fairseq's --user-dir")
    user_dir.set_defaults(run=cmd_user_dir)

    from .commands import prepare

    prepare_parser = commands.add_parser("prepare", help="clean, sentencepiece-encode and binarise "
                                                         "a parallel corpus (or the built-in toy one)")
    prepare.add_arguments(prepare_parser)
    prepare_parser.set_defaults(run=prepare.run)

    # --- pruning (fairseq_heads/pruning, docs/pruning.md) ---
    from .commands import curve, prune

    prune_parser = commands.add_parser("prune", help="physically remove heads: a smaller, faster "
                                                     "gated_transformer checkpoint")
    prune.add_arguments(prune_parser)
    prune_parser.set_defaults(run=prune.run)
    curve_parser = commands.add_parser("curve", help="BLEU as the lowest-scoring heads are removed "
                                                     "step by step (Michel et al. 2019); CSV + plot")
    curve.add_arguments(curve_parser)
    curve_parser.set_defaults(run=curve.run)

    from .commands import stats

    stats_parser = commands.add_parser("stats", help="per-head statistics of a translation model "
                                                     "on a data subset: tables and heatmaps")
    stats.add_stats_arguments(stats_parser)
    stats_parser.set_defaults(run=stats.run_stats)
    plot_parser = commands.add_parser("plot", help="redraw the figures of a `stats` folder "
                                                   "from its tables")
    stats.add_plot_arguments(plot_parser)
    plot_parser.set_defaults(run=stats.run_plot)

    # --- recipes: head masks from gates, per-model result files, the paper-tables report ---
    from .commands import recipe

    mask_parser = commands.add_parser("mask", help="write the head mask (JSON for --head-mask) "
                                                   "of a gated checkpoint's open heads")
    recipe.add_mask_arguments(mask_parser)
    mask_parser.set_defaults(run=recipe.run_mask)
    result_parser = commands.add_parser("result", help="a model's result file: sacreBLEU of a "
                                                       "fairseq-generate output + heads kept")
    recipe.add_result_arguments(result_parser)
    result_parser.set_defaults(run=recipe.run_result)
    report_parser = commands.add_parser("report", help="tables.md, figures and report.html "
                                                       "from a recipe's results folder")
    recipe.add_report_arguments(report_parser)
    report_parser.set_defaults(run=recipe.run_report)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except (CommandError, ValueError, FileNotFoundError) as error:
        print(f"fairseq-heads {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
