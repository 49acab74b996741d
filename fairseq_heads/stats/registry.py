"""The metric registry: one `Metric` spec per per-head statistic, in heads.csv column order.

A spec says which attention types the metric covers, what it needs from the forward pass, how
to make and feed its accumulator, and what it puts in the heads table (columns, per-head cells,
labels, run metadata, a heatmap). `collect.py` runs the specs, `table.py` lays out their
columns, `figures.py` draws their heatmaps: none of them names a metric. The built-in specs are
in `builtin.py`; a new metric is one file under `metrics/` and one `register(Metric(...))`.

What `needs` means, and what the spec's callbacks receive:
- WEIGHTS: the attention probabilities of the data pass. `update(acc, view)` per attention
  type with an `AttentionView` (per-layer weights, masks, tokens, key counts, sentence ids).
- HEAD_OUTPUTS: the head outputs of the data pass, with gradients. `score(batch, run)` returns
  ({(type, layer): (B, H) per sentence}, units (B,)), a per-sentence ratio per head.
- OWN_PASS: like HEAD_OUTPUTS, but `score` runs its own forward pass on the batch.
- PROBES: its own inputs, after the data pass: `probe(acc, run)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..heads import ATTENTION_TYPES

WEIGHTS, HEAD_OUTPUTS, OWN_PASS, PROBES = "weights", "head_outputs", "own_pass", "probes"
NEEDS = (WEIGHTS, HEAD_OUTPUTS, OWN_PASS, PROBES)
TRANSLATION, LANGUAGE_MODEL = "translation", "language_model"  # the model kinds (meta model_kind)
LM_ATTENTION_TYPE = "dec-self"  # a decoder-only LM's one attention type (causal)


class StatsError(ValueError):
    """A user-facing problem with the inputs (checkpoint, data, subset, parses)."""


class Heatmap:
    """A layers x heads heatmap of one column; value_range None = the data's range."""

    def __init__(self, column: str, title: str, value_range: Optional[Tuple[float, float]] = None):
        self.column, self.title, self.value_range = column, title, value_range


def _always(options) -> bool:
    return True


def _plain_finalize(acc, run, replicates):
    return acc.finalize()


@dataclass(frozen=True)
class Metric:
    name: str
    attention_types: Tuple[str, ...]  # of a translation model; an LM's dec-self counts if listed
    needs: str  # one of NEEDS (module doc)
    accumulator: Callable  # (head shape (L, H), run) -> accumulator
    columns: Callable  # run -> [column names] (also when the model has none of its types)
    cells: Callable  # (result, (layer, head), run) -> {column: value}
    update: Optional[Callable] = None  # WEIGHTS: (acc, view) -> None
    score: Optional[Callable] = None  # HEAD_OUTPUTS / OWN_PASS: (batch, run) -> (per block, units)
    probe: Optional[Callable] = None  # PROBES: (acc, run) -> None
    model_kinds: Tuple[str, ...] = (TRANSLATION, LANGUAGE_MODEL)
    default: Callable = _always  # options -> on when --metrics is not given
    finalize: Callable = _plain_finalize  # (acc, run, replicates or None) -> result
    replicates: Optional[Callable] = None  # (acc, run) -> (R, L, H): enters agreement.json
    labels: Optional[Callable] = None  # (result, run) -> {(layer, head): [label, ...]}
    meta: Optional[Callable] = None  # ({type: result} or None if not run, run) -> {key: value}
    heatmap: Optional[Heatmap] = None
    text_columns: Tuple[str, ...] = ()  # cells that are not numbers (kept as text / int)
    check_options: Optional[Callable] = None  # options -> None, raises StatsError if unusable
    label_colours: Tuple[Tuple[str, str], ...] = ()  # (label kind, colour) for the function map
    label_abbreviations: Tuple[Tuple[str, str], ...] = ()  # (text, shorter) in function-map cells

    def __post_init__(self):
        if self.needs not in NEEDS:
            raise ValueError(f"metric {self.name}: needs must be one of {NEEDS}")
        callback = {WEIGHTS: self.update, HEAD_OUTPUTS: self.score, OWN_PASS: self.score,
                    PROBES: self.probe}[self.needs]
        if callback is None:
            raise ValueError(f"metric {self.name}: needs={self.needs} but no callback for it")
        unknown = set(self.attention_types) - set(ATTENTION_TYPES)
        if unknown:
            raise ValueError(f"metric {self.name}: unknown attention types {sorted(unknown)}")

    def types_for(self, language_model: bool) -> Tuple[str, ...]:
        """The attention types this metric is computed for, for a model of that kind."""
        if language_model:
            return (LM_ATTENTION_TYPE,)  # every metric that applies to an LM covers its one type
        return self.attention_types

    def applies_to(self, language_model: bool) -> bool:
        return (LANGUAGE_MODEL if language_model else TRANSLATION) in self.model_kinds


@dataclass
class RunContext:
    """What the callbacks of the specs may read about the run (module doc)."""

    options: object  # StatsOptions, with the defaults for this model filled in
    language_model: bool
    model: object = None
    task: object = None
    shape: Dict[str, Tuple[int, int]] = field(default_factory=dict)  # {type: (layers, heads)}
    conllu_index: object = None  # stats.syntax.ConlluIndex with --conllu
    subset: Optional[str] = None  # the subset scored (a PROBES metric may read its blocks again)
    counters: Dict[str, int] = field(default_factory=dict)  # tallies a metric reports in meta


def bootstrap(run: RunContext) -> Dict[str, int]:
    """The accumulators' shared bootstrap settings: one seed, so replicates are joint."""
    return {"replicates": run.options.replicates, "seed": run.options.seed}


_REGISTRY: Dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add a metric (after the registered ones: its columns come last)."""
    if metric.name in _REGISTRY:
        raise ValueError(f"metric {metric.name!r} is already registered")
    _REGISTRY[metric.name] = metric
    return metric


def unregister(name: str) -> None:
    del _REGISTRY[name]


def metric(name: str) -> Metric:
    return _REGISTRY[name]


def metrics(names: Optional[Sequence[str]] = None) -> List[Metric]:
    """The registered metrics (or those of `names`), in registry order."""
    return [m for m in _REGISTRY.values() if names is None or m.name in names]


def metric_names() -> Tuple[str, ...]:
    return tuple(_REGISTRY)


def text_columns() -> Tuple[str, ...]:
    """Columns of every registered metric whose cells are not floats."""
    return tuple(c for m in _REGISTRY.values() for c in m.text_columns)


def heatmaps() -> List[Heatmap]:
    return [m.heatmap for m in _REGISTRY.values() if m.heatmap is not None]


def label_colours() -> Dict[str, str]:
    return {kind: colour for m in _REGISTRY.values() for kind, colour in m.label_colours}


def label_abbreviations() -> Tuple[Tuple[str, str], ...]:
    return tuple(pair for m in _REGISTRY.values() for pair in m.label_abbreviations)
