"""`fairseq-heads prune`: a checkpoint -> a smaller, physically pruned `gated_transformer` checkpoint.

Argument parsing and wiring only; the work is in `fairseq_heads.pruning`.
"""
import argparse
import os

from ..pruning.importance import (
    METRICS,
    check_scores_match_model,
    keep_top_k,
    read_head_scores,
)


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
    """Check the options, choose the mask (gates or importance scores), prune and save."""
    from ..files import check_output_file
    from ..errors import CommandError
    from ..checkpoints import check_checkpoint_file
    from ..gating.head_masks import head_mask_from_gates
    from ..heads import heads_per_layer
    from ..models.gated_transformer import iter_gates, parse_attention_types
    from ..pruning.checkpoint import format_prune_result, prune_checkpoint

    types = parse_attention_types(args.types, "--types") if args.types else None
    if args.from_importance:
        if args.metric is None or args.keep is None:
            raise CommandError("--from-importance needs --metric and --keep")
        scores = read_head_scores(args.from_importance, args.metric, types)  # checks the metric name first
    elif args.metric is not None or args.keep is not None or args.per_type:
        raise CommandError("--metric, --keep and --per-type go with --from-importance")
    if os.path.abspath(args.out) == os.path.abspath(args.path):
        raise CommandError("--out must differ from --path")
    check_output_file(args.out, "--out")
    check_checkpoint_file(args.path)

    def choose_mask(model):
        if args.from_gates:
            gated = {t for t, _, _ in iter_gates(model)}
            if not gated:
                raise CommandError(f"{args.path}: no gated heads in this checkpoint (use --from-importance)")
            if types and not types <= gated:
                raise CommandError(f"--types: {', '.join(sorted(types - gated))} not gated in "
                                   f"{args.path} (gated: {', '.join(sorted(gated))})")
            mask = head_mask_from_gates(model)
            return {t: m for t, m in mask.items() if types is None or t in types}
        check_scores_match_model(scores, heads_per_layer(model), args.from_importance)
        return keep_top_k(scores, args.keep, per_type=args.per_type)

    # Importance pruning means "this model with that head mask": kept heads fully open even if
    # the model has trained gates. Gate pruning keeps the kept heads' gate values.
    choose_mask = with_prune_unit(choose_mask, args)
    # kv-group: the whole-group head mask (kept groups fully open), which may differ from what
    # the gates decided head by head
    override = bool(args.from_importance) or args.prune_unit == "kv-group"
    result = prune_checkpoint(args.path, args.out, choose_mask, override_gates=override)
    print(format_prune_result(result))
    print(choose_mask.costs)
    print(f"wrote {args.out}")
    return 0


def with_prune_unit(choose_by_head, args):
    """The mask of --prune-unit (kv-group: whole groups), and the attention costs before and
    after it (params, FLOPs, KV-cache bytes) as the `costs` attribute once chosen."""
    from ..errors import CommandError
    from ..heads import heads_per_layer
    from ..pruning.gqa import attention_cost, format_costs, keep_top_k_groups, kv_groups, whole_group_mask

    if args.prune_unit == "kv-group" and args.per_type:
        raise CommandError("--per-type goes with --prune-unit query")

    def choose(model):
        if args.prune_unit == "query":
            mask = choose_by_head(model)
        elif args.from_importance:
            scores = read_head_scores(args.from_importance, args.metric)
            check_scores_match_model(scores, heads_per_layer(model), args.from_importance)
            mask = keep_top_k_groups(scores, kv_groups(model), args.keep)
        else:
            mask = whole_group_mask(choose_by_head(model), kv_groups(model))
        choose.costs = format_costs(attention_cost(model), attention_cost(model, mask), 1024)
        return mask

    choose.costs = ""
    return choose
