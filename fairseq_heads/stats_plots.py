"""Figures of the per-head table: layers x heads heatmaps and a function map (matplotlib, Agg).

Drawn from table rows only (see `fairseq-heads plot DIR`), never from the model.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import matplotlib

matplotlib.use("Agg")  # files only; no display on the machines this runs on
logging.getLogger("matplotlib").setLevel(logging.WARNING)  # its font search logs at DEBUG
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .modules.gated_attention import ATTENTION_TYPES  # noqa: E402

# (column, title, colour-scale range: None = the data's range)
HEATMAP_COLUMNS: Tuple[Tuple[str, str, Optional[Tuple[float, float]]], ...] = (
    ("confidence", "confidence (mean max attention)", (0.0, 1.0)),
    ("lrp", "LRP relevance (share of the layer)", None),
    ("grad", "gradient importance |dL/dxi|", None),
    ("positional_share", "positional: share at the best offset", (0.0, 1.0)),
    ("rare_share", "rare: share hitting the rarest token", (0.0, 1.0)),
    ("syntactic_best_gain", "syntactic: best accuracy - baseline", None),
    ("gate_p_open", "gate P(open)", (0.0, 1.0)),
)
FUNCTION_COLOURS = {"none": "#f0f0f0", "positional": "#4c72b0", "syntactic": "#55a868",
                    "rare": "#c44e52", "several": "#8172b2"}


def _grid(rows: Sequence[dict], attention_type: str, column: str) -> Optional[np.ndarray]:
    cells = [r for r in rows if r["type"] == attention_type]
    if not cells or column not in cells[0]:
        return None
    grid = np.full((max(r["layer"] for r in cells) + 1, max(r["head"] for r in cells) + 1), np.nan)
    for r in cells:
        value = r.get(column)
        grid[r["layer"], r["head"]] = np.nan if value is None else float(value)
    return None if np.isnan(grid).all() else grid


def draw_heatmap(grid: np.ndarray, title: str, path: str, value_range=None) -> None:
    layers, heads = grid.shape
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * heads, 0.8 + 0.45 * layers))
    low, high = value_range if value_range else (np.nanmin(grid), np.nanmax(grid))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=low, vmax=high, aspect="auto")
    for (layer, head), value in np.ndenumerate(grid):
        if not math.isnan(value):
            ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6,
                    color="white" if value < low + 0.5 * (high - low) else "black")
    ax.set_xticks(range(heads))
    ax.set_yticks(range(layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def function_of(labels: Sequence[str]) -> str:
    kinds = {label.split("(")[0] for label in labels}
    if not kinds:
        return "none"
    return kinds.pop() if len(kinds) == 1 else "several"


def _short(label: str) -> str:
    return (label.replace("positional", "pos").replace("syntactic", "syn")
            .replace("dep->head", "d>h").replace("head->dep", "h>d"))


def draw_function_map(rows: Sequence[dict], path: str) -> None:
    types = [t for t in ATTENTION_TYPES if any(r["type"] == t for r in rows)]
    fig, axes = plt.subplots(1, len(types), figsize=(4.5 * len(types), 4.0), squeeze=False)
    for ax, attention_type in zip(axes[0], types):
        cells = [r for r in rows if r["type"] == attention_type]
        layers = max(r["layer"] for r in cells) + 1
        heads = max(r["head"] for r in cells) + 1
        for r in cells:
            labels = r.get("labels") or []
            ax.add_patch(plt.Rectangle((r["head"] - 0.5, r["layer"] - 0.5), 1, 1,
                                       color=FUNCTION_COLOURS[function_of(labels)], ec="white"))
            if labels:
                ax.text(r["head"], r["layer"], "\n".join(_short(l) for l in labels[:3]),
                        ha="center", va="center", fontsize=5)
        ax.set_xlim(-0.5, heads - 0.5)
        ax.set_ylim(layers - 0.5, -0.5)
        ax.set_xticks(range(heads))
        ax.set_yticks(range(layers))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(attention_type)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in FUNCTION_COLOURS.values()]
    fig.legend(handles, list(FUNCTION_COLOURS), loc="lower center", ncol=len(FUNCTION_COLOURS),
               fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_figures(rows: Sequence[dict], meta: Dict[str, object], directory: str) -> List[str]:
    """heatmap_<column>_<type>.png for every metric column with values, and function_map.png."""
    paths = []
    for attention_type in ATTENTION_TYPES:
        for column, title, value_range in HEATMAP_COLUMNS:
            grid = _grid(rows, attention_type, column)
            if grid is None:
                continue
            path = os.path.join(directory, f"heatmap_{column}_{attention_type}.png")
            draw_heatmap(grid, f"{attention_type}: {title}", path, value_range)
            paths.append(path)
    if rows:
        path = os.path.join(directory, "function_map.png")
        draw_function_map(rows, path)
        paths.append(path)
    return paths
