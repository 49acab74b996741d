"""Capture per-head attention probabilities and per-head outputs of a fairseq Transformer.

This is the one place that reaches into fairseq's ``MultiheadAttention`` to read what each
head does.  Inside ``with capture_heads(model) as captured:`` every attention block

- runs fairseq's Python attention path (PyTorch's fused kernel ignores ``need_head_weights``
  and applies ``out_proj`` internally, where neither the probabilities nor the head outputs
  can be read): ``skip_embed_dim_check`` is set, and restored on exit;
- is called with ``need_weights=True, need_head_weights=True`` whatever its caller asked
  (fairseq's layers never ask for per-head weights of self-attention); the caller still gets
  back what it asked for (per-head, head-averaged or None);
- has a forward pre-hook on ``out_proj`` that records its input, the concatenated head
  outputs (T, B, H * D).  A ``GatedMultiheadAttention`` whose ``out_proj`` is hooked calls it
  on the gated head outputs, so the hook sees the *gated* outputs.

Captured tensors are keyed ``(attention type, layer)``; ``captured.weights[key]`` is
(B, H, Tq, Tk) and ``captured.head_outputs[key]`` is (T, B, H * D), still attached to the
autograd graph (so ``torch.autograd.grad(objective, tensor)`` gives the gradient at a head's
output).  Each forward call of a block overwrites its entry: run one teacher-forced forward
per capture.  Everything is restored on exit, also after an exception.
"""
from __future__ import annotations

import contextlib
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from torch import Tensor, nn

from ..heads import ATTENTION_TYPES, BlockKey, iter_attention



class CapturedHeads:
    """What one forward pass produced, per (attention type, layer)."""

    def __init__(self):
        self.weights: Dict[BlockKey, Tensor] = {}
        self.head_outputs: Dict[BlockKey, Tensor] = {}
        self.num_heads: Dict[BlockKey, int] = {}

    def layers(self, attention_type: str) -> List[int]:
        return sorted(layer for t, layer in self.num_heads if t == attention_type)

    def type_weights(self, attention_type: str) -> List[Tensor]:
        """The type's per-layer weights, in layer order: a list of (B, H, Tq, Tk)."""
        return [self.weights[(attention_type, layer)] for layer in self.layers(attention_type)]

    def per_head_output(self, key: BlockKey) -> Tensor:
        """Head outputs of one block reshaped to (T, B, H, D)."""
        outputs = self.head_outputs[key]
        heads = self.num_heads[key]
        return outputs.view(*outputs.shape[:-1], heads, outputs.shape[-1] // heads)


@contextlib.contextmanager
def python_attention_path(model: nn.Module) -> Iterator[None]:
    """Make every attention block of `model` take fairseq's Python path; restore on exit."""
    blocks = [attention for _, _, attention in iter_attention(model)]
    saved = [attention.skip_embed_dim_check for attention in blocks]
    try:
        for attention in blocks:
            attention._set_skip_embed_dim_check()
        yield
    finally:
        for attention, value in zip(blocks, saved):
            attention.skip_embed_dim_check = value


def _forward_returning_head_weights(attention: nn.Module, key: BlockKey, captured: CapturedHeads):
    original_forward = attention.forward  # bound method of the class (or an outer wrapper)

    def forward(*args, need_weights: bool = True, need_head_weights: bool = False, **kwargs):
        output, head_weights = original_forward(*args, need_weights=True, need_head_weights=True,
                                                **kwargs)
        # fairseq returns per-head weights as (H, B, Tq, Tk).
        # fp32 for the metrics' sums (a no-op in fp32; under --autocast bf16 a copy)
        captured.weights[key] = head_weights.transpose(0, 1).float()
        if need_head_weights:
            return output, head_weights
        return output, (head_weights.mean(dim=0) if need_weights else None)

    return forward


@contextlib.contextmanager
def capture_heads(model: nn.Module, weights: bool = True, head_outputs: bool = True,
                  attention_types: Iterable[str] = ATTENTION_TYPES) -> Iterator[CapturedHeads]:
    """Record per-head attention probabilities and/or head outputs (see module doc)."""
    wanted = set(attention_types)
    unknown = wanted - set(ATTENTION_TYPES)
    if unknown:
        raise ValueError(f"unknown attention types {sorted(unknown)}")
    captured = CapturedHeads()
    handles = []
    wrapped: List[Tuple[nn.Module, Optional[object]]] = []  # (block, its previous instance forward)
    with contextlib.ExitStack() as stack:
        stack.enter_context(python_attention_path(model))
        try:
            for attention_type, layer, attention in iter_attention(model):
                if attention_type not in wanted or attention.num_heads == 0:
                    continue  # a block whose heads were all pruned has nothing to capture
                key = (attention_type, layer)
                captured.num_heads[key] = attention.num_heads
                if weights:
                    # An instance attribute shadows the class's forward; on exit we put back
                    # whatever instance attribute was there before (usually none).
                    wrapped.append((attention, attention.__dict__.get("forward")))
                    attention.forward = _forward_returning_head_weights(attention, key, captured)
                if head_outputs:
                    handles.append(attention.out_proj.register_forward_pre_hook(
                        _recorder(captured.head_outputs, key)))
            yield captured
        finally:
            for handle in handles:
                handle.remove()
            for attention, previous in reversed(wrapped):
                if previous is None:
                    del attention.forward
                else:
                    attention.forward = previous


def _recorder(store: Dict[BlockKey, Tensor], key: BlockKey):
    def record(module: nn.Module, inputs: Tuple[Tensor, ...]) -> Optional[Tuple[Tensor, ...]]:
        store[key] = inputs[0]
        return None

    return record
