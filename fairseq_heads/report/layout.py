"""Where a recipe's results folder keeps what the report reads (paths relative to RESULTS_DIR).

    results/<model>/result.json   one per translation model (see model_result.py)
    results/<model>/generate.txt  its fairseq-generate output (for paired bootstrap tests; or
                                  generate.txt.gz, e.g. only its T- and D- lines, for archiving)
    models/<model>/gate_trace.jsonl   per-head gates over fine-tuning (the `--gate-trace` file;
                                  or gate_trace.jsonl.gz)
    models/<model>_l0/gate_trace.jsonl   the converged protocol's L0 phase of <model>: drawn
                                  while <model> has no result file yet (its fixed-mask phase or
                                  BLEU still to come); <model> names its settings (below)
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
import re
from typing import Optional

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


# ------------------------------------------------------------------ converged models by name
# The converged protocol names a model <enc|all>_l0_<λ>_conv_s<seed> (pipeline/nmt_converged.py;
# the bash recipes before it added _glr<scale> when its gate lr scale was not the recipe's
# default, as in docs/results/multi30k_en_de); its L0 phase is <model>_l0.
L0_PHASE_SUFFIX = "_l0"
_CONVERGED_NAME = re.compile(r"^(?P<side>enc|all)_l0_(?P<l0_lambda>[0-9.eE+-]+)_conv_s(?P<seed>[0-9]+)"
                             r"(?:_glr(?P<gate_lr_scale>[0-9.eE+-]+))?$")


def converged_model_settings(name: str) -> Optional[dict]:
    """The settings a converged model's name records: {"name", "kind", "l0_lambda", "seed",
    "protocol", "gate_lr_scale"} (scale None: the recipe's default, which the name leaves out),
    or None for a name the recipes do not give a converged L0 model."""
    match = _CONVERGED_NAME.match(name)
    if match is None:
        return None
    try:
        l0_lambda = float(match["l0_lambda"])
        scale = None if match["gate_lr_scale"] is None else float(match["gate_lr_scale"])
    except ValueError:
        return None
    return {"name": name, "kind": ENCODER_L0 if match["side"] == "enc" else ALL_L0,
            "l0_lambda": l0_lambda, "seed": int(match["seed"]), "protocol": CONVERGED,
            "gate_lr_scale": scale}
