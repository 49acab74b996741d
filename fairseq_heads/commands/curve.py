"""`fairseq-heads curve`: BLEU (perplexity for a language model) as the lowest-scoring heads are
removed (Michel et al. 2019).

Argument parsing and wiring only; the work is in `fairseq_heads.pruning.curve`.
"""
import argparse
import os

from ..pruning.importance import METRICS
from .device_options import add_device_and_batch_arguments, device_and_batch
from .lm_blocks import add_lm_block_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `fairseq-heads curve`."""
    parser.add_argument("data", metavar="DATA_BIN", help="fairseq data-bin directory")
    parser.add_argument("--path", required=True, metavar="CHECKPOINT", help="model checkpoint")
    parser.add_argument("--scores", required=True, metavar="HEADS.csv",
                        help="per-head scores: columns type,layer,head,<metric>")
    parser.add_argument("--metric", required=True, metavar="|".join(METRICS), help="score column")
    parser.add_argument("--steps", required=True, metavar="N,N,...",
                        help="increasing numbers of heads removed at which to measure BLEU, e.g. 0,4,8,16")
    parser.add_argument("--types", metavar="TYPES", default=None,
                        help="comma list of the attention types whose heads the curve removes "
                             "(enc-self, dec-self, enc-dec); the others are kept whole and not "
                             "counted (default: every type in the scores)")
    parser.add_argument("--rescore", action="store_true",
                        help="after each step, re-score the remaining heads with the gradient metric")
    parser.add_argument("--rescore-subset", default="valid",
                        help="subset the re-scoring gradients are taken on (default: %(default)s; "
                             "not the one BLEU is measured on)")
    parser.add_argument("--out", default="pruning_curve.csv", metavar="CURVE.csv",
                        help="CSV output; the plot goes next to it as .png (default: %(default)s)")
    parser.add_argument("--overlay", metavar="L0_POINTS.csv",
                        help="also plot L0-pruned models: columns heads_kept,bleu,label")
    parser.add_argument("--gen-subset", default="test", help="subset to translate (default: %(default)s)")
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N sentences of the subset")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--max-len-b", type=int, default=200, metavar="N",
                        help="longest hypothesis in tokens, as fairseq-generate (default: %(default)s)")
    parser.add_argument("--remove-bpe", default="sentencepiece",
                        help="fairseq's --remove-bpe before BLEU (default: %(default)s; 'none' to keep)")
    parser.add_argument("--source-lang", "-s", default=None)
    parser.add_argument("--target-lang", "-t", default=None)
    parser.add_argument("--prune-unit", choices=("query", "kv-group"), default="query",
                        help="kv-group: remove the KV groups of a grouped-query model whole "
                             "(scored by their heads' mean; --steps count groups). "
                             "Default: %(default)s")
    add_lm_block_arguments(parser)
    add_device_and_batch_arguments(parser, max_tokens=None, batch_size=64)


def run(args) -> int:
    """Score the curve's steps, write CURVE.csv and its plot beside it (atomically)."""
    from ..checkpoints import (apply_lm_blocks, check_checkpoint_file, data_overrides,
                               is_language_model, load_model_and_task, load_state, place_model)
    from ..files import atomic_path, check_output_file
    from ..files import write_text_atomic
    from ..heads import heads_per_layer
    from ..pruning.curve import (
        curve_csv,
        parse_steps,
        plot_curve,
        pruning_curve,
        read_overlay,
    )
    from ..models.gated_transformer import parse_attention_types
    from ..pruning.importance import check_scores_match_model, read_head_scores

    types = parse_attention_types(args.types, "--types") if args.types else None
    device = device_and_batch(args)
    check_checkpoint_file(args.path)
    check_output_file(args.out, "--out")
    scores = read_head_scores(args.scores, args.metric, types)
    overlay = read_overlay(args.overlay) if args.overlay else []
    state = load_state(args.path, data_overrides(args.data, args.source_lang, args.target_lang))
    blocks = apply_lm_blocks(state, args.sample_break_mode, args.block_start)  # an LM's, as trained
    model, task = load_model_and_task(args.path, state=state)
    check_scores_match_model(scores, heads_per_layer(model), args.scores)
    place_model(model, device.cpu)
    group_size = 1
    if args.prune_unit == "kv-group":
        from ..errors import CommandError
        from ..pruning.gqa import curve_scores_by_group, kv_groups

        if args.rescore:
            raise CommandError("--rescore goes with --prune-unit query (it scores single heads)")
        scores, group_size = curve_scores_by_group(scores, kv_groups(model))
    steps = [group_size * s for s in parse_steps(
        args.steps, sum(len(r) for rows in scores.values() for r in rows) // group_size)]
    remove_bpe = None if args.remove_bpe == "none" else args.remove_bpe

    language_model = is_language_model(model)
    score_name = "perplexity" if language_model else "BLEU"

    def progress(point):
        print(f"heads removed {point.heads_removed:>3}  kept {point.heads_kept:>3}  "
              f"{score_name} {point.score:6.2f}", flush=True)

    with device.precision():
        points = pruning_curve(model, task, args.gen_subset, scores, steps, rescore=args.rescore,
                               beam=args.beam, batch_size=device.batch_size, remove_bpe=remove_bpe,
                               limit=args.limit, rescore_subset=args.rescore_subset, progress=progress,
                               max_len_b=args.max_len_b, max_tokens=device.max_tokens)
    write_text_atomic(args.out, curve_csv(points, language_model))
    png = os.path.splitext(args.out)[0] + ".png"
    with atomic_path(png) as tmp:
        plot_curve(points, tmp, f"{args.metric}{' (rescored)' if args.rescore else ''}", overlay,
                   score_name)
    print(f"{'score' if language_model else 'sacreBLEU signature'}: {points[0].signature}")
    if blocks is not None:
        print(f"blocks: --sample-break-mode {blocks.break_mode}, starting with "
              f"{'<s>' if blocks.block_start == 'bos' else '</s>'} ({blocks.chosen_by})")
    print(f"wrote {args.out} and {png}")
    return 0
