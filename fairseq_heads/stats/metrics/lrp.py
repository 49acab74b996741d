"""Layer-wise relevance propagation (LRP) to attention heads (Voita et al. 2019, Sec. 3.2).

What is computed, per target position t of a teacher-forced forward pass:

    R_t = the top-1 logit at t (the logit of the predicted token, not the reference token)

propagated back to every head's output with the *conservative* rules of CP-LRP (Ali et al. 2022,
"XAI for Transformers: Better Explanations through Conservative Propagation", ICML); not
AttnLRP (Achtibat et al. 2024), which also propagates relevance through the softmax:

- attention probabilities are constants (detached): through ``sum_k p_qk v_k`` relevance goes
  to the values only, in proportion to each value's contribution;
- LayerNorm's 1/std is a constant (detached), so LayerNorm is a linear map (centring, scale,
  weight) plus a bias;
- every linear map (projections, FFN, embedding scale, residual sums) and ReLU use the
  epsilon-rule with epsilon -> 0, which on this modified graph is exactly gradient x input.

So the relevance of a head h for an objective R is

    rel(h) = sum over positions and the head's D neurons of  o_h * dR/do_h

with ``o_h`` the head's (gated) output, the input of ``out_proj``, and the gradient taken on
the modified graph.  The rules make the graph locally linear, so relevance is conserved: what
reaches the inputs of a block equals what leaves its output, minus what the biases absorb
(``b * dR/db`` summed over the bias entries) — tests/stats check this.

Per head we take |rel(h)| (contributions of either sign count as relevance to the prediction)
and normalise over the heads of the same block (attention type and layer), so each layer's
heads sum to 1; layers with zero total relevance (e.g. all heads gated off) give 0 everywhere.

Two normalisations (``mode``):
- ``step`` (the paper): one backward per target position, |rel| normalised per position, then
  averaged over all target positions of the subset (token-weighted; sentence bootstrap).
- ``sentence``: one backward per batch of the summed top-1 logits of each sentence, |rel|
  normalised per sentence, then averaged over sentences.  T times cheaper.

Target positions are all non-pad positions of the reference (including the final EOS).
Sentences in a batch do not interact (attention, LayerNorm and FFN are per sentence / per
token), so one backward of the sum over the batch gives every sentence's own gradients.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...heads import ATTENTION_TYPES, BlockKey, iter_attention
from ..capture import CapturedHeads, capture_heads, python_attention_path
from ..registry import OWN_PASS, Heatmap, Metric, bootstrap, register
from ..streaming import RatioAccumulator

LRP_MODES = ("step", "sentence")


# ---------------------------------------------------------------- the modified graph


def _detach_output(module: nn.Module, inputs, output: Tensor) -> Tensor:
    return output.detach()


def _layer_norm_with_constant_std(layer_norm: nn.LayerNorm):
    """LayerNorm's forward with the 1/std treated as a constant (same values, linear backward)."""

    def forward(x: Tensor) -> Tensor:
        dims = tuple(range(-len(layer_norm.normalized_shape), 0))
        centred = x - x.mean(dim=dims, keepdim=True)
        std = (centred.pow(2).mean(dim=dims, keepdim=True) + layer_norm.eps).sqrt().detach()
        y = centred / std
        if layer_norm.weight is not None:
            y = y * layer_norm.weight
        if layer_norm.bias is not None:
            y = y + layer_norm.bias
        return y

    return forward


