"""`fairseq-heads`: argument parsing and wiring only; the work is in the library modules."""
import argparse
import importlib
import os
import sys
from typing import List, Optional

from .errors import CommandError


def cmd_gates(args) -> int:
    from .checkpoints import load_checkpoint
    from .gating.gate_table import format_gate_table, gate_rows

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


# (subcommand, module in fairseq_heads.commands, its argument builder, its runner, help)
SUBCOMMANDS = [
    ("prepare", "prepare", "add_arguments", "run",
     "clean, sentencepiece-encode and binarise a parallel corpus (or the built-in toy one)"),
    ("prepare-lm", "prepare_lm", "add_arguments", "run",
     "monolingual text (novels, WikiText-2 or the toy grammar) -> a language-model data-bin"),
    ("import-hf", "import_hf", "add_arguments", "run",
     "a local Hugging Face LLaMA-family model -> a gated_llama checkpoint.pt + dict.txt"),
    ("export-hf", "export_hf", "add_arguments", "run",
     "a (kv-group pruned) gated_llama -> a Hugging Face model directory"),
    ("binarise-hf", "binarise_hf", "add_arguments", "run",
     "text -> a language-model data-bin with a Hugging Face model's own tokenizer"),
    ("prune", "prune", "add_arguments", "run",
     "physically remove heads: a smaller, faster gated_transformer checkpoint"),
    ("curve", "curve", "add_arguments", "run",
     "BLEU as the lowest-scoring heads are removed step by step (Michel et al. 2019); CSV + plot"),
    ("stats", "stats", "add_stats_arguments", "run_stats",
     "per-head statistics of a translation model on a data subset: tables and heatmaps"),
    ("plot", "stats", "add_plot_arguments", "run_plot",
     "redraw the figures of a `stats` folder from its tables"),
    ("mask", "mask", "add_mask_arguments", "run_mask",
     "write the head mask (JSON for --head-mask) of a gated checkpoint's open heads"),
    ("result", "result", "add_result_arguments", "run_result",
     "a model's result file: sacreBLEU of a fairseq-generate output + heads kept"),
    ("lm-result", "lm_recipe", "add_result_arguments", "run_result",
     "a language model's result file: perplexity on a subset + the heads it has"),
    ("lm-report", "lm_recipe", "add_report_arguments", "run_report",
     "tables.md and figures from the LM recipe's results folder"),
    ("report", "report", "add_report_arguments", "run_report",
     "tables.md, figures and report.html from a recipe's results folder"),
    ("recipe", "pipeline.command", "add_arguments", "run",
     "run a recipe's steps (data, training, BLEU, statistics, pruning, report), resumably"),
    ("publish", "pipeline.publish", "add_arguments", "run",
     "copy a recipe's committed results (pack.py's subset) into a docs folder, or --merge them into it"),
]


def build_parser() -> argparse.ArgumentParser:
    """The `fairseq-heads` parser: one subcommand per SUBCOMMANDS entry (plus gates, user-dir)."""
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

    for name, module_name, add_arguments, run, help_text in SUBCOMMANDS:
        # a bare name is a module of fairseq_heads.commands; a dotted one is under fairseq_heads
        module = importlib.import_module(f".{module_name}" if "." in module_name
                                         else f".commands.{module_name}", __package__)
        subparser = commands.add_parser(name, help=help_text)
        getattr(module, add_arguments)(subparser)
        subparser.set_defaults(run=getattr(module, run))
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
