"""The report's figures (matplotlib, Agg backend), each drawn into a given PNG path."""
from typing import Dict, List, Optional, Sequence, Tuple

from ..heads import ATTENTION_TYPES
from ..plotting import pyplot

TYPE_COLOURS = {"enc-self": "tab:blue", "dec-self": "tab:orange", "enc-dec": "tab:green"}


def _save(figure, path: str, **savefig_options) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=110, format="png", **savefig_options)
    pyplot().close(figure)


def encoder_pruning_figure(points: Sequence[Tuple[str, int, float]],
                           curve: Sequence[Tuple[int, float]], path: str,
                           more_curves: Optional[Dict[str, Sequence[Tuple[int, float]]]] = None) -> None:
    """BLEU against encoder heads kept: the L0 models as labelled points, the heuristic
    (Michel et al.) pruning curve as a line; with `more_curves` ({metric: points}) one line
    per importance metric instead."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    lines = {f" by {metric}": points_ for metric, points_ in (more_curves or {}).items()} or {"": curve}
    for (suffix, line), marker in zip(lines.items(), ("o-", "^--", "v:", "d-.")):
        if line:
            axes.plot([k for k, _ in line], [b for _, b in line], marker, color="tab:gray",
                      label=f"heuristic pruning (Michel et al.){suffix}")
    axes.plot([k for _, k, _ in points], [b for _, _, b in points], "s", color="tab:red",
              label="L0 gates, decoder frozen")
    for label, kept, bleu in points:
        axes.annotate(label, (kept, bleu), textcoords="offset points", xytext=(4, 4), fontsize=8)
    axes.set_xlabel("encoder heads kept")
    axes.set_ylabel("BLEU")
    axes.invert_xaxis()  # pruning proceeds left to right
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    _save(figure, path)


def heads_kept_figure(lambdas: Sequence[float], fractions: Dict[str, List[float]], path: str) -> None:
    """Fraction of each attention type's heads kept against the L0 lambda."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    positions = list(range(len(lambdas)))  # lambdas are spread over decades: equally spaced ticks
    for attention_type in ATTENTION_TYPES:
        if attention_type in fractions:
            axes.plot(positions, fractions[attention_type], "o-", color=TYPE_COLOURS[attention_type],
                      label=attention_type)
    axes.set_xticks(positions)
    axes.set_xticklabels([f"{value:g}" for value in lambdas])
    axes.set_xlabel("L0 λ")
    axes.set_ylabel("fraction of heads kept")
    axes.set_ylim(-0.05, 1.05)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    _save(figure, path)


def gate_trace_figure(series: Dict[Tuple[str, int, int], Tuple[List[int], List[float]]],
                      title: str, path: str) -> None:
    """Every head's P(open) against training updates, one panel per attention type."""
    plt = pyplot()
    types = [t for t in ATTENTION_TYPES if any(key[0] == t for key in series)]
    figure, panels = plt.subplots(1, len(types), figsize=(4 * len(types), 3.5), sharey=True, squeeze=False)
    for axes, attention_type in zip(panels[0], types):
        keys = sorted(key for key in series if key[0] == attention_type)
        layers = sorted({layer for _, layer, _ in keys})
        colours = plt.get_cmap("viridis", max(len(layers), 2))
        for key in keys:
            updates, values = series[key]
            axes.plot(updates, values, color=colours(layers.index(key[1])), alpha=0.7, linewidth=1)
        for index, layer in enumerate(layers):
            axes.plot([], [], color=colours(index), label=f"layer {layer}")
        axes.set_title(attention_type)
        axes.set_xlabel("update")
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    panels[0][0].set_ylabel("P(gate open)")
    figure.suptitle(title, fontsize=10)
    _save(figure, path)


def survivors_figure(labels: Sequence[str], counts: Dict[str, List[int]], path: str) -> None:
    """Open heads per function (stacked bars), one bar per L0 run."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(max(4, 1 + 0.8 * len(labels)), 4))
    bottom = [0] * len(labels)
    for name, values in counts.items():
        axes.bar(range(len(labels)), values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    axes.set_xticks(range(len(labels)))
    axes.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    axes.set_ylabel("open heads")
    axes.legend(fontsize=8)
    _save(figure, path)


def open_heads_figure(runs: Sequence[Tuple[str, List[int], Dict[str, List[int]]]], path: str) -> None:
    """Open heads (the head-keeping rule) against training updates, one panel per attention
    type, one line per traced run (label, updates, {type: open heads}): heads dying one by one
    show as a staircase, a bundle as a cliff."""
    plt = pyplot()
    types = [t for t in ATTENTION_TYPES if any(t in counts for _, _, counts in runs)]
    figure, panels = plt.subplots(1, len(types), figsize=(4 * len(types), 3.5), squeeze=False)
    for axes, attention_type in zip(panels[0], types):
        for label, updates, counts in runs:
            if attention_type in counts:
                axes.step(updates, counts[attention_type], where="post", label=label, linewidth=1.2)
        axes.set_title(attention_type)
        axes.set_xlabel("update")
        axes.grid(alpha=0.3)
    panels[0][0].set_ylabel("open heads")
    # one legend for all panels, below them: run labels are long and would cover the curves
    legend = {}
    for axes in panels[0]:
        for handle, label in zip(*axes.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    figure.legend(list(legend.values()), list(legend), loc="upper center", bbox_to_anchor=(0.5, 0.0),
                  fontsize=8, frameon=False)
    _save(figure, path, bbox_inches="tight")
