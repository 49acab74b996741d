"""`fairseq-heads result`: a translation model's result file (recipes/README.md).

Argument parsing and wiring only; the work is in `fairseq_heads.report.model_result`.
"""
import argparse
import os


def add_result_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `fairseq-heads result`."""
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
    """Score a fairseq-generate output and write the model's result file."""
    from ..files import check_output_file
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
