"""`fairseq-heads gates CKPT`: each gated head's log-alpha, P(open), deterministic gate and
whether it is kept.

Argument parsing and wiring only; the work is in `fairseq_heads.gating.gate_table`.
"""
import argparse
import os

from ..errors import CommandError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="a gated_transformer checkpoint")


def run(args) -> int:
    from ..checkpoints import load_checkpoint
    from ..gating.gate_table import format_gate_table, gate_rows

    if not os.path.isfile(args.checkpoint):
        raise CommandError(f"checkpoint not found: {args.checkpoint}")
    rows = gate_rows(load_checkpoint(args.checkpoint))
    if not rows:
        raise CommandError(f"{args.checkpoint}: no gated attention heads in this checkpoint")
    print(format_gate_table(rows))
    return 0