@contextlib.contextmanager
def conservative_lrp_rules(model: nn.Module) -> Iterator[None]:
    """Inside, gradient x input on `model` is the conservative LRP of the module doc.

    - attention: fairseq's Python path, with a forward hook on each block's ``dropout_module``
      (which fairseq applies to the attention probabilities and nothing else) that returns
      them detached;
    - every ``nn.LayerNorm``: an instance forward computing the same values with a detached std;
    - every module with a ``conservative_lrp_forward`` method: that method (RMSNorm, SwiGLU).
    Everything is restored on exit.  Use with the model in eval mode (no dropout).
    """
    handles = []
    layer_norms: List[nn.LayerNorm] = []
    with python_attention_path(model):
        try:
            for _, _, attention in iter_attention(model):
                handles.append(attention.dropout_module.register_forward_hook(_detach_output))
            for module in model.modules():
                if isinstance(module, nn.LayerNorm) and "forward" not in module.__dict__:
                    module.forward = _layer_norm_with_constant_std(module)
                    layer_norms.append(module)
                elif (callable(getattr(type(module), "conservative_lrp_forward", None))
                      and "forward" not in module.__dict__):
                    # a module that states its own rule (gated_llama's RMSNorm and SwiGLU)
                    module.forward = module.conservative_lrp_forward
                    layer_norms.append(module)
            yield
        finally:
            for handle in handles:
                handle.remove()
            for module in layer_norms:
                del module.forward


# ---------------------------------------------------------------- objectives and relevance


def top1_logits(logits: Tensor, target_mask: Tensor) -> Tensor:
    """(B, T) top-1 logit per target position, 0 where ``target_mask`` is False."""
    best = logits.detach().argmax(-1, keepdim=True)  # which logit: a choice, not a function
    return logits.gather(-1, best).squeeze(-1) * target_mask.to(logits.dtype)


def vocabulary_projection(model: nn.Module) -> Optional[nn.Linear]:
    """The decoder's linear map from features to logits, when its logits are exactly
    ``output_projection(features)`` (fairseq's Transformer decoders without adaptive softmax and
    with fairseq's own ``output_layer``); None otherwise."""
    from fairseq.models.transformer import TransformerDecoderBase

    decoder = getattr(model, "decoder", None)
    projection = getattr(decoder, "output_projection", None)
    if (isinstance(decoder, TransformerDecoderBase) and isinstance(projection, nn.Linear)
            and decoder.adaptive_softmax is None
            and type(decoder).output_layer is TransformerDecoderBase.output_layer):
        return projection
    return None


def top1_objective(model: nn.Module, net_input: dict, target_mask: Tensor) -> Tensor:
    """One forward of ``model`` on ``net_input``; the (B, T) objective of :func:`top1_logits`.

    Its gradient with respect to everything below the logits is that of ``top1_logits(logits)``,
    bit for bit, without the backward through the vocabulary projection: that backward is a
    one-hot row per position times the (V, D) weight, i.e. the winning row itself. So with a
    plain projection (:func:`vocabulary_projection`) the logits are computed off the graph, for
    their argmax only, and the objective is rebuilt from the winning rows, (B, T, D) instead of
    (B, T, V) on the graph. Its values equal the top-1 logits up to rounding (only its gradient
    is used).
    """
    projection = vocabulary_projection(model)
    if projection is None:
        logits, _ = model(**net_input)
        return top1_logits(logits, target_mask)
    features, _ = model(**net_input, features_only=True)
    with torch.no_grad():
        best = projection(features).argmax(-1)  # the same logits as the full forward's
    logit = (features * projection.weight.detach()[best]).sum(-1)
    if projection.bias is not None:
        logit = logit + projection.bias.detach()[best]
    return logit * target_mask.to(logit.dtype)


