"""Previous-token heads of a causal (decoder-only) model.

Definition (exactly what is computed), per head, pooled over the subset:

    mass(head)  = sum_{q in Q} a[head, q, q-1] / |Q|
    share(head) = #{q in Q : argmax_{k in K_q} a[head, q, k] == q-1} / |Q|

Q: query positions that are real tokens (not pad, not EOS) whose previous position q-1 is a real
token too (so the first token of a block and the token after an EOS are not queries); K_q: the
real tokens at positions <= q (the causal prefix, EOS excluded, as for confidence).  Ties in the
argmax go to the earliest position.  Uniform attention over n prefix tokens scores 1/n on both.

Label (stated before any model was scored): ``previous-token`` when mass >= 0.5, i.e. the head
puts the majority of its attention on the previous token.  share is the paper's positional(-1)
share restricted to these queries; its 0.9 threshold is the positional label.
Bootstrap unit: the sentence / block.
"""
from __future__ import annotations

from typing import Tuple

import torch

from ._batch import AttentionInput, check_shapes, expand_mask, masked_argmax, per_layer
from ..streaming import PairedRatioAccumulator

PREVIOUS_TOKEN_THRESHOLD = 0.5


def causal_key_mask(token_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) real-token mask -> (B, T, T) keys k <= q that are real tokens."""
    t = token_mask.shape[-1]
    lower = torch.ones(t, t, dtype=torch.bool, device=token_mask.device).tril()
    return lower.unsqueeze(0) & token_mask.unsqueeze(1)


def previous_token_sums(attn: torch.Tensor, token_mask: torch.Tensor
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sentence (mass numerator, share numerator, denominator), each (B, *heads)."""
    num_head_dims = check_shapes(attn, token_mask, token_mask)
    queries = token_mask.clone()
    queries[:, 0] = False
    queries[:, 1:] &= token_mask[:, :-1]
    attn = attn.to(torch.float64)
    on_previous = torch.diagonal(attn, offset=-1, dim1=-2, dim2=-1)  # (B, *heads, T-1): a[q, q-1]
    on_previous = torch.cat([on_previous.new_zeros(on_previous.shape[:-1] + (1,)), on_previous], -1)
    keys = causal_key_mask(token_mask)  # (B, T, T)
    best = masked_argmax(attn, keys.reshape(keys.shape[:1] + (1,) * num_head_dims + keys.shape[1:]))
    position = torch.arange(token_mask.shape[-1], device=attn.device)
    hit = (best == position - 1)
    q = expand_mask(queries, num_head_dims)
    mass = (on_previous * q).sum(-1)
    share = (hit & q).to(torch.float64).sum(-1)
    count = q.to(torch.float64).sum(-1).expand_as(mass)
    return mass, share, count


class PreviousTokenAccumulator(PairedRatioAccumulator):
    """Streams :func:`previous_token_sums`; finalize gives (mass, share) estimates of head_shape."""

    def update(self, attn: AttentionInput, token_mask: torch.Tensor) -> None:
        self.update_pair(*per_layer(previous_token_sums, attn, token_mask))
