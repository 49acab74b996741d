"""Per-head gate values read straight from a checkpoint's state dict (no model is built)."""
import json
import re
from typing import Dict, List, NamedTuple, Optional

import torch


from ..heads import attention_type_of
from ..checkpoints import model_args
from .head_target import heads_kept, target_from_counts
from .hard_concrete import (
    DEFAULT_STRETCH,
    DEFAULT_TEMPERATURE,
    deterministic_gates,
    prob_nonzero,
)

_GATE_KEY = re.compile(r"^(?P<module>.*)\.gate\.log_alpha$")


class GateRow(NamedTuple):
    attention_type: str
    layer: int
    head: int
    log_alpha: float
    p_open: float
    gate: float
    kept: bool


def gate_rows(state: dict) -> List[GateRow]:
    """One row per gated head of a checkpoint's state dict, by (type, layer, head), with the
    kept decision of the head-keeping rule (head_target.py)."""
    args = model_args(state)

    def option(name, default):
        value = getattr(args, name, None) if args is not None else None
        return default if value is None else value

    temperature = option("gate_temperature", DEFAULT_TEMPERATURE)
    low = option("gate_stretch_low", DEFAULT_STRETCH[0])
    high = option("gate_stretch_high", DEFAULT_STRETCH[1])
    gates = []  # (type, layer, log_alpha) in state-dict (= model) order, as the top-K rule needs
    for key, log_alpha in state["model"].items():
        match = _GATE_KEY.match(key)
        address = attention_type_of(match.group("module")) if match else None
        if address is not None:
            gates.append((address[0], address[1], log_alpha.float()))
    kept = heads_kept([(t, log_alpha) for t, _, log_alpha in gates],
                      recorded_head_target(state["model"]), low, high)
    rows = []
    for (attention_type, layer, log_alpha), keep in zip(gates, kept):
        group_of = kv_group_of_heads(args, attention_type, layer)
        if group_of is not None:  # one gate per KV group (gated_llama --prune-unit kv-group)
            index = torch.tensor(group_of)
            log_alpha, keep = log_alpha.index_select(0, index), keep.index_select(0, index)
        for head, (a, p, g, k) in enumerate(zip(log_alpha.tolist(),
                                                prob_nonzero(log_alpha, temperature, low, high).tolist(),
                                                deterministic_gates(log_alpha, low, high).tolist(),
                                                keep.tolist())):
            rows.append(GateRow(attention_type, layer, head, a, p, g, bool(k)))
    order = {"enc-self": 0, "dec-self": 1, "enc-dec": 2}
    return sorted(rows, key=lambda r: (order[r.attention_type], r.layer, r.head))


def kv_group_of_heads(args, attention_type: str, layer: int) -> Optional[List[int]]:
    """Under --prune-unit kv-group (a gate per KV group), the gate of each query head of the
    block: its group among the groups the block keeps (a pruned layout keeps some); else None."""
    def option(name):
        return getattr(args, name, None) if args is not None else None

    if option("prune_unit") != "kv-group":
        return None
    heads, kv_heads = option("decoder_attention_heads"), option("decoder_kv_heads") or option("decoder_attention_heads")
    original = list(range(heads))
    if option("head_layout"):
        original = json.loads(option("head_layout"))[attention_type][layer]
    groups = [h // (heads // kv_heads) for h in original]
    kept_groups = sorted(set(groups))
    return [kept_groups.index(g) for g in groups]


def recorded_head_target(model_state: dict) -> Optional[Dict[str, int]]:
    """The --target-heads a checkpoint recorded (see head_target.HeadTargetRecord), or None."""
    counts = model_state.get("head_target_record.counts")
    return None if counts is None else target_from_counts(counts.tolist())


def format_gate_table(rows: List[GateRow]) -> str:
    lines = [f"{'type':<9} {'layer':>5} {'head':>4} {'log_alpha':>9} {'P(open)':>8} {'gate':>6}  kept"]
    for r in rows:
        kept = "yes" if r.kept else "no"
        lines.append(f"{r.attention_type:<9} {r.layer:>5} {r.head:>4} {r.log_alpha:>9.3f} "
                     f"{r.p_open:>8.4f} {r.gate:>6.3f}  {kept}")
    totals = {}
    for r in rows:
        kept, total = totals.get(r.attention_type, (0, 0))
        totals[r.attention_type] = (kept + r.kept, total + 1)
    lines.append("heads kept: " + ", ".join(f"{t} {k}/{n}" for t, (k, n) in totals.items()))
    return "\n".join(lines)
