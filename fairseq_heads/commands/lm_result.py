"""`fairseq-heads lm-result`: a language model's result file (perplexity on a subset + the heads
it has).

Argument parsing and wiring only; the work is in `fairseq_heads.pruning.lm_result`.
"""
import argparse
import os

from .device_options import add_device_and_batch_arguments, device_and_batch
from .lm_blocks import add_lm_block_arguments
from .result import add_training_record_arguments, training_record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `fairseq-heads lm-result`."""
    from ..pruning.lm_result import MODEL_KINDS

    parser.add_argument("data", metavar="DATA_BIN", help="the LM's data-bin")
    parser.add_argument("--path", required=True, metavar="CHECKPOINT", help="a (pruned) language model")
    parser.add_argument("--out", required=True, metavar="RESULT.json", help="written atomically")
    parser.add_argument("--name", required=True, help="model name in the tables")
    parser.add_argument("--kind", required=True, choices=MODEL_KINDS)
    parser.add_argument("--subset", default="test", help="subset scored (default: %(default)s)")
    parser.add_argument("--l0-lambda", type=float, default=None)
    parser.add_argument("--from-model", default=None, metavar="NAME",
                        help="for from_scratch: the model whose pruned layout was trained")
    parser.add_argument("--results-dir", default=None, metavar="DIR",
                        help="paths in the file are relative to this folder (default: RESULTS for "
                             "--out RESULTS/results/NAME/result.json, else --out's folder)")
    add_training_record_arguments(parser)
    add_lm_block_arguments(parser)
    add_device_and_batch_arguments(parser, max_tokens=None, batch_size=16)


def run(args) -> int:
    """Write one language model's result file (perplexity + the heads it has)."""
    from ..files import check_output_file
    from ..checkpoints import check_checkpoint_file
    from ..report.block_losses import BLOCK_LOSSES, write_block_losses
    from ..pruning.lm_result import lm_model_result, write_lm_result

    device = device_and_batch(args)
    check_checkpoint_file(args.path)
    check_output_file(args.out, "--out")
    if not os.path.isdir(args.data):
        raise FileNotFoundError(f"data directory not found: {args.data}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    results_dir = args.results_dir or (os.path.dirname(os.path.dirname(out_dir))
                                       if os.path.basename(os.path.dirname(out_dir)) == "results" else out_dir)
    with device.precision():
        result, blocks = lm_model_result(args.name, args.kind, args.path, args.data, args.subset, results_dir,
                                         l0_lambda=args.l0_lambda, from_model=args.from_model,
                                         batch_size=device.batch_size, max_tokens=device.max_tokens,
                                         cpu=device.cpu, break_mode=args.sample_break_mode,
                                         block_start=args.block_start)
    result.update(training_record(args))
    write_block_losses(blocks, os.path.join(out_dir, BLOCK_LOSSES))
    write_lm_result(result, args.out)
    print(f"{args.name}: perplexity {result['perplexity']:.2f} ({args.subset})  heads kept "
          f"{result['heads_kept']}/{result['heads_total']}; blocks: --sample-break-mode "
          f"{result['blocks']['sample_break_mode']}, starting with "
          f"{'<s>' if result['blocks']['block_start'] == 'bos' else '</s>'} "
          f"({result['blocks']['chosen_by']}); wrote {args.out}")
    return 0