def head_output_times_grad(head_outputs: Tensor, grads: Tensor, num_heads: int) -> Tensor:
    """sum over positions and each head's neurons of output x gradient: (T, B, H*D) -> (B, H)."""
    t, b, width = head_outputs.shape
    product = (head_outputs.detach() * grads).to(torch.float64)
    return product.view(t, b, num_heads, width // num_heads).sum(dim=(0, 3))


def per_head_grad_products(objective: Tensor, captured: CapturedHeads, keys: Sequence[BlockKey],
                           retain_graph: bool = False) -> Dict[BlockKey, Tensor]:
    """{(type, layer): (B, H) sum of head output x d objective / d head output}."""
    outputs = [captured.head_outputs[key] for key in keys]
    grads = torch.autograd.grad(objective, outputs, retain_graph=retain_graph, allow_unused=True)
    return {
        key: (head_output_times_grad(out, grad, captured.num_heads[key]) if grad is not None
              else torch.zeros(out.shape[1], captured.num_heads[key], dtype=torch.float64))
        for key, out, grad in zip(keys, outputs, grads)
    }


def normalise_over_layer(relevance: Tensor) -> Tensor:
    """|relevance| / sum over the heads of the layer (last dim); all-zero rows stay 0."""
    magnitude = relevance.abs()
    total = magnitude.sum(-1, keepdim=True)
    return torch.where(total > 0, magnitude / total.clamp(min=torch.finfo(total.dtype).tiny),
                       torch.zeros_like(magnitude))


def lrp_head_relevance(logits: Tensor, target_mask: Tensor, captured: CapturedHeads,
                       keys: Sequence[BlockKey], mode: str = "sentence"
                       ) -> Tuple[Dict[BlockKey, Tensor], Tensor]:
    """Per-sentence sums of normalised head relevance and how many units they rest on.

    ``logits`` (B, T, V) and ``captured`` must come from one forward pass run inside
    :func:`conservative_lrp_rules` and :func:`capture.capture_heads`.
    Returns ``({key: (B, H) numerator}, (B,) denominator)``: for ``sentence`` mode the
    numerator is the sentence's normalised relevance and the denominator 1 (0 for an empty
    target); for ``step`` mode the sum over its target positions of the per-step normalised
    relevance and the number of positions.
    """
    return objective_head_relevance(top1_logits(logits, target_mask), target_mask, captured, keys, mode)


def objective_head_relevance(objective: Tensor, target_mask: Tensor, captured: CapturedHeads,
                             keys: Sequence[BlockKey], mode: str = "sentence"
                             ) -> Tuple[Dict[BlockKey, Tensor], Tensor]:
    """:func:`lrp_head_relevance` from the (B, T) objective (:func:`top1_logits` or
    :func:`top1_objective`) of a forward pass run under the same conditions."""
    if mode not in LRP_MODES:
        raise ValueError(f"LRP normalisation must be one of {LRP_MODES}, got {mode!r}")
    has_target = target_mask.any(-1).to(torch.float64)
    if mode == "sentence":
        products = per_head_grad_products(objective.sum(), captured, keys)
        return ({key: normalise_over_layer(value) * has_target[:, None]
                 for key, value in products.items()}, has_target)
    sums = {key: torch.zeros(objective.shape[0], captured.num_heads[key], dtype=torch.float64)
            for key in keys}
    steps = [t for t in range(objective.shape[1]) if bool(target_mask[:, t].any())]
    for i, t in enumerate(steps):
        products = per_head_grad_products(objective[:, t].sum(), captured, keys,
                                          retain_graph=i < len(steps) - 1)
        present = target_mask[:, t].to(torch.float64)[:, None]
        for key, value in products.items():
            sums[key] += normalise_over_layer(value) * present
    return sums, target_mask.sum(-1).to(torch.float64)


def reference_nll(lprobs: Tensor, target: Tensor, padding_idx: int) -> Tensor:
    """Summed negative log-likelihood of the reference tokens (no label smoothing)."""
    return F.nll_loss(lprobs.reshape(-1, lprobs.shape[-1]), target.reshape(-1),
                      ignore_index=padding_idx, reduction="sum")


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class LRP(Metric):
    name, attention_types, needs = "lrp", ATTENTION_TYPES, OWN_PASS
    in_agreement = True
    heatmap = Heatmap("lrp", "LRP relevance (share of the layer)")

    def accumulator(self, shape, run):
        return RatioAccumulator(shape, **bootstrap(run))

    def score(self, batch, run):
        """One forward under the conservative rules; relevance per head and sentence."""
        with conservative_lrp_rules(run.model), \
                capture_heads(run.model, weights=False, head_outputs=True) as captured:
            objective = top1_objective(run.model, batch.sample["net_input"], batch.target_mask)
            return objective_head_relevance(objective, batch.target_mask, captured, batch.keys,
                                            run.options.lrp_normalise)


register(LRP())
