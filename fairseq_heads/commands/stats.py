"""`fairseq-heads stats`: argument parsing and wiring only (`plot` redraws its figures: plot.py).

The work is in `fairseq_heads.stats` (run.py: the computation; output.py: the files).
"""
from __future__ import annotations

import argparse
import logging

from fairseq_heads.stats.labels import LabelThresholds, PAPER_THRESHOLDS
from fairseq_heads.stats.metrics.positional import DEFAULT_OFFSETS
from fairseq_heads.stats.streaming import DEFAULT_REPLICATES, DEFAULT_SEED

from .device_options import add_device_and_batch_arguments, device_and_batch
from .lm_blocks import add_lm_block_arguments

logger = logging.getLogger("fairseq_heads.stats")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `fairseq-heads stats` (metric thresholds, LM probes, bootstrap, batching)."""
    from fairseq_heads.stats import DEFAULT_METRICS, METRICS

    parser.add_argument("data", metavar="DATA_BIN", help="fairseq data-bin directory")
    parser.add_argument("--path", required=True, metavar="CHECKPOINT",
                        help="translation checkpoint (transformer or gated_transformer)")
    parser.add_argument("--gen-subset", default="valid", metavar="SUBSET",
                        help="data subset to score, teacher forced (default: %(default)s)")
    parser.add_argument("--out-dir", required=True, metavar="DIR",
                        help="where heads.csv, heads.json, agreement.json and *.png go")
    parser.add_argument("--metrics", default=None, metavar="LIST",
                        help=f"comma list of {', '.join(METRICS)} (default: "
                             f"{','.join(DEFAULT_METRICS)}, plus syntactic with --conllu)")
    parser.add_argument("--conllu", default=None, metavar="SRC.conllu",
                        help="gold parses of the source side, one per sentence in dataset order "
                             "(plain or .gz); enables the syntactic metric. For a language model: "
                             "of the subset's lines, one sentence a line (read with "
                             "--sample-break-mode eos; docs/metrics.md)")
    parser.add_argument("--lrp-normalise", choices=("step", "sentence"), default="sentence",
                        help="normalise head relevance per target position (the paper; one "
                             "backward per position) or per sentence (default: %(default)s)")
    parser.add_argument("--grad-normalise", choices=("none", "layer"), default="none",
                        help="gradient importance: raw, or divided by each layer's L2 norm "
                             "(Michel et al.) (default: %(default)s)")
    parser.add_argument("--offsets", default=None,
                        help="relative offsets for positional heads (default: "
                             f"{','.join(str(k) for k in DEFAULT_OFFSETS)}; for LMs -3,-2,-1,0)")
    parser.add_argument("--positional-threshold", type=float, default=PAPER_THRESHOLDS.positional)
    parser.add_argument("--rare-threshold", type=float, default=PAPER_THRESHOLDS.rare)
    parser.add_argument("--syntactic-margin", type=float, default=PAPER_THRESHOLDS.syntactic_margin)
    parser.add_argument("--rare-outside-top", default=None, metavar="N",
                        help="rare: score only sentences whose rarest token lies outside the N most "
                             "frequent types of the source dictionary's training counts (the paper: "
                             "500; default: every sentence)")
    lm = parser.add_argument_group("decoder-only language models")
    lm.add_argument("--previous-token-threshold", type=float, default=PAPER_THRESHOLDS.previous_token)
    lm.add_argument("--duplicate-token-threshold", type=float, default=PAPER_THRESHOLDS.duplicate_token)
    lm.add_argument("--induction-threshold", type=float, default=PAPER_THRESHOLDS.induction)
    lm.add_argument("--induction-lengths", default="16,32,64",
                    help="lengths L of the repeated random-token probes (default: %(default)s)")
    lm.add_argument("--induction-probes", type=int, default=64,
                    help="probes per length (default: %(default)s)")
    lm.add_argument("--icl-positions", default="50,500", metavar="EARLY,LATE",
                    help="natural_icl: loss at position LATE minus loss at EARLY of the subset's "
                         "blocks (Olsson et al.; default: %(default)s; NaN, with the reason, when "
                         "the model's context is shorter)")
    parser.add_argument("--bootstrap-replicates", type=int, default=DEFAULT_REPLICATES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    parser.add_argument("-s", "--source-lang", default=None)
    parser.add_argument("-t", "--target-lang", default=None)
    parser.add_argument("--log-format", default=None, choices=("none", "simple", "tqdm", "json"),
                        help="fairseq progress bar format")
    add_lm_block_arguments(parser)
    add_device_and_batch_arguments(parser, max_tokens=4096, batch_size=None)


def _integers(value: str, option: str):
    """'-1,0,1' -> (-1, 0, 1): a comma list of integers (--offsets, --induction-lengths, ...)."""
    try:
        return tuple(int(k) for k in value.split(",") if k.strip())
    except ValueError:
        raise ValueError(f"{option}: expected a comma list of integers, got {value!r}") from None


def _rank(value, option: str):
    """A frequency rank N >= 1 (or None when the option is not given)."""
    if value is None:
        return None
    try:
        rank = int(value)
    except ValueError:
        rank = 0
    if rank < 1:
        raise ValueError(f"{option}: expected a frequency rank, an integer >= 1, got {value!r}")
    return rank


def run(args) -> int:
    """Check the inputs (one line each, before any model is loaded), compute and write DIR."""
    import fairseq_heads  # noqa: F401  (registers the user dir: model, task, criterion)
    from fairseq_heads import stats

    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                        level=logging.INFO)
    # Bad input fails here, in one line naming the option or file, before a model is loaded or run.
    device = device_and_batch(args)
    stats.check_inputs(args.out_dir, args.path, args.conllu)
    metrics = stats.parse_metrics(args.metrics) if args.metrics else None
    options = stats.StatsOptions(
        conllu=args.conllu, lrp_normalise=args.lrp_normalise, grad_normalise=args.grad_normalise,
        offsets=_integers(args.offsets, "--offsets") if args.offsets else None,
        induction_lengths=_integers(args.induction_lengths, "--induction-lengths"),
        induction_probes=args.induction_probes,
        icl_positions=_integers(args.icl_positions, "--icl-positions"),
        rare_outside_top=_rank(args.rare_outside_top, "--rare-outside-top"),
        thresholds=LabelThresholds(args.positional_threshold, args.rare_threshold,
                                   args.syntactic_margin, args.previous_token_threshold,
                                   args.duplicate_token_threshold, args.induction_threshold),
        replicates=args.bootstrap_replicates, seed=args.seed, max_tokens=device.max_tokens,
        batch_size=device.batch_size, cpu=device.cpu, autocast=device.autocast, source_lang=args.source_lang,
        target_lang=args.target_lang, log_format=args.log_format, metrics=metrics,
        sample_break_mode=args.sample_break_mode, block_start=args.block_start)
    statistics = stats.compute_head_statistics(args.data, args.path, args.gen_subset, options)
    written = stats.write_statistics(statistics, args.out_dir)
    logger.info("%d heads, %d sentences; wrote %d files to %s", len(statistics.rows),
                statistics.meta["sentences"], len(written), args.out_dir)
    counts = statistics.meta.get("rare_counts")
    if counts:  # which frequencies rare-word heads were found by (heads.json meta: rare_counts)
        print(f"rare: token frequencies from the {counts['source']} ({', '.join(counts['files'])}, "
              f"{counts['tokens']} tokens)")
    return 0
