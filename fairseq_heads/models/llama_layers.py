"""The pieces of a LLaMA-family decoder that fairseq does not have: RMSNorm, rotary position
embeddings (RoPE) and the SwiGLU feed-forward block, as small pure functions and modules.

Each follows Hugging Face transformers' LLaMA implementation (`modeling_llama.py`), the reference
the imported checkpoints were trained with, so that an imported model's log-probabilities equal
HF's:

- RMSNorm: Zhang & Sennrich 2019, "Root Mean Square Layer Normalization" (arXiv 1910.07467);
  computed in float32 and cast back, as HF's `LlamaRMSNorm`.
- RoPE: Su et al. 2021, "RoFormer" (arXiv 2104.09864), in HF's *rotate-half* layout: the two
  halves of a head's dimensions (not interleaved pairs) form the rotated planes; angles in
  float32 (HF's `LlamaRotaryEmbedding`, `rotate_half`, `apply_rotary_pos_emb`).
- SwiGLU: Shazeer 2020, "GLU Variants Improve Transformer" (arXiv 2002.05202):
  down(silu(gate(x)) * up(x)), HF's `LlamaMLP`.
"""
from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension, in float32 (HF's order:
    normalise in float32, cast to the input dtype, then scale)."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)

    def conservative_lrp_forward(self, x: Tensor) -> Tensor:
        """The same values with 1/rms a constant: CP-LRP's rule for LayerNorm's 1/std (Ali et
        al. 2022, "XAI for Transformers: Better Explanations through Conservative
        Propagation"), which AttnLRP (Achtibat et al. 2024) applies to RMSNorm too: the norm is
        a linear map on the modified graph and conserves relevance."""
        x32 = x.float()
        scale = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps).detach()
        return self.weight * (x32 * scale).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}"


def rotary_inverse_frequencies(head_dim: int, theta: float) -> Tensor:
    """theta^(-2i/d) for i = 0 .. d/2 - 1 (RoFormer eq. 15; HF's default rope `inv_freq`)."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head dimension, got {head_dim}")
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def rotary_cos_sin(positions: Tensor, head_dim: int, theta: float,
                   dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
    """(cos, sin), each (T, head_dim), for integer positions (T,): angles position * inv_freq in
    float32, repeated for both halves (rotate-half layout), cast to `dtype` as HF does."""
    inv_freq = rotary_inverse_frequencies(head_dim, theta).to(positions.device)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension."""
    half = x.size(-1) // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (..., T, head_dim) queries or keys by their positions' angles."""
    return x * cos + rotate_half(x) * sin


class SwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), no biases (HF's parameter names)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def conservative_lrp_forward(self, x: Tensor) -> Tensor:
        """The same values with the gate silu(gate_proj(x)) a constant: the signal-take-all
        rule for multiplicative gates (Arras et al. 2017, "Explaining Recurrent Neural Network
        Predictions in Sentiment Analysis", for LSTM gates), the same choice CP-LRP makes for
        attention probabilities: all relevance goes through up_proj, and the block, linear on
        the modified graph, conserves it. (AttnLRP splits a product's relevance evenly between
        its factors instead.)"""
        return self.down_proj(F.silu(self.gate_proj(x)).detach() * self.up_proj(x))
