"""`fairseq-heads mask`, `result` and `report`: the recipes' small steps (recipes/README.md).

Argument parsing and wiring only; the work is in `fairseq_heads.head_masks` and
`fairseq_heads.report`.
"""
import argparse
import os


def add_mask_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", required=True, metavar="CHECKPOINT", help="a gated_transformer checkpoint")
    parser.add_argument("--out", required=True, metavar="MASK.json",
                        help="head mask JSON (for --head-mask), written atomically")


def run_mask(args) -> int:
    from ..atomic import check_output_file
    from ..cli import CommandError
    from ..compat import load_checkpoint
    from ..head_masks import head_mask_from_gates, save_head_mask
    from ..models.gated_transformer import iter_gates
    from ..pruning.checkpoint import build_model_from_state, checkpoint_model_options

    if not os.path.isfile(args.path):
        raise CommandError(f"checkpoint not found: {args.path}")
    check_output_file(args.out, "--out")
    state = load_checkpoint(args.path)
    model = build_model_from_state(state, checkpoint_model_options(state))
    if not any(True for _ in iter_gates(model)):
        raise CommandError(f"{args.path}: no gated heads in this checkpoint")
    mask = head_mask_from_gates(model)
    save_head_mask(mask, args.out)
    kept = ", ".join(f"{t} {int(m.sum())}/{m.numel()}" for t, m in mask.items())
    print(f"heads kept: {kept}; wrote {args.out}")
    return 0


def add_result_arguments(parser: argparse.ArgumentParser) -> None:
    from ..report.layout import KINDS

    parser.add_argument("generate_output", metavar="GENERATE.txt",
                        help="stdout of fairseq-generate (with --remove-bpe) on a subset with references")
    parser.add_argument("--path", required=True, metavar="CHECKPOINT", help="the model that produced it")
    parser.add_argument("--out", required=True, metavar="RESULT.json", help="written atomically")
    parser.add_argument("--name", required=True, help="model name in the tables")
    parser.add_argument("--kind", required=True, choices=KINDS)
    parser.add_argument("--l0-lambda", type=float, default=None, help="the L0 lambda of an *_l0 model")
    parser.add_argument("--from-model", default=None, metavar="NAME",
                        help="for from_scratch: the model whose pruned layout was trained")
    parser.add_argument("--head-mask", default=None, metavar="MASK.json",
                        help="the head mask the model was trained with (default: the one "
                             "recorded in the checkpoint)")
    parser.add_argument("--subset", default="test", help="the subset translated (default: %(default)s)")
    parser.add_argument("--results-dir", default=None, metavar="DIR",
                        help="paths in the file are relative to this folder (default: RESULTS for "
                             "--out RESULTS/results/NAME/result.json, else --out's folder)")


def run_result(args) -> int:
    from ..atomic import check_output_file
    from ..report.model_result import build_model_result, results_dir_of, write_model_result

    if not os.path.isfile(args.generate_output):
        raise FileNotFoundError(f"fairseq-generate output not found: {args.generate_output}")
    check_output_file(args.out, "--out")
    result = build_model_result(args.name, args.kind, args.path, args.generate_output,
                                subset=args.subset, l0_lambda=args.l0_lambda,
                                from_model=args.from_model, head_mask_file=args.head_mask,
                                results_dir=args.results_dir or results_dir_of(args.out))
    write_model_result(result, args.out)
    kept = " ".join(f"{t} {result['heads_kept'][t]}/{result['heads_total'][t]}" for t in result["heads_kept"])
    print(f"{args.name}: BLEU {result['bleu']:.2f}  heads kept {kept}; wrote {args.out}")
    return 0


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="RESULTS_DIR", help="a recipe's results folder")
    parser.add_argument("--out-dir", default=None, metavar="DIR",
                        help="where tables.md, report.html and figures/ go (default: RESULTS_DIR)")
    parser.add_argument("--trace-lambda", type=float, default=None, metavar="LAMBDA",
                        help="the all-types run whose gate trace to plot (default: the largest lambda)")
    parser.add_argument("--l0-points", default=None, metavar="L0_POINTS.csv",
                        help="only write the encoder-pruning points (heads_kept,bleu,label) for "
                             "`fairseq-heads curve --overlay`, then stop")


def run_report(args) -> int:
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
