"""Shared helpers for batched attention tensors (B, *heads, Tq, Tk) and position masks.

A "heads" shape is whatever sits between the batch dim and (Tq, Tk): ``(H,)`` for one
layer, ``(L, H)`` for a stacked type.  Masks are (B, T) bool and mark the real,
non-EOS, non-pad positions; nothing here assumes where padding is.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch

AttentionInput = Union[torch.Tensor, Sequence[torch.Tensor]]


def expand_mask(mask: torch.Tensor, num_head_dims: int) -> torch.Tensor:
    """(B, T) -> (B, 1, ..., 1, T) with ``num_head_dims`` singleton dims, for broadcasting."""
    return mask.reshape(mask.shape[:1] + (1,) * num_head_dims + mask.shape[1:])


def check_shapes(attn: torch.Tensor, query_mask: torch.Tensor, key_mask: torch.Tensor) -> int:
    """Validate (B, *heads, Tq, Tk) against (B, Tq) / (B, Tk) masks; return len(heads)."""
    if attn.dim() < 3:
        raise ValueError(f"attention must be (B, *heads, Tq, Tk), got shape {tuple(attn.shape)}")
    b, tq, tk = attn.shape[0], attn.shape[-2], attn.shape[-1]
    if tuple(query_mask.shape) != (b, tq):
        raise ValueError(f"query_mask must be {(b, tq)}, got {tuple(query_mask.shape)}")
    if tuple(key_mask.shape) != (b, tk):
        raise ValueError(f"key_mask must be {(b, tk)}, got {tuple(key_mask.shape)}")
    return attn.dim() - 3


def masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over the last dim restricted to ``mask`` (broadcastable); -inf where nothing is selected."""
    return values.masked_fill(~mask, float("-inf")).amax(-1)


def masked_argmax(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Argmax over the last dim restricted to ``mask``; ties -> lowest index (first position)."""
    return values.masked_fill(~mask, float("-inf")).argmax(-1)


def masked_max_argmax(values: torch.Tensor, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`masked_max` and :func:`masked_argmax` from one masked copy (one pass over values).

    ``torch.max(dim)`` returns the first maximal index, the same tie rule as ``argmax``.
    """
    best, index = values.masked_fill(~mask, float("-inf")).max(-1)
    return best, index


def causal_prefix_mask(key_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) key mask -> (B, T, T): keys k <= q that ``key_mask`` selects (a query's causal prefix)."""
    t = key_mask.shape[-1]
    lower = torch.ones(t, t, dtype=torch.bool, device=key_mask.device).tril()
    return lower.unsqueeze(0) & key_mask.unsqueeze(1)


def prefix_argmax(attn: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
    """Argmax (B, *heads, T) of self-attention (B, *heads, T, T) over each query's causal prefix
    of ``key_mask`` keys (:func:`causal_prefix_mask`); ties -> earliest position."""
    num_head_dims = check_shapes(attn, key_mask, key_mask)
    prefix = causal_prefix_mask(key_mask)
    return masked_argmax(attn, prefix.reshape(prefix.shape[:1] + (1,) * num_head_dims + prefix.shape[1:]))


def token_positions(mask: torch.Tensor) -> torch.Tensor:
    """Index of each position among the selected positions of its row (0-based); -1 elsewhere.

    This is the *unpadded* token index: with left padding ``[pad pad a b]`` -> ``[-1 -1 0 1]``.
    """
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill(~mask, -1)


def per_layer(
    fn: Callable[..., Tuple[torch.Tensor, ...]], attn: AttentionInput, *args, **kwargs
) -> Tuple[torch.Tensor, ...]:
    """Apply ``fn(attn, ...)`` to a tensor, or to each layer of a list and stack outputs at dim 1.

    Lets callers pass one layer (B, H, Tq, Tk) or a type's layers as a list of L such tensors
    (stacked outputs get heads shape (L, H)) without materialising (B, L, H, Tq, Tk).
    Every output of ``fn`` must have the batch dim first.
    """
    if isinstance(attn, torch.Tensor):
        return fn(attn, *args, **kwargs)
    return stack_layers([fn(layer, *args, **kwargs) for layer in attn])


def stack_layers(outputs: Sequence[Tuple[torch.Tensor, ...]]) -> Tuple[torch.Tensor, ...]:
    """Per-layer output tuples (each part batch first) -> one tuple, each part stacked at dim 1."""
    if not outputs:
        raise ValueError("empty list of layers")
    return tuple(torch.stack(parts, dim=1) for parts in zip(*outputs))


class SharedReductions:
    """Reductions over the keys of one attention type's per-layer weights that several metrics
    take, each computed once per batch on first use and cached.

    Each is a pass over the full (B, H, Tq, Tk) weights, which costs far more than what the
    metrics then do with the (B, H, Tq) results; computed per metric, the confidence, positional,
    previous-token and rare-word metrics repeated the same masked max / argmax. Values are in the
    weights' dtype: a max or argmax is exact in any float dtype, so a metric that accumulates in
    float64 converts the small result, not the weights.
    """

    def __init__(self, weights: Sequence[torch.Tensor], key_mask: torch.Tensor):
        self.weights = list(weights)  # per layer (B, H, Tq, Tk)
        self.key_mask = key_mask  # (B, Tk)
        self._key_max: Optional[Tuple[List[torch.Tensor], List[torch.Tensor]]] = None
        self._prefix_argmax: Optional[List[torch.Tensor]] = None

    def key_max(self) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """Per layer, the max and argmax (B, H, Tq) over the keys ``key_mask`` selects."""
        if self._key_max is None:
            mask = expand_mask(self.key_mask, 2)  # (B, 1, 1, Tk)
            pairs = [masked_max_argmax(layer, mask) for layer in self.weights]
            self._key_max = ([p[0] for p in pairs], [p[1] for p in pairs])
        return self._key_max

    def prefix_argmax(self) -> List[torch.Tensor]:
        """Per layer, :func:`prefix_argmax` (B, H, T) (self-attention, Tq == Tk)."""
        if self._prefix_argmax is None:
            self._prefix_argmax = [prefix_argmax(layer, self.key_mask) for layer in self.weights]
        return self._prefix_argmax
