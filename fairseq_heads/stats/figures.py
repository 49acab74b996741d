"""Figures of the per-head table: layers x heads heatmaps and a function map (matplotlib, Agg).

Drawn from table rows only (see `fairseq-heads plot DIR`), never from the model.
"""
from __future__ import annotations

import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..heads import ATTENTION_TYPES
from ..plotting import pyplot
from . import registry
from . import table
from .table import heatmaps, label_kind

plt = pyplot()


def function_colours() -> Dict[str, str]:
    """Colour of each head function (label kind) in the function map, plus none and several."""
    return {"none": "#f0f0f0", **registry.label_colours(), "several": "#8172b2"}


def _grid(rows: Sequence[dict], attention_type: str, column: str) -> Optional[np.ndarray]:
    values = table.grid(rows, attention_type, column)
    if values is None:
        return None
    values = np.array(values, dtype=float)
    return None if np.isnan(values).all() else values


def draw_heatmaps(grids: Sequence[Tuple[str, np.ndarray]], title: str, path: str,
                  value_range=None) -> None:
    """One panel (layers x heads, values written in the cells) per attention type."""
    finite = np.concatenate([grid[~np.isnan(grid)] for _, grid in grids])
    low, high = value_range if value_range else (float(finite.min()), float(finite.max()))
    if high <= low:
        high = low + 1e-9
    width = sum(1.0 + 0.5 * grid.shape[1] for _, grid in grids) + 1.0
    height = 1.4 + 0.42 * max(grid.shape[0] for _, grid in grids)
    fig, axes = plt.subplots(1, len(grids), figsize=(width, height), squeeze=False)
    for ax, (attention_type, grid) in zip(axes[0], grids):
        layers, heads = grid.shape
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=low, vmax=high,
                          aspect="auto")
        for (layer, head), value in np.ndenumerate(grid):
            if not math.isnan(value):
                ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if value < low + 0.5 * (high - low) else "black")
        ax.set_xticks(range(heads))
        ax.set_yticks(range(layers))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(attention_type, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(left=0.08, right=0.88, bottom=0.15, top=0.82, wspace=0.3)
    fig.colorbar(image, cax=fig.add_axes((0.90, 0.15, 0.015, 0.67)))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def function_of(labels: Sequence[str]) -> str:
    kinds = {label_kind(label) for label in labels}
    if not kinds:
        return "none"
    return kinds.pop() if len(kinds) == 1 else "several"


def _short(label: str) -> str:
    for text, shorter in registry.label_abbreviations():
        label = label.replace(text, shorter)
    return label


def draw_function_map(rows: Sequence[dict], path: str) -> None:
    """function_map.png: each head coloured by its function (labels), a panel per type."""
    colours = function_colours()
    types = [t for t in ATTENTION_TYPES if any(r["type"] == t for r in rows)]
    fig, axes = plt.subplots(1, len(types), figsize=(4.5 * len(types), 4.0), squeeze=False)
    for ax, attention_type in zip(axes[0], types):
        cells = [r for r in rows if r["type"] == attention_type]
        layers = max(r["layer"] for r in cells) + 1
        heads = max(r["head"] for r in cells) + 1
        for r in cells:
            labels = r.get("labels") or []
            ax.add_patch(plt.Rectangle((r["head"] - 0.5, r["layer"] - 0.5), 1, 1,
                                       color=colours.get(function_of(labels), colours["several"]), ec="white"))
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
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    fig.legend(handles, list(colours), loc="lower center", ncol=len(colours),
               fontsize=8)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.2, top=0.9, wspace=0.3)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw_figures(rows: Sequence[dict], meta: Dict[str, object], directory: str) -> List[str]:
    """heatmap_<column>.png (a panel per attention type with values) and function_map.png."""
    paths = []
    for heatmap in heatmaps():
        grids = [(t, values) for t in ATTENTION_TYPES
                 for values in [_grid(rows, t, heatmap.column)] if values is not None]
        if not grids:
            continue
        path = os.path.join(directory, f"heatmap_{heatmap.column}.png")
        draw_heatmaps(grids, heatmap.title, path, heatmap.value_range)
        paths.append(path)
    if rows:
        path = os.path.join(directory, "function_map.png")
        draw_function_map(rows, path)
        paths.append(path)
    return paths
