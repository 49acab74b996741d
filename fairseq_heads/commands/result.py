"""`fairseq-heads result`: a translation model's result file (recipes/README.md).

Argument parsing and wiring only; the work is in `fairseq_heads.report.model_result`.
"""
import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument("--metric", default=None,
                        help="for heuristic: the importance metric that chose its heads")
    parser.add_argument("--head-mask", default=None, metavar="MASK.json",
                        help="the head mask the model was trained with (default: the one "
                             "recorded in the checkpoint)")
    add_training_record_arguments(parser)
    parser.add_argument("--subset", default="test", help="the subset translated (default: %(default)s)")
    parser.add_argument("--results-dir", default=None, metavar="DIR",
                        help="paths in the file are relative to this folder (default: RESULTS for "
                             "--out RESULTS/results/NAME/result.json, else --out's folder)")


def add_training_record_arguments(parser: argparse.ArgumentParser) -> None:
    """How a model was trained, recorded in its result file (also `lm-result`'s)."""
    parser.add_argument("--protocol", default=None, choices=("quick", "converged"),
                        help="how an L0 or from_scratch model was trained (recipes/README.md); "
                             "default: not recorded (read as quick)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the training seed (a converged model's: its fine-tune's)")
    parser.add_argument("--baseline-seed", type=int, default=None,
                        help="the seed of the baseline the model comes from (the baseline's: its own)")
    parser.add_argument("--phase", action="append", default=[], metavar="NAME=VALIDATIONS.jsonl",
                        help="a training phase and its --validation-trace file (repeat, in order): "
                             "its update counts go into the result file")
    parser.add_argument("--plateau-validations", type=int, default=None, metavar="N",
                        help="the plateau rule of the phase named l0 (--stop-on-plateau), to "
                             "record where it held")
    parser.add_argument("--plateau-loss-tolerance", type=float, default=None, metavar="T")


def training_record(args) -> dict:
    """The result file's fields of add_training_record_arguments' options."""
    return {"protocol": args.protocol, "seed": args.seed, "baseline_seed": args.baseline_seed,
            "training": training_phases(args.phase, args.plateau_validations, args.plateau_loss_tolerance)}


def training_phases(phases, plateau_validations, plateau_loss_tolerance):
    """{"phases": {name: summary}, "updates": the sum over phases} from NAME=FILE arguments, or
    None without any."""
    from ..convergence import DEFAULT_LOSS_TOLERANCE, phase_summary, read_validations
    from ..errors import CommandError

    if not phases:
        return None
    summaries = {}
    for item in phases:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise CommandError(f"--phase must be NAME=VALIDATIONS.jsonl, got {item!r}")
        records = read_validations(path)
        if not records:
            raise CommandError(f"--phase {name}: no validation records in {path}")
        rule = plateau_validations if name == "l0" else None
        tolerance = DEFAULT_LOSS_TOLERANCE if plateau_loss_tolerance is None else plateau_loss_tolerance
        summaries[name] = phase_summary(records, rule, tolerance)
    return {"phases": summaries, "updates": sum(s["updates"] for s in summaries.values())}


def run(args) -> int:
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
    result.update(training_record(args))
    if args.kind == "heuristic":
        result["metric"] = args.metric
    write_model_result(result, args.out)
    kept = " ".join(f"{t} {result['heads_kept'][t]}/{result['heads_total'][t]}" for t in result["heads_kept"])
    print(f"{args.name}: BLEU {result['bleu']:.2f}  heads kept {kept}; wrote {args.out}")
    return 0
