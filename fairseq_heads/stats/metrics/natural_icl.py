"""In-context learning on natural text (Olsson et al. 2022, "In-context Learning and Induction
Heads", Sec. 2: the "in-context learning score").

On the LM's own evaluation text (the stats subset, fairseq's blocks), per block b:

    icl(b) = NLL_b(late) - NLL_b(early)        (nats; Olsson et al.: late = 500, early = 50)
    icl    = sum_b icl(b) / #blocks            over the blocks that reach position ``late``

where NLL_b(p) is the next-token loss of the block's target at 0-based position p, predicted
from the block's first p + 1 input tokens (fairseq's ``target[p]``, seen through
``src_tokens[: p + 1]``).  Negative: the model predicts a token better late in its context than
early, i.e. it uses the context.  A model that ignores everything but the last few tokens scores
~0.  Olsson et al. average over many contexts (single-token losses are noisy); the bootstrap unit
here is the block, and the mean losses at both positions are reported beside the difference.

Only a block whose target reaches ``late`` counts, so the model must take at least late + 1
positions: otherwise the score is NaN with the reason (:func:`unavailable_reason`).  A causal
model's loss at p does not depend on later tokens, so blocks are cut to late + 1 tokens.
"""
from __future__ import annotations

import logging
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from ...numbers import as_float
from ..registry import LANGUAGE_MODEL, PROBES, Metric, bootstrap, register
from ..streaming import DEFAULT_REPLICATES, DEFAULT_SEED, RatioAccumulator

logger = logging.getLogger("fairseq_heads.stats")

DEFAULT_POSITIONS = (50, 500)  # (early, late), Olsson et al. 2022


def check_positions(positions: Sequence[int]) -> Tuple[int, int]:
    """(early, late) with 0 <= early < late, else ValueError naming the option."""
    if len(positions) != 2 or not 0 <= positions[0] < positions[1]:
        raise ValueError(f"--icl-positions: expected two positions EARLY,LATE with 0 <= EARLY < LATE, "
                         f"got {','.join(str(p) for p in positions)}")
    return int(positions[0]), int(positions[1])


def unavailable_reason(max_positions: Optional[int], block_sizes: Sequence[int], late: int) -> Optional[str]:
    """Why the score cannot be computed (None when some block reaches ``late``)."""
    if max_positions is not None and max_positions <= late:
        return (f"the model takes {max_positions} positions (--tokens-per-sample), position {late} "
                f"needs {late + 1}; choose --icl-positions within the context")
    if not any(int(n) > late for n in block_sizes):
        return (f"no block of the subset reaches position {late} (longest: "
                f"{max((int(n) for n in block_sizes), default=0)} tokens; --sample-break-mode eos "
                f"makes one line a block)")
    return None


def position_nll(lprobs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B, P) next-token losses, given log-probabilities (B, P, V) at P positions and the
    targets (B, P) there."""
    return -lprobs.to(torch.float64).gather(-1, target.unsqueeze(-1)).squeeze(-1)


class NaturalICLAccumulator:
    """Streams per-block losses at (early, late); finalize -> {"score", "early_loss", "late_loss"}
    as RatioEstimates (shape ()), ``count`` = blocks."""

    def __init__(self, positions: Sequence[int] = DEFAULT_POSITIONS,
                 replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED):
        self.early, self.late = check_positions(positions)
        self.reason: Optional[str] = None  # set when the score cannot be computed
        self.losses = RatioAccumulator((3,), replicates=replicates, seed=seed)

    def update(self, nll: torch.Tensor) -> None:
        """``nll`` (B, 2): each block's loss at (early, late)."""
        early, late = nll[:, 0], nll[:, 1]
        values = torch.stack([late - early, early, late], dim=-1)
        self.losses.update(values, torch.ones_like(values))

    def finalize(self) -> Dict[str, object]:
        result = self.losses.finalize()
        names = ("score", "early_loss", "late_loss")
        return {name: type(result)(*(t[..., i] for t in result)) for i, name in enumerate(names)}


def natural_icl_meta(acc: NaturalICLAccumulator, result: Dict[str, object]) -> Dict[str, object]:
    """heads.json meta ``natural_icl``: the score and both mean losses with their intervals."""
    meta: Dict[str, object] = {"early_position": acc.early, "late_position": acc.late,
                               "reason": acc.reason, "blocks": as_float(result["score"].count)}
    for name, estimate in result.items():
        meta[name] = {"estimate": as_float(estimate.estimate), "ci_low": as_float(estimate.ci_low),
                      "ci_high": as_float(estimate.ci_high)}
    return meta


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


def lprobs_at(model, src_tokens: torch.Tensor, positions: List[int]) -> torch.Tensor:
    """(B, P, V) next-token log-probabilities at the given positions only: a fairseq Transformer
    decoder projects just those features to the vocabulary (the largest matmul of a small LM)."""
    from fairseq.models.transformer import TransformerDecoderBase

    decoder = getattr(model, "decoder", None)
    if isinstance(decoder, TransformerDecoderBase) and getattr(decoder, "adaptive_softmax", None) is None:
        features, extra = model(src_tokens, features_only=True)
        logits = decoder.output_layer(features[:, positions])
        return model.get_normalized_probs((logits, extra), log_probs=True)
    net_output = model(src_tokens)
    return model.get_normalized_probs(net_output, log_probs=True)[:, positions]


class NaturalICL(Metric):
    # model level: no per-head columns; heads.json meta natural_icl
    name, attention_types, needs = "natural_icl", ("dec-self",), PROBES
    model_kinds = (LANGUAGE_MODEL,)

    def accumulator(self, shape, run):
        return NaturalICLAccumulator(run.options.icl_positions, **bootstrap(run))

    def probe(self, acc, run):
        """The subset's blocks that reach the late position, cut there (causal: nothing later
        counts), through the model; the losses at (early, late) of each."""
        dataset = run.task.dataset(run.subset)
        acc.reason = unavailable_reason(run.model.max_positions(), dataset.sizes, acc.late)
        if acc.reason is not None:
            logger.warning("natural_icl: no score: %s", acc.reason)
            return
        blocks = [i for i, size in enumerate(dataset.sizes) if int(size) > acc.late]
        per_batch = max(1, (run.options.max_tokens or 4096) // (acc.late + 1))
        device = next(run.model.parameters()).device
        positions = [acc.early, acc.late]
        for start in range(0, len(blocks), per_batch):
            sample = dataset.collater([dataset[i] for i in blocks[start:start + per_batch]])
            src_tokens = sample["net_input"]["src_tokens"][:, :acc.late + 1].to(device)
            with torch.no_grad():
                lprobs = lprobs_at(run.model, src_tokens, positions)
            acc.update(position_nll(lprobs.float().cpu(), sample["target"][:, positions]))

    def finalize(self, acc, run, replicates):
        return natural_icl_meta(acc, acc.finalize())

    def columns(self, run):
        return []

    def cells(self, result, index, run):
        return {}

    def meta(self, by_type, run):
        """heads.json meta natural_icl: the score, both mean losses, the positions, or why not."""
        return {"natural_icl": next(iter(by_type.values())) if by_type else None}


register(NaturalICL())
