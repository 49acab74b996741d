"""Per-head gate values read straight from a checkpoint's state dict (no model is built)."""
import math
import re
from typing import List, NamedTuple

import torch

from .modules.gated_attention import attention_type_of
from .modules.hard_concrete import (
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


def model_args(state: dict):
    """The model options of a fairseq checkpoint (hydra `cfg.model` or legacy `args`)."""
    cfg = state.get("cfg")
    if cfg is not None and cfg.get("model") is not None:
        return cfg["model"]
    return state.get("args")


def gate_rows(state: dict) -> List[GateRow]:
    args = model_args(state)

    def option(name, default):
        value = getattr(args, name, None) if args is not None else None
        return default if value is None else value

    temperature = option("gate_temperature", DEFAULT_TEMPERATURE)
    low = option("gate_stretch_low", DEFAULT_STRETCH[0])
    high = option("gate_stretch_high", DEFAULT_STRETCH[1])
    rows = []
    for key, log_alpha in state["model"].items():
        match = _GATE_KEY.match(key)
        address = attention_type_of(match.group("module")) if match else None
        if address is None:
            continue
        log_alpha = log_alpha.float()
        for head, (a, p, g) in enumerate(zip(log_alpha.tolist(),
                                             prob_nonzero(log_alpha, temperature, low, high).tolist(),
                                             deterministic_gates(log_alpha, low, high).tolist())):
            rows.append(GateRow(address[0], address[1], head, a, p, g))
    order = {"enc-self": 0, "dec-self": 1, "enc-dec": 2}
    return sorted(rows, key=lambda r: (order[r.attention_type], r.layer, r.head))


def format_gate_table(rows: List[GateRow]) -> str:
    lines = [f"{'type':<9} {'layer':>5} {'head':>4} {'log_alpha':>9} {'P(open)':>8} {'gate':>6}  kept"]
    for r in rows:
        kept = "yes" if r.gate > 0 else "no"
        lines.append(f"{r.attention_type:<9} {r.layer:>5} {r.head:>4} {r.log_alpha:>9.3f} "
                     f"{r.p_open:>8.4f} {r.gate:>6.3f}  {kept}")
    totals = {}
    for r in rows:
        kept, total = totals.get(r.attention_type, (0, 0))
        totals[r.attention_type] = (kept + (r.gate > 0), total + 1)
    lines.append("heads kept: " + ", ".join(f"{t} {k}/{n}" for t, (k, n) in totals.items()))
    return "\n".join(lines)
