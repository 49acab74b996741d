"""The report's tables as rows, from already-loaded result files (pure functions, no I/O).

One module per family of tables, each a set of builders that return a `Table` (columns + rows
of cells) or raise `MissingInput` saying what is missing, so the report can skip it with that
note:

    table_basics      Table, MissingInput, the headline models, protocol / λ labels, markdown
    pruning_tables    (1) encoder heads kept vs the curve, (2) all types, (3) what goes first
    scratch_tables    trained vs from scratch, pruning costs, paired-bootstrap differences
    function_tables   (4) head functions (in domain and on the parsed set), (5) agreement, (7) survivors
    trace_tables      (6) heads dying over training

This module offers them all under one name (`tables.headline`, `tables.all_types_table`, ...),
the way build.py and the tests read them.
"""
from .function_tables import (  # noqa: F401
    GATED_TYPES,
    agreement_table,
    domain_function_table,
    domain_importance_table,
    function_counts,
    head_function_table,
    head_level_interval,
    survivor_counts,
    survivor_functions,
    syntactic_relation_table,
)
from .pruning_tables import (  # noqa: F401
    all_types_table,
    curve_points,
    encoder_pruning_table,
    encoder_sweep_points,
    first_losses,
    heads_kept_by_layer,
)
from .scratch_tables import (  # noqa: F401
    bleu_difference_table,
    control_model,
    pruning_cost_table,
    seed_summary_table,
    trained_vs_scratch_table,
)
from .table_basics import (  # noqa: F401
    NO_FUNCTION,
    QUICK_NOTE,
    TRANSLATION_FUNCTIONS,
    MissingInput,
    Table,
    baseline_result,
    by_kind,
    format_cell,
    format_lambda,
    head_functions,
    headline,
    lambda_texts,
    markdown_table,
    protocol_and_seed,
    protocol_label,
)
from .trace_tables import (  # noqa: F401
    open_heads_series,
    trace_label,
    trace_series,
    trace_summary,
    with_final_gates,
)
