"""`fairseq-heads prune`: a checkpoint -> a smaller, physically pruned `gated_transformer` checkpoint.

Argument parsing and wiring only; the work is in `fairseq_heads.pruning`.
"""
import argparse
import os

from ..pruning.importance import METRICS, read_head_scores


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `fairseq-heads prune`."""
    parser.add_argument("--path", required=True, metavar="CHECKPOINT",
                        help="a fairseq transformer or gated_transformer checkpoint")
    parser.add_argument("--out", required=True, metavar="PRUNED.pt",
                        help="where to write the pruned checkpoint (written atomically)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-gates", action="store_true",
                        help="keep the heads whose gates are open: deterministic gate > 0, or the "
                             "top-K log-alphas for a model trained with --target-heads")
    source.add_argument("--from-importance", metavar="HEADS.csv",
                        help="per-head scores (columns type,layer,head,<metric>, e.g. from "
                             "`fairseq-heads stats`); keeps the --keep highest-scoring heads")
    parser.add_argument("--metric", choices=None, metavar="|".join(METRICS),
                        help="score column to rank heads by (with --from-importance)")
    parser.add_argument("--keep", type=int, metavar="K",
                        help="heads to keep, in total over the scored types (or per type with --per-type)")
    parser.add_argument("--per-type", action="store_true", help="--keep K heads of each scored attention type")
    parser.add_argument("--types", metavar="TYPES", default=None,
                        help="comma list of the attention types to score and prune (enc-self, "
                             "dec-self, enc-dec); the others are kept whole (default: every type "
                             "in the scores, or every gated type)")
    parser.add_argument("--prune-unit", choices=("query", "kv-group"), default="query",
                        help="what is kept or removed: single query heads (a KV head goes with "
                             "its group's last one), or the KV groups of a grouped-query model "
                             "whole (--keep counts groups; a group with an open gate is kept, its heads "
                             "fully open). "
                             "Default: %(default)s")


def run(args) -> int:
    """Parse the options into a mask policy (fairseq_heads.pruning.mask_policy), prune and save."""
    from ..files import check_output_file
    from ..errors import CommandError
    from ..checkpoints import check_checkpoint_file
    from ..models.gated_transformer import parse_attention_types
    from ..pruning.checkpoint import format_prune_result, prune_checkpoint
    from ..pruning.mask_policy import KeepOpenGates, KeepTopScored

    types = parse_attention_types(args.types, "--types") if args.types else None
    if args.from_importance:
        if args.metric is None or args.keep is None:
            raise CommandError("--from-importance needs --metric and --keep")
        scores = read_head_scores(args.from_importance, args.metric, types)  # checks the metric name first
        policy = KeepTopScored(scores, args.keep, per_type=args.per_type, unit=args.prune_unit,
                               source=args.from_importance)
    elif args.metric is not None or args.keep is not None or args.per_type:
        raise CommandError("--metric, --keep and --per-type go with --from-importance")
    else:
        policy = KeepOpenGates(types, unit=args.prune_unit)
    if os.path.abspath(args.out) == os.path.abspath(args.path):
        raise CommandError("--out must differ from --path")
    check_output_file(args.out, "--out")
    check_checkpoint_file(args.path)
    result = prune_checkpoint(args.path, args.out, policy)
    print(format_prune_result(result))
    print(f"wrote {args.out}")
    return 0
