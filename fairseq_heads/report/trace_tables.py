"""Heads dying over training (6): P(open) per head and open heads per type from a gate trace
(the records `--gate-trace` writes, tasks/head_hooks.py), and the labels of traced runs.
"""
from typing import Dict, List, Sequence, Tuple

from ..heads import ATTENTION_TYPES
from .layout import CONVERGED, QUICK, protocol_of
from .table_basics import MissingInput, Table, format_lambda, protocol_label


# ------------------------------------------------------------------ (6) gate trace


def trace_series(trace: Sequence[dict]) -> Dict[Tuple[str, int, int], Tuple[List[int], List[float]]]:
    """{(type, layer, head): (updates, P(open))} from gate-trace records, by update."""
    if not trace:
        raise MissingInput("empty gate trace")
    series: Dict[Tuple[str, int, int], Tuple[List[int], List[float]]] = {}
    for record in sorted(trace, key=lambda r: r["update"]):
        for head in record["heads"]:
            updates, values = series.setdefault((head["type"], head["layer"], head["head"]), ([], []))
            updates.append(int(record["update"]))
            values.append(float(head["p_open"]))
    return series


def with_final_gates(trace: Sequence[dict], result: dict) -> List[dict]:
    """The trace plus the gates of the model's final checkpoint (from its result file) as a last
    record: fairseq's trace is written before an update, so it misses where training ended."""
    records = list(trace)
    last = max((r["update"] for r in records), default=-1)
    if result.get("updates") is None or result["updates"] <= last or not result.get("p_open"):
        return records
    heads = [{"type": t, "layer": layer, "head": head, "p_open": p}
             for t, rows in result["p_open"].items() for layer, row in enumerate(rows)
             for head, p in enumerate(row) if p is not None]
    return records + [{"update": result["updates"], "heads": heads}]


def open_heads_series(trace: Sequence[dict]) -> Tuple[List[int], Dict[str, List[int]]]:
    """(updates, {attention type: open heads at each}) from gate-trace records: the heads the
    head-keeping rule keeps ("open"; P(open) >= 0.5 in a record without it)."""
    if not trace:
        raise MissingInput("empty gate trace")
    updates, counts = [], {}
    records = sorted(trace, key=lambda r: r["update"])
    types = [t for t in ATTENTION_TYPES if any(h["type"] == t for r in records for h in r["heads"])]
    for record in records:
        updates.append(int(record["update"]))
        for attention_type in types:
            counts.setdefault(attention_type, []).append(sum(
                int(h.get("open", h["p_open"] >= 0.5)) for h in record["heads"] if h["type"] == attention_type))
    return updates, counts


def trace_label(result: dict, trace: Sequence[dict] = ()) -> str:
    """λ, protocol and gate lr of a traced run; "L0 phase" for one whose model has no result
    file yet, "still running at update N" (the trace's last record) for one that has not
    finished (results_folder.unfinished_l0_phases)."""
    scale = result.get("gate_lr_scale")
    phase = {"l0": ", L0 phase (no BLEU yet)",
             "l0-running": ", L0 phase still running at update "
                           + str(max((r["update"] for r in trace), default="?"))}
    # a quick run says its length; a converged run's seed is added by the caller where it is not 1
    protocol = protocol_label(result) if protocol_of(result) == QUICK else CONVERGED
    return (f"λ={format_lambda(result['l0_lambda'])}, {protocol}"
            + (f", gate lr ×{scale:g}" if scale is not None else "")
            + phase.get(result.get("phase"), ""))


def trace_summary(series) -> Table:
    """Per attention type: heads traced, and heads with P(open) < 0.5 at the first and last record."""
    rows = []
    for attention_type in ATTENTION_TYPES:
        heads = [values for (t, _, _), (_, values) in series.items() if t == attention_type]
        if heads:
            rows.append([attention_type, len(heads), sum(v[0] < 0.5 for v in heads),
                         sum(v[-1] < 0.5 for v in heads)])
    return Table(["type", "heads", "P(open) < 0.5 at start", "P(open) < 0.5 at end"], rows)
