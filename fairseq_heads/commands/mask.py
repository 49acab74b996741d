"""`fairseq-heads mask`: the head mask (JSON for --head-mask) of a gated checkpoint's open heads.

Argument parsing and wiring only; the work is in `fairseq_heads.gating.head_masks`.
"""
import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", required=True, metavar="CHECKPOINT", help="a gated_transformer checkpoint")
    parser.add_argument("--out", required=True, metavar="MASK.json",
                        help="head mask JSON (for --head-mask), written atomically")


def run(args) -> int:
    """Write the head mask of a gated checkpoint's open heads (the head-keeping rule)."""
    from ..files import check_output_file
    from ..errors import CommandError
    from ..checkpoints import load_checkpoint
    from ..gating.head_masks import head_mask_from_gates, save_head_mask
    from ..models.gated_transformer import iter_gates
    from ..checkpoints import model_options
    from ..pruning.checkpoint import build_model_from_state

    if not os.path.isfile(args.path):
        raise CommandError(f"checkpoint not found: {args.path}")
    check_output_file(args.out, "--out")
    state = load_checkpoint(args.path)
    model = build_model_from_state(state, model_options(state))
    if not any(True for _ in iter_gates(model)):
        raise CommandError(f"{args.path}: no gated heads in this checkpoint")
    mask = head_mask_from_gates(model)
    save_head_mask(mask, args.out)
    kept = ", ".join(f"{t} {int(m.sum())}/{m.numel()}" for t, m in mask.items())
    print(f"heads kept: {kept}; wrote {args.out}")
    return 0
