"""What every table of the report shares: `Table`, `MissingInput`, the headline models, the
protocol and lambda labels, and markdown. Pure functions over loaded result files (no I/O).

Inputs: `results`, a list of result-file dicts (fairseq_heads/report/model_result.py). The table
builders are grouped by what they answer: pruning_tables (heads kept, BLEU against the curve),
scratch_tables (trained vs from scratch, paired bootstrap), function_tables (head functions,
agreement, survivors), trace_tables (gates over training); `tables` offers them all.
"""
from typing import Dict, Iterable, List, NamedTuple, Sequence, Tuple

from ..numbers import format_number
from ..stats.table import label_kind, parse_labels
from .layout import ALL_L0, BASELINE, CONVERGED, ENCODER_L0, FROM_SCRATCH, QUICK, protocol_of, seed_label, seeds_of

TRANSLATION_FUNCTIONS = ("positional", "syntactic", "rare")  # a translation head's function: heads.csv labels
NO_FUNCTION = "none"


QUICK_NOTE = ("quick protocol: a short L0 fine-tune of a fixed number of updates, the earlier "
              "protocol; not comparable with the converged rows")


class MissingInput(Exception):
    """A table or figure cannot be made: its inputs are missing (the message says which)."""


class Table(NamedTuple):
    columns: List[str]
    rows: List[List[object]]
    note: str = ""


# ------------------------------------------------------------------ helpers


def by_kind(results: Iterable[dict], kind: str) -> List[dict]:
    """The results of one kind, by increasing L0 lambda (None first)."""
    chosen = [r for r in results if r.get("kind") == kind]
    return sorted(chosen, key=lambda r: (r.get("l0_lambda") is not None, r.get("l0_lambda") or 0.0))


def headline(results: Sequence[dict]) -> List[dict]:
    """The results the tables lead with: one model per (kind, λ) - the converged protocol's if
    there is one, else the quick one; among those, the gate learning rate most of them were
    trained at (the tables' setting) and the lowest (baseline seed, seed). From-scratch models
    follow the model their layout came from. The others appear in their own rows (quick protocol, seeds, traces)."""
    trained = [r for r in results if r.get("kind") in (ENCODER_L0, ALL_L0)]
    # the usual scale among the converged models if there are any (older files record none)
    scales = ([r.get("gate_lr_scale") for r in trained if protocol_of(r) == CONVERGED]
              or [r.get("gate_lr_scale") for r in trained])
    usual_scale = max(set(scales), key=lambda v: (scales.count(v), -(v or 0))) if scales else None

    def preference(result):
        return (protocol_of(result) != CONVERGED, result.get("gate_lr_scale") != usual_scale,
                seeds_of(result), result["name"])

    chosen: Dict[Tuple[str, object], dict] = {}
    for result in sorted(trained, key=preference):
        chosen.setdefault((result["kind"], result.get("l0_lambda")), result)
    names = {r["name"] for r in chosen.values()}
    scratch = [r for r in results if r.get("kind") == FROM_SCRATCH and r.get("from_model") in names]
    return [r for r in results if r.get("kind") == BASELINE] + list(chosen.values()) + scratch


def protocol_and_seed(result: dict) -> str:
    """'converged, seed 2' / 'converged, seed 2/b3' (baseline seed 3) / 'quick' (the LM tables'
    protocol column, beside their own updates column)."""
    return f"converged, seed {seed_label(result)}" if protocol_of(result) == CONVERGED else QUICK


def protocol_label(result: dict) -> str:
    """protocol_and_seed, a quick run with its updates: 'quick, 150 updates' (the translation
    tables' protocol column)."""
    if protocol_of(result) == QUICK and result.get("updates") is not None:
        return f"quick, {result['updates']} updates"
    return protocol_and_seed(result)


def baseline_result(results: Iterable[dict]) -> dict:
    found = by_kind(results, BASELINE)
    if not found:
        raise MissingInput("no baseline result (results/baseline/result.json)")
    return min(found, key=seeds_of)  # several baselines (a run per seed): seed 1's


def lambda_texts(results: Sequence[dict]) -> List[str]:
    """Each result's lambda as the column and row labels print it; where the results mix
    protocols, each says its own ("0.01 (quick)"), so a quick run's column cannot pass for a
    converged one."""
    mixed = len({protocol_of(r) for r in results}) > 1
    return [format_lambda(r["l0_lambda"]) + (f" ({protocol_of(r)})" if mixed else "") for r in results]


def format_lambda(value) -> str:
    return "-" if value is None else f"{value:g}"


def format_cell(value) -> str:
    return format_number(value, 2, "-")


def markdown_table(table: Table) -> str:
    lines = ["| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    for row in table.rows:
        lines.append("| " + " | ".join(format_cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)


def head_functions(labels: str) -> List[str]:
    """'positional(-1);syntactic(nsubj,dep->head);rare' -> ['positional', 'syntactic', 'rare']."""
    names = []
    for name in map(label_kind, parse_labels(labels)):
        if name in TRANSLATION_FUNCTIONS and name not in names:
            names.append(name)
    return names
