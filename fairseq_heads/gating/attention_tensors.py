"""The gated attention block's tensor arithmetic as pure functions (gated_attention.py,
llama_attention.py): attention masks in fairseq's and torch's shapes, beams grouped over one
source, heads' slices of the concatenated outputs and their gates. Scriptable (torch.jit).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor


def scale_heads(head_outputs: Tensor, per_head: Tensor) -> Tensor:
    """Multiply each head's slice of the concatenated head outputs (..., H * D) by per_head (H,)."""
    num_heads = per_head.numel()
    shape = head_outputs.shape
    per_head = per_head.to(head_outputs.dtype)
    return (head_outputs.view(*shape[:-1], num_heads, shape[-1] // num_heads)
            * per_head.unsqueeze(-1)).view(shape)


# ---------------------------------------------------------------- masks, as pure functions


def is_causal_mask(mask: Tensor) -> bool:
    """True iff the square (T, T) `mask` blocks exactly the future: -inf (float) or nonzero
    (bool / uint8) strictly above the diagonal and 0 / False elsewhere."""
    if mask.dim() != 2 or mask.size(0) != mask.size(1):
        return False
    future = torch.ones(mask.shape, dtype=torch.bool, device=mask.device).triu(1)
    if mask.is_floating_point():
        expected = torch.zeros(mask.shape, dtype=mask.dtype, device=mask.device)
        return torch.equal(mask, expected.masked_fill(future, float("-inf")))
    return torch.equal(mask.to(torch.bool), future)


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """An attention mask as a float mask to add to the scores: float masks as they are (in
    `dtype`), bool / uint8 masks -inf where nonzero (as torch's MultiheadAttention reads them)."""
    if mask.is_floating_point():
        return mask.to(dtype)
    blocked = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return blocked.masked_fill(mask.to(torch.bool), float("-inf"))


def attn_mask_4d(attn_mask: Tensor, bsz: int, num_heads: int) -> Tensor:
    """(Tq, Tk) or (bsz * H, Tq, Tk), fairseq / torch's two shapes -> (1 | bsz, 1 | H, Tq, Tk)."""
    if attn_mask.dim() == 2:
        return attn_mask.view(1, 1, attn_mask.size(0), attn_mask.size(1))
    assert attn_mask.dim() == 3 and attn_mask.size(0) == bsz * num_heads, \
        "attn_mask must be (tgt_len, src_len) or (bsz * num_heads, tgt_len, src_len)"
    return attn_mask.view(bsz, num_heads, attn_mask.size(1), attn_mask.size(2))


def pad_key_columns(mask: Optional[Tensor], extra: int) -> Optional[Tensor]:
    """Let every query see `extra` keys appended at the end (bias_kv / zero attention)."""
    if mask is None or extra == 0:
        return mask
    return F.pad(mask, (0, extra))


def group_beams(x: Tensor, groups: int, beam: int) -> Tensor:
    """(groups * beam, A, T, X) -> (groups, A, beam * T, X): the queries of one source sentence's
    beam hypotheses side by side, so that they attend to its keys without copying them. A
    leading dim of 1 (a mask shared by the batch) is repeated along T instead."""
    if x.size(0) == 1:
        return x.repeat(1, 1, beam, 1)
    a, t, width = x.size(1), x.size(2), x.size(3)
    return x.view(groups, beam, a, t, width).transpose(1, 2).reshape(groups, a, beam * t, width)


def ungroup_beams(x: Tensor, bsz: int) -> Tensor:
    """Inverse of group_beams: (groups, A, beam * T, X) -> (bsz, A, T, X)."""
    groups, a, width = x.size(0), x.size(1), x.size(3)
    beam = bsz // groups
    return x.view(groups, a, beam, -1, width).transpose(1, 2).reshape(bsz, a, -1, width)


def gate_heads(heads: Tensor, gate: Tensor) -> Tensor:
    """(T, B, H * D) head outputs with head h's slice times gate[h] (scale_heads, scriptable)."""
    t, b, width = heads.size(0), heads.size(1), heads.size(2)
    num_heads = gate.numel()
    return (heads.view(t, b, num_heads, width // num_heads)
            * gate.to(heads.dtype).view(1, 1, num_heads, 1)).view(t, b, width)


def gate_columns(weight: Tensor, gate: Tensor) -> Tensor:
    """out_proj's weight (E_out, H * D) with head h's D input columns times gate[h]."""
    heads = gate.numel()
    return (weight.view(weight.size(0), heads, -1) * gate.to(weight.dtype).view(1, heads, 1)).view(weight.shape)


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """(T, B, H * D) -> (B, H, T, D), a view; the layout fairseq's Python path and cache use."""
    t, b, width = x.size(0), x.size(1), x.size(2)
    return x.view(t, b, num_heads, width // num_heads).permute(1, 2, 0, 3)
