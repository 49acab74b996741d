"""Where a recipe's results folder keeps what the report reads (paths relative to RESULTS_DIR).

    results/<model>/result.json   one per translation model (see model_result.py)
    results/<model>/generate.txt  its fairseq-generate output (for paired bootstrap tests; or
                                  generate.txt.gz, e.g. only its T- and D- lines, for archiving)
    models/<model>/gate_trace.jsonl   per-head gates over fine-tuning (the `--gate-trace` file;
                                  or gate_trace.jsonl.gz)
    models/<model>_l0/gate_trace.jsonl   the converged protocol's L0 phase of <model>: drawn
                                  while <model> has no result file yet (its fixed-mask phase or
                                  BLEU still to come), with its settings from
                                  models/<model>_l0/settings.json (PHASE_SETTINGS, below)
    stats/baseline/heads.csv, agreement.json   `fairseq-heads stats` of the baseline
    stats/syntax/heads.csv        the baseline's syntactic heads on another, parsed set (PUD),
                                  when the statistics above ran on an unparsed one (in domain)
    stats/parsed_set/heads.csv    the statistics of stats/baseline computed on that parsed set
                                  too (syntax.compare), to compare the two sets
    curve/curve.csv               `fairseq-heads curve` of the baseline (encoder heads)
    curves/<metric>/curve.csv     the same, one per importance metric (the pipeline's recipes)
    speed/<model>/decode_speed.json   decoding speed of <model> pruned against masked
                                  (pruning/decode_speed.py; the converged recipe's speed steps)
    tables.md, report.html, figures/*.png   written by `fairseq-heads report`
"""
import os
from typing import Tuple

RESULTS = "results"
RESULT_FILE = "result.json"
GENERATE_OUTPUT = "generate.txt"
MODELS = "models"
GATE_TRACE = "gate_trace.jsonl"
BASELINE_STATS = os.path.join("stats", "baseline")
HEADS_CSV = "heads.csv"
AGREEMENT_JSON = "agreement.json"
SYNTAX_STATS = os.path.join("stats", "syntax")
PARSED_SET_STATS = os.path.join("stats", "parsed_set")
CURVE_CSV = os.path.join("curve", "curve.csv")
CURVES = "curves"
TABLES_MD = "tables.md"
REPORT_HTML = "report.html"
FIGURES = "figures"
SPEED = "speed"                      # speed/<model>/decode_speed.json (pruning/decode_speed.py)
DECODE_SPEED_JSON = "decode_speed.json"

# Model kinds of a result file: what the recipe trained, and how.
BASELINE = "baseline"          # the plain Transformer
ENCODER_L0 = "encoder_l0"      # encoder self-attention gated, decoder frozen, one L0 lambda
ALL_L0 = "all_l0"              # all three attention types gated, one L0 lambda
FROM_SCRATCH = "from_scratch"  # trained from random init with the heads of an *_l0 model fixed off
HEURISTIC = "heuristic"        # the top-K encoder heads of an importance metric (Michel et al.)
                               # fine-tuned as an L0 model's fixed-mask phase (report/michel.py)
KINDS = (BASELINE, ENCODER_L0, ALL_L0, FROM_SCRATCH, HEURISTIC)

# Training protocols of the *_l0 and from_scratch models (recipes/README.md); a result file
# without one is from before the converged protocol existed: quick.
QUICK = "quick"          # a fixed, short L0 fine-tune (FINETUNE_UPDATES)
CONVERGED = "converged"  # L0 until the plateau rule, then the fixed mask until --patience
PROTOCOLS = (QUICK, CONVERGED)


def protocol_of(result: dict) -> str:
    return result.get("protocol") or QUICK


# ------------------------------------------------------------------ a model's settings
# A result file records how its model was trained (`fairseq-heads result` / `lm-result`, called
# by the recipes' steps): "kind", "l0_lambda", "protocol", "seed" (the seed it trained with: a
# converged model's fine-tune seed; a quick model's and the baseline's, the baseline's seed),
# "baseline_seed" (the seed of the baseline it comes from, or is: one recipe run, `--set
# train.seed=N`), "from_model", "metric" (a heuristic model's importance metric) and
# "gate_lr_scale". The report reads them there, never from a model's name: names only have to
# be unique. An L0 phase without a result file yet records the same in PHASE_SETTINGS (below).
# Files from before "baseline_seed": a converged model's baseline is read as seed 1, any other's
# as its own seed (how the published folders were run); `python -m
# fairseq_heads.report.settings_migration FOLDER` writes the fields into such a folder.
PHASE_SETTINGS = "settings.json"   # models/<model>_l0/settings.json: that L0 phase's settings, "phase": "l0"


def training_seed(result: dict) -> int:
    """The seed the model trained with (a converged model's fine-tune seed)."""
    return result.get("seed") or 1


def baseline_seed(result: dict) -> int:
    """The seed of the baseline the model was fine-tuned from (the baseline's own seed)."""
    if result.get("baseline_seed") is not None:
        return result["baseline_seed"]
    if protocol_of(result) == CONVERGED and result.get("kind") != BASELINE:
        return 1
    return training_seed(result)


def seeds_of(result: dict) -> Tuple[int, int]:
    """(baseline seed, training seed): models of one pair are one run's and compare as such."""
    return baseline_seed(result), training_seed(result)


def seed_label(result: dict) -> str:
    """A model's seed as the tables print it: '2', or '2/b3' for seed 2 on baseline seed 3 (a
    converged model whose baseline is not seed 1; a quick model's seed is its baseline's)."""
    base, seed = seeds_of(result)
    return str(seed) if base == 1 or base == seed and protocol_of(result) != CONVERGED else f"{seed}/b{base}"
