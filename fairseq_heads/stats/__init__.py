"""Per-head statistics (`fairseq-heads stats`, `fairseq-heads plot`): what each head does.

metrics/ (one file per statistic: definition + streaming accumulator, then its binding to the
run, registered there), syntax/ (CoNLL-U and subword alignment), streaming.py (ratios +
Poisson bootstrap), capture.py (what a forward pass shows of each head), registry.py (what a
binding is), collect.py (the batch loop), table.py (the heads table, its files), run.py (the
run), output.py + figures.py (the stats folder). docs/architecture.md draws the data flow; docs/metrics.md defines each metric.
"""
# Each metric registers its binding at the end of its file; this order is heads.csv's column
# order (a file imported by another, as lrp by grad, comes before it here too).
from .metrics import confidence, lrp, grad, positional, rare, syntactic  # noqa: F401
from .metrics import previous_token, duplicate_token, induction, natural_icl  # noqa: F401  (LMs)
from .options import DEFAULT_LM_OFFSETS, StatsOptions, default_metrics, parse_metrics  # noqa: F401
from .output import check_out_dir, redraw_figures, write_statistics  # noqa: F401
from .registry import LANGUAGE_MODEL, Metric, StatsError, metric, metric_names, register, unregister  # noqa: F401
from .run import HeadStatistics, check_inputs, compute_head_statistics  # noqa: F401
from .table import HeadTable, read_json  # noqa: F401

METRICS = metric_names()  # the built-in metrics, in heads.csv column order
LM_METRICS = tuple(m for m in METRICS if metric(m).model_kinds == (LANGUAGE_MODEL,))
DEFAULT_METRICS = default_metrics(StatsOptions(), language_model=False)  # + syntactic with --conllu
