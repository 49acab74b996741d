"""Matmul FLOPs of translating one sentence with a Transformer whose attention blocks may have
lost heads: the prediction a measured decoding speed-up of a pruned model is compared with.

  encoder, per source token:  q/k/v/out projections 4·d·a, scores and context 2·S·a, FFN 2·d·f
  decoder, per step and hypothesis (incremental): self-attention 4·d·a + 2·t·a,
      encoder-decoder attention 2·d·a (q, out) + 2·S·a (+ its k/v, 2·d·a per source token,
      once per hypothesis), FFN 2·d·f, output projection d·V

with a = kept heads × head dim (0 for a layer without heads), d model dim, f FFN dim, V vocab,
S source length, t target position; ×2 FLOPs per multiply-add (Kaplan et al. 2020, table 1).
Softmax, layer norms, embeddings, cache reordering and beam bookkeeping are not matmuls and
are not counted.
"""
from typing import List, Tuple

from torch import nn

from ..heads import iter_attention


def attention_widths(model: nn.Module) -> List[Tuple[str, int]]:
    """[(type, kept heads × head dim)] for every attention block."""
    return [(t, attention.num_heads * attention.head_dim) for t, _, attention in iter_attention(model)]


def generation_flops(widths, d, f, vocab, beam, src_len, hyp_len, encoder_layers, decoder_layers) -> float:
    """Matmul FLOPs of translating one sentence of `src_len` tokens into `hyp_len` (module doc)."""
    enc = sum(4 * d * a + 2 * src_len * a for t, a in widths if t == "enc-self") * src_len
    enc += encoder_layers * 2 * d * f * src_len
    dec = 0.0
    for step in range(1, int(round(hyp_len)) + 1):
        dec += sum(4 * d * a + 2 * step * a for t, a in widths if t == "dec-self")
        dec += sum(2 * d * a + 2 * src_len * a for t, a in widths if t == "enc-dec")
        dec += decoder_layers * 2 * d * f + d * vocab
    dec += sum(2 * d * a * src_len for t, a in widths if t == "enc-dec")  # static k/v, once
    return 2 * (enc + beam * dec)
