"""Choose heads from per-head importance scores (the `fairseq-heads stats` CSV).

A scores file has one row per head with at least the columns type, layer, head and one column
per metric (higher = more important), as `fairseq-heads stats` writes heads.csv; other columns
(confidence intervals, counts, labels) are ignored. Heads are ranked by the chosen
metric; ties keep the earlier (type, layer, head) first.
"""
import math
import os
from typing import Collection, Dict, List, Mapping, Optional, Tuple

import torch

from ..heads import ATTENTION_TYPES
from ..gating.hard_concrete import top_k_mask
from ..stats.table import KEY_COLUMNS, iter_csv, parse_number
from .physical import HeadPruningError

METRICS = ("lrp", "grad", "confidence")
REQUIRED_COLUMNS = KEY_COLUMNS

HeadScores = Dict[str, List[List[float]]]  # type -> per layer, one score per head


def read_head_scores(path: str, metric: str, types: Optional[Collection[str]] = None) -> HeadScores:
    """{type: per layer, one `metric` score per head} from a scores CSV (module doc); every
    head of a scored type must have a number (HeadPruningError naming the line otherwise).

    types (`--types`): only the rows of these attention types are read (each must have rows);
    the others are neither ranked nor pruned, and their cells are not checked."""
    if metric not in METRICS:
        raise HeadPruningError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if not os.path.isfile(path):
        raise HeadPruningError(f"scores file not found: {path}")
    columns, rows = iter_csv(path)
    missing = [c for c in (*REQUIRED_COLUMNS, metric) if c not in columns]
    if missing:
        raise HeadPruningError(f"{path}: missing column(s) {missing} (has {columns})")
    cells: Dict[str, Dict[Tuple[int, int], float]] = {}
    in_file = []  # the attention types of the file, in order, read or not
    for line, row in rows:
        try:
            attention_type = row["type"]
            if attention_type not in ATTENTION_TYPES:
                raise ValueError(f"unknown attention type {attention_type!r}")
            if attention_type not in in_file:
                in_file.append(attention_type)
            if types is not None and attention_type not in types:
                continue
            address = (int(row["layer"]), int(row["head"]))
            score = parse_number(row[metric])  # `stats` leaves a cell empty for NaN
        except (TypeError, ValueError) as error:
            raise HeadPruningError(f"{path}:{line}: {error}") from None
        if math.isnan(score):
            raise HeadPruningError(f"{path}:{line}: no {metric} value (empty or NaN) for "
                                   f"{attention_type} layer {address[0]} head {address[1]}")
        if address in cells.setdefault(attention_type, {}):
            raise HeadPruningError(f"{path}:{line}: duplicate row for {attention_type} {address}")
        cells[attention_type][address] = score
    if types is not None:
        missing = [t for t in sorted(types) if t not in cells]
        if missing:
            raise HeadPruningError(f"{path}: no scores for --types {', '.join(missing)} "
                                   f"(the file has {', '.join(in_file) or 'none'})")
    if not cells:
        raise HeadPruningError(f"{path}: no heads")
    scores: HeadScores = {}
    for attention_type, by_head in cells.items():
        layers = max(layer for layer, _ in by_head) + 1
        rows = [[by_head[a] for a in sorted(a for a in by_head if a[0] == layer)] for layer in range(layers)]
        if any(sorted(h for l, h in by_head if l == layer) != list(range(len(rows[layer])))
               for layer in range(layers)):
            raise HeadPruningError(f"{path}: {attention_type} rows do not cover layers 0..{layers - 1} "
                                   f"with heads 0..H-1 each")
        scores[attention_type] = rows
    return scores


def check_scores_match_model(scores: HeadScores, model_heads: Mapping[str, List[int]], source: str) -> None:
    """The scores must describe exactly this model's heads (same layers, same heads per layer)."""
    for attention_type, rows in scores.items():
        shape = [len(r) for r in rows]
        if attention_type not in model_heads or shape != list(model_heads[attention_type]):
            raise HeadPruningError(
                f"{source}: scores are for a different model: {attention_type} heads per layer "
                f"{shape}, the model has {model_heads.get(attention_type, 'no such attention')}")


def keep_top_k(scores: HeadScores, k: int, per_type: bool = False) -> Dict[str, List[torch.Tensor]]:
    """Head mask keeping the k highest-scoring heads in total (or k of each scored type).
    Types without scores are not in the mask (kept whole)."""
    groups = [[t] for t in scores] if per_type else [list(scores)]
    mask: Dict[str, List[torch.Tensor]] = {}
    for types in groups:
        flat = torch.tensor([s for t in types for row in scores[t] for s in row], dtype=torch.float64)
        if not 0 <= k <= flat.numel():
            where = f"{types[0]} has" if per_type else "the scores cover"
            raise HeadPruningError(f"--keep {k}: {where} {flat.numel()} heads")
        keep = top_k_mask(flat, k).tolist()
        for t in types:
            mask[t] = []
            for row in scores[t]:
                mask[t].append(torch.tensor(keep[:len(row)], dtype=torch.bool))
                keep = keep[len(row):]
    return mask
