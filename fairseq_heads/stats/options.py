"""The options of a stats run (`fairseq-heads stats`), their checks and per-model defaults."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from ..precision import AUTOCAST_CHOICES
from .labels import PAPER_THRESHOLDS, LabelThresholds
from .metrics import grad, lrp
from .metrics.induction import DEFAULT_LENGTHS, DEFAULT_PROBES
from .metrics.natural_icl import DEFAULT_POSITIONS, check_positions
from .metrics.positional import DEFAULT_OFFSETS
from .registry import StatsError, metric, metric_names, metrics
from .streaming import DEFAULT_REPLICATES, DEFAULT_SEED

DEFAULT_LM_OFFSETS = (-3, -2, -1, 0)  # causal attention has no positive offsets


@dataclass
class StatsOptions:
    metrics: Optional[Sequence[str]] = None  # None: each metric's default (registry)
    conllu: Optional[str] = None
    lrp_normalise: str = "sentence"
    grad_normalise: str = "none"
    offsets: Optional[Sequence[int]] = None  # None: DEFAULT_OFFSETS, DEFAULT_LM_OFFSETS for LMs
    thresholds: LabelThresholds = PAPER_THRESHOLDS
    replicates: int = DEFAULT_REPLICATES
    seed: int = DEFAULT_SEED
    max_tokens: Optional[int] = 4096
    batch_size: Optional[int] = None
    cpu: bool = False
    autocast: str = "none"  # precision.py: "bf16" runs the passes' matrix products in bfloat16
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    log_format: Optional[str] = None  # fairseq progress bar format; default tqdm/simple
    log_interval: int = 100
    induction_lengths: Sequence[int] = DEFAULT_LENGTHS
    induction_probes: int = DEFAULT_PROBES  # per length
    icl_positions: Sequence[int] = DEFAULT_POSITIONS  # natural_icl: (early, late)
    rare_outside_top: Optional[int] = None  # rare: score only sentences whose rarest token is outside the top N
    sample_break_mode: Optional[str] = None  # an LM's blocks (None: as the checkpoint records)
    block_start: Optional[str] = None  # eos | bos: an LM's first token of a block (None: as recorded)


def parse_metrics(value: str) -> Tuple[str, ...]:
    """'confidence,lrp' -> ('confidence', 'lrp'): registered names, repeats dropped."""
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    known = metric_names()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise StatsError(f"--metrics: unknown metric(s) {unknown or [value]}; "
                         f"choose a comma list of {', '.join(known)}")
    return names


def default_metrics(options: StatsOptions, language_model: bool) -> Tuple[str, ...]:
    """The metrics run when --metrics is not given, for a model of that kind."""
    return tuple(m.name for m in metrics() if m.applies_to(language_model) and m.default(options))


def check_options(options: StatsOptions) -> None:
    """Refuse inconsistent options before anything is loaded (StatsError, one line)."""
    for spec in metrics():
        spec.check_options(options)
    if options.lrp_normalise not in lrp.LRP_MODES:
        raise StatsError(f"--lrp-normalise must be one of {', '.join(lrp.LRP_MODES)}")
    if options.rare_outside_top is not None and options.rare_outside_top < 1:
        raise StatsError(f"--rare-outside-top must be a frequency rank >= 1, got {options.rare_outside_top}")
    try:
        check_positions(options.icl_positions)
    except ValueError as error:
        raise StatsError(str(error)) from None
    if options.autocast not in AUTOCAST_CHOICES:
        raise StatsError(f"--autocast: expected one of {', '.join(AUTOCAST_CHOICES)}, got {options.autocast!r}")
    if options.grad_normalise not in grad.GRAD_NORMALISATIONS:
        raise StatsError(f"--grad-normalise must be one of {', '.join(grad.GRAD_NORMALISATIONS)}")


def options_for_model(options: StatsOptions, language_model: bool) -> StatsOptions:
    """Fill in the defaults that depend on the kind of model; refuse metrics it cannot have."""
    names, offsets = options.metrics, options.offsets
    if names is None:
        names = default_metrics(options, language_model)
    if offsets is None:
        offsets = DEFAULT_LM_OFFSETS if language_model else DEFAULT_OFFSETS
    wrong = [n for n in names if not metric(n).applies_to(language_model)]
    if wrong and language_model:
        raise StatsError(f"--metrics: {', '.join(wrong)} heads are computed for translation models "
                         f"only (this checkpoint is a language model)")
    if wrong:
        raise StatsError(f"--metrics: {', '.join(wrong)} need a decoder-only language model "
                         f"(this checkpoint is a translation model)")
    return dataclasses.replace(options, metrics=tuple(names), offsets=tuple(offsets))
