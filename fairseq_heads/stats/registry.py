"""The metric registry: one `Metric` per per-head statistic, in heads.csv column order.

A metric's binding to a stats run is a small `Metric` subclass that lives next to its math, at
the end of its `metrics/<name>.py`, and registers itself there (`register(Confidence())`);
`stats/__init__.py` imports those files in heads.csv column order. The subclass declares what
the metric is (class attributes: name, attention types, what it needs from the forward pass,
heatmap, label colours) and overrides the hooks it needs: how to make and feed its accumulator,
and what it puts in the heads table (columns, per-head cells, labels, run metadata). The hooks
with a default are the common case: a ratio estimate under the metric's own name.
`collect.py` runs the metrics, `table.py` lays out their columns, `figures.py` draws their
heatmaps: none of them names a metric.

What `needs` means, and which hook it calls:
- WEIGHTS: the attention probabilities of the data pass. `update(acc, view)` per attention
  type with an `AttentionView` (per-layer weights, masks, tokens, sentence ids).
- HEAD_OUTPUTS: the head outputs of the data pass, with gradients. `score(batch, run)` returns
  ({(type, layer): (B, H) per sentence}, units (B,)), a per-sentence ratio per head.
- OWN_PASS: like HEAD_OUTPUTS, but `score` runs its own forward pass on the batch.
- PROBES: its own inputs, after the data pass: `probe(acc, run)`.
A metric's state is its accumulator: everything a hook learns (sums, counts) goes there, and
`finalize` turns it into the result the table hooks read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from ..heads import ATTENTION_TYPES
from .streaming import estimate_cells, estimate_columns

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


class Metric:
    """A metric's binding to a stats run (module doc): a subclass declares the class attributes
    and overrides `accumulator`, the hook of its `needs`, and any other hook whose default does
    not fit."""

    name: str = ""
    attention_types: Tuple[str, ...] = ()  # of a translation model; an LM's dec-self counts if listed
    needs: str = ""  # one of NEEDS (module doc)
    model_kinds: Tuple[str, ...] = (TRANSLATION, LANGUAGE_MODEL)
    in_agreement: bool = False  # its bootstrap replicates enter agreement.json
    heatmap: Optional[Heatmap] = None
    text_columns: Tuple[str, ...] = ()  # cells that are not numbers (kept as text / int)
    label_colours: Tuple[Tuple[str, str], ...] = ()  # (label kind, colour) for the function map
    label_abbreviations: Tuple[Tuple[str, str], ...] = ()  # (text, shorter) in function-map cells

    # ------------------------------------------------ options
    def default(self, options) -> bool:
        """Whether it runs when --metrics is not given."""
        return True

    def check_options(self, options) -> None:
        """Raise StatsError if the options cannot run it."""

    # ------------------------------------------------ collection (one of update / score / probe)
    def accumulator(self, shape: Tuple[int, int], run: "RunContext"):
        """A fresh accumulator for one attention type of (layers, heads) `shape`."""
        raise NotImplementedError

    def update(self, acc, view) -> None:
        """WEIGHTS: add one batch's attention weights of one type (collect.AttentionView)."""
        raise NotImplementedError

    def score(self, batch, run: "RunContext"):
        """HEAD_OUTPUTS / OWN_PASS: ({(type, layer): (B, H)}, units (B,)) of one batch."""
        raise NotImplementedError

    def probe(self, acc, run: "RunContext") -> None:
        """PROBES: run its own inputs through the model into `acc`."""
        raise NotImplementedError

    def replicates(self, acc, run: "RunContext"):
        """(R, L, H) bootstrap replicates for agreement.json, or None."""
        return acc.replicate_estimates() if self.in_agreement else None

    def finalize(self, acc, run: "RunContext", replicates):
        """The result the table hooks read (`replicates`: what `replicates` gave)."""
        return acc.finalize()

    # ------------------------------------------------ the heads table
    def columns(self, run: "RunContext") -> List[str]:
        """Its heads.csv columns (also when the model has none of its types)."""
        return estimate_columns(self.name)

    def cells(self, result, index: Tuple[int, int], run: "RunContext") -> Dict[str, object]:
        """{column: value} of one head (layer, head)."""
        return estimate_cells(self.name, result, index)

    def labels(self, result, run: "RunContext") -> Dict[Tuple[int, int], List[str]]:
        """{(layer, head): [label, ...]} of the heads it labels."""
        return {}

    def meta(self, by_type, run: "RunContext") -> Dict[str, object]:
        """Run metadata for heads.json ({type: result}, or None when it did not run)."""
        return {}

    # ------------------------------------------------
    def check(self) -> None:
        """Refuse a binding that cannot run (at registration)."""
        if self.needs not in NEEDS:
            raise ValueError(f"metric {self.name}: needs must be one of {NEEDS}")
        hook = {WEIGHTS: "update", HEAD_OUTPUTS: "score", OWN_PASS: "score", PROBES: "probe"}[self.needs]
        if getattr(type(self), hook) is getattr(Metric, hook):
            raise ValueError(f"metric {self.name}: needs={self.needs} but no {hook} hook")
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
    token_counts: object = None  # token_counts.TokenCounts, once a metric asked for them


def bootstrap(run: RunContext) -> Dict[str, int]:
    """The accumulators' shared bootstrap settings: one seed, so replicates are joint."""
    return {"replicates": run.options.replicates, "seed": run.options.seed}


_REGISTRY: Dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    """Add a metric (after the registered ones: its columns come last)."""
    metric.check()
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
