"""Shared helpers for batched attention tensors (B, *heads, Tq, Tk) and position masks.

A "heads" shape is whatever sits between the batch dim and (Tq, Tk): ``(H,)`` for one
layer, ``(L, H)`` for a stacked type.  Masks are (B, T) bool and mark the real,
non-EOS, non-pad positions; nothing here assumes where padding is.
"""

from __future__ import annotations

from typing import Callable, Sequence, Tuple, Union

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
    outputs = [fn(layer, *args, **kwargs) for layer in attn]
    if not outputs:
        raise ValueError("empty list of layers")
    return tuple(torch.stack(parts, dim=1) for parts in zip(*outputs))
