"""`fairseq-heads`: the command table. Each command is one module of `fairseq_heads.commands`
with `add_arguments(parser)` and `run(args) -> exit status`; the work is in the library."""
import argparse
import sys
from typing import List, Optional

from .commands import (binarise_hf, carry, cpu_env, curve, export_hf, gates, import_hf, lm_report, lm_result, mask,
                       plot, prepare, prepare_lm, prune, publish, recipe, report, result, stats, user_dir)
from .errors import CommandError

# (command, its module in fairseq_heads.commands, help)
COMMANDS = [
    ("gates", gates,
     "print each gated head's P(open) and deterministic gate"),
    ("user-dir", user_dir,
     "print the path to pass to fairseq's --user-dir"),
    ("cpu-env", cpu_env,
     "print the CPU recipes' memory settings (allocator, huge pages) as export lines for your own fairseq-train"),
    ("prepare", prepare,
     "clean, sentencepiece-encode and binarise a parallel corpus (or the built-in toy one)"),
    ("prepare-lm", prepare_lm,
     "monolingual text (novels, WikiText-2 or the toy grammar) -> a language-model data-bin"),
    ("import-hf", import_hf,
     "a local Hugging Face LLaMA-family model -> a gated_llama checkpoint.pt + dict.txt"),
    ("export-hf", export_hf,
     "a (kv-group pruned) gated_llama -> a Hugging Face model directory"),
    ("binarise-hf", binarise_hf,
     "text (a language model's, or a translation model's parallel text) -> a data-bin with a Hugging "
     "Face model's own tokenizer"),
    ("prune", prune,
     "physically remove heads: a smaller, faster gated_transformer checkpoint"),
    ("curve", curve,
     "BLEU as the lowest-scoring heads are removed step by step (Michel et al. 2019); CSV + plot"),
    ("stats", stats,
     "per-head statistics of a translation model on a data subset: tables and heatmaps"),
    ("plot", plot,
     "redraw the figures of a `stats` folder from its tables"),
    ("mask", mask,
     "write the head mask (JSON for --head-mask) of a gated checkpoint's open heads"),
    ("result", result,
     "a model's result file: sacreBLEU of a fairseq-generate output + heads kept"),
    ("lm-result", lm_result,
     "a language model's result file: perplexity on a subset + the heads it has"),
    ("lm-report", lm_report,
     "tables.md and figures from the LM recipe's results folder"),
    ("report", report,
     "tables.md, figures and report.html from a recipe's results folder"),
    ("recipe", recipe,
     "run a recipe's steps (data, training, BLEU, statistics, pruning, report), resumably"),
    ("publish", publish,
     "copy a recipe's committed results (pack.py's subset) into a docs folder, or --merge them into it"),
    ("carry", carry,
     "pack a results folder's unfinished trainings compactly (to commit), or unpack them on another machine"),
]


def build_parser() -> argparse.ArgumentParser:
    """The `fairseq-heads` parser: one subcommand per COMMANDS entry."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="fairseq-heads",
        description="Analyse and prune the attention heads of fairseq Transformer models.")
    parser.add_argument("--version", action="version", version=f"fairseq-heads {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module, help_text in COMMANDS:
        subparser = subparsers.add_parser(name, help=help_text)
        module.add_arguments(subparser)
        subparser.set_defaults(run=module.run)
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
