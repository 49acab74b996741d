"""Gradient importance of heads (Michel et al. 2019, "Are Sixteen Heads Really Better than One?").

With a gate xi_h = 1 multiplying head h's output o_h, the loss' derivative wrt the gate is

    dL/dxi_h = sum over positions and the head's neurons of  o_h * dL/do_h

(chain rule; tests/stats check it against the derivative wrt a gate scale).  L is the
negative log-likelihood of the reference (teacher forced, summed over its tokens, no label
smoothing).  Importance is the expectation over sentences of the absolute value,

    grad(h) = mean over sentences x of |dL(x)/dxi_h|

and, optionally (``layer``, Michel et al.'s choice), each layer's vector of importances is
divided by its L2 norm — applied to the final estimate and to every bootstrap replicate alike.
"""
from __future__ import annotations

from typing import Dict, Sequence

import torch
from torch import Tensor

from ...heads import BlockKey
from ..capture import CapturedHeads
from ..streaming import RatioEstimate, percentile_interval
from .lrp import per_head_grad_products
from ...heads import ATTENTION_TYPES
from ..registry import HEAD_OUTPUTS, Heatmap, Metric, bootstrap, register
from ..streaming import RatioAccumulator
from .lrp import reference_nll

GRAD_NORMALISATIONS = ("none", "layer")


def gradient_importance(loss: Tensor, captured: CapturedHeads, keys: Sequence[BlockKey]
                        ) -> Dict[BlockKey, Tensor]:
    """{(type, layer): (B, H) |dL/dxi_h| per sentence}; ``loss`` is the batch's summed NLL."""
    return {key: value.abs() for key, value in per_head_grad_products(loss, captured, keys).items()}


def normalise_layers_l2(importance: Tensor) -> Tensor:
    """(..., L, H): divide each layer's heads by their L2 norm (NaN stays NaN, zero rows stay 0)."""
    norm = importance.pow(2).sum(-1, keepdim=True).sqrt()
    return torch.where(norm > 0, importance / norm.clamp(min=torch.finfo(norm.dtype).tiny),
                       importance)


def normalised_estimate(result: RatioEstimate, normalised_replicates: Tensor) -> RatioEstimate:
    """`result` with its estimate layer-L2-normalised and the percentile interval of the
    (already) normalised replicates: normalising is not linear, so the interval is redone."""
    low, high = percentile_interval(normalised_replicates)
    return RatioEstimate(normalise_layers_l2(result.estimate), result.count, low, high)


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class Grad(Metric):
    name, attention_types, needs = "grad", ATTENTION_TYPES, HEAD_OUTPUTS
    in_agreement = True
    heatmap = Heatmap("grad", "gradient importance |dL/dxi|")

    def accumulator(self, shape, run):
        return RatioAccumulator(shape, **bootstrap(run))

    def score(self, batch, run):
        """|dL/dxi_h| per sentence from the data pass's head outputs."""
        lprobs = run.model.get_normalized_probs(batch.net_output, log_probs=True)
        loss = reference_nll(lprobs, batch.sample["target"], run.task.target_dictionary.pad())
        return gradient_importance(loss, batch.captured, batch.keys), torch.ones(batch.size)

    def replicates(self, acc, run):
        replicates = acc.replicate_estimates()
        return normalise_layers_l2(replicates) if run.options.grad_normalise == "layer" else replicates

    def finalize(self, acc, run, replicates):
        """With --grad-normalise layer, the estimate is layer-normalised and the interval is
        that of the normalised replicates (normalising is not linear)."""
        result = acc.finalize()
        if run.options.grad_normalise != "layer":
            return result
        return normalised_estimate(result, replicates)


register(Grad())
