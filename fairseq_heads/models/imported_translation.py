"""What an imported Hugging Face translation model needs that fairseq's `transformer` cannot say
(`import-hf`, docs/hf_translation.md): five thin options of `gated_transformer`, all off by
default, so a model trained here is built as before.

- `--sinusoidal-table marian`: Marian's position table (sin of every frequency, then cos,
  frequencies 10000^(-2i/d), position 0 first) instead of fairseq's (10000^(-i/(d/2-1))).
  fairseq counts positions from its padding index + 1 (`utils.make_positions`), so row
  padding_idx + 1 + p holds Marian's position p: left-padded sources get the positions HF gives
  the same tokens right-padded.
- `--decoder-start-token pad`: the decoder reads fairseq's start symbol (eos, the first token
  of every prev_output_tokens: teacher forcing and `SequenceGenerator` alike) with <pad>'s
  embedding, as Marian starts decoding from <pad>. Only the decoder's lookup changes: the
  encoder's eos and the output row of eos stay eos.
- `--output-bias`: a `final_logits_bias` buffer added to the logits (Marian's; a buffer as in
  HF, so fine-tuning leaves it as it is).
- `--swish-activation`: swish (SiLU) in every feed-forward block, HF's "swish" (OPUS-MT's):
  fairseq 0.12's `--activation-fn` does not offer it (its `get_activation_fn("swish")` returns
  the class `nn.SiLU`, not a function).
- `--blocked-output-symbols`: fairseq symbols the imported vocabulary does not have (Marian
  has no <s>): their logits are BLOCKED_LOGIT, so the softmax runs over HF's vocabulary. A
  finite value, not -inf: label smoothing sums every log-probability, and -inf would make the
  L0 fine-tune's loss infinite; exp(BLOCKED_LOGIT) is 0 in fp32 and fp16 alike.
"""
from typing import List, Optional

import torch
from fairseq.models.transformer import TransformerConfig, TransformerDecoderBase
from fairseq.modules import SinusoidalPositionalEmbedding
from torch import Tensor, nn
from torch.nn import functional as F


SINUSOIDAL_TABLES = ("fairseq", "marian")
DECODER_START_TOKENS = ("eos", "pad")
BLOCKED_LOGIT = -1e4  # far below any real logit; exp() of it is 0 even in fp16's range


def parse_blocked_symbols(text: Optional[str]) -> List[int]:
    """--blocked-output-symbols (of gated_transformer and gated_llama) as sorted indices."""
    if not text:
        return []
    try:
        return sorted({int(x) for x in str(text).split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--blocked-output-symbols: expected comma-separated indices, got {text!r}") from None


def add_imported_translation_args(parser) -> None:
    parser.add_argument("--sinusoidal-table", choices=SINUSOIDAL_TABLES,
                        help="layout of the sinusoidal position table (default fairseq; marian: "
                             "HF MarianMTModel's, set by import-hf)")
    parser.add_argument("--decoder-start-token", choices=DECODER_START_TOKENS,
                        help="the embedding the decoder reads for its start symbol (default eos; "
                             "pad: Marian's decoder_start_token_id)")
    parser.add_argument("--output-bias", action="store_true",
                        help="a fixed bias added to the decoder's logits (HF Marian's "
                             "final_logits_bias)")
    parser.add_argument("--swish-activation", action="store_true",
                        help="feed-forward activation swish (SiLU), HF's 'swish', overriding "
                             "--activation-fn (fairseq 0.12 does not offer swish there)")
    parser.add_argument("--blocked-output-symbols", metavar="INDICES",
                        help="comma list of target dictionary indices never predicted (set by "
                             "import-hf: fairseq symbols the HF vocabulary lacks)")


def marian_sinusoidal_table(positions: int, dim: int) -> Tensor:
    """HF MarianSinusoidalPositionalEmbedding's weights: row p = [sin(p w_i) | cos(p w_i)],
    w_i = 10000^(-2i/dim), the sin half ceil(dim/2) wide (computed in float64, as HF does in
    numpy)."""
    sin_width = (dim + 1) // 2
    position = torch.arange(positions, dtype=torch.float64).unsqueeze(1)
    sin_freq = torch.pow(10000.0, -2 * torch.arange(sin_width, dtype=torch.float64) / dim)
    cos_freq = sin_freq[: dim // 2]
    return torch.cat([torch.sin(position * sin_freq), torch.cos(position * cos_freq)], dim=1).float()


class MarianSinusoidalPositions(SinusoidalPositionalEmbedding):
    """fairseq's sinusoidal module (its position counting, incremental step and padding) over
    Marian's table: row padding_idx + 1 + p is Marian's position p, rows up to padding_idx 0."""

    def __init__(self, embedding_dim: int, padding_idx: int, max_positions: int):
        super().__init__(embedding_dim, padding_idx, init_size=padding_idx + 1 + max_positions)
        table = marian_sinusoidal_table(max_positions, embedding_dim)
        self.weights = torch.cat([torch.zeros(padding_idx + 1, embedding_dim), table])
        # the model's max_positions() (inputs past HF's table are filtered out, as HF cannot
        # read them; fairseq would grow its own layout there)
        self.max_positions = max_positions


class DecoderStartEmbedding(nn.Embedding):
    """The decoder's token lookup with fairseq's start symbol read as `start` (same weights as
    the embedding it wraps: one parameter, shared with the encoder and the output projection
    wherever that one is)."""

    def __init__(self, embedding: nn.Embedding, eos: int, start: int):
        super().__init__(embedding.num_embeddings, embedding.embedding_dim, embedding.padding_idx,
                         _weight=embedding.weight)
        self.weight = embedding.weight
        self.eos, self.start = eos, start

    def forward(self, tokens: Tensor) -> Tensor:  # (no super(): TorchScript compiles this)
        return F.embedding(tokens.masked_fill(tokens == self.eos, self.start), self.weight,
                           self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)


class GatedTransformerDecoder(TransformerDecoderBase):
    """fairseq's decoder with one hook, `output_layer`: + final_logits_bias, blocked symbols."""
    blocked_output_symbols: List[int]  # (typed for TorchScript: the list may be empty)

    def __init__(self, cfg: TransformerConfig, dictionary, embed_tokens, no_encoder_attn=False,
                 output_bias: bool = False, blocked: Optional[List[int]] = None):
        super().__init__(cfg, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn)
        if output_bias:
            self.register_buffer("final_logits_bias", torch.zeros(len(dictionary)))
        else:
            self.final_logits_bias = None
        self.blocked_output_symbols = blocked or []
        if any(i >= len(dictionary) for i in self.blocked_output_symbols):
            raise ValueError(f"--blocked-output-symbols: index beyond the {len(dictionary)} symbols")

    def output_layer(self, features: Tensor) -> Tensor:  # (no super(): TorchScript compiles this)
        if self.adaptive_softmax is not None:
            return features  # fairseq's: the adaptive softmax projects later
        # contiguous: fairseq hands over (T, B, C) transposed, and torch's matmul folds such an
        # input into one mm only when the weight takes a gradient; under --freeze-decoder (the
        # shared embedding frozen) it broadcast the vocabulary-sized weight into a bmm instead,
        # a copy per sentence: encoder L0 steps took twice as long (benchmarks/frozen_decoder_step.py)
        logits = self.output_projection(features.contiguous())
        if self.final_logits_bias is not None:
            logits = logits + self.final_logits_bias.to(logits.dtype)
        if len(self.blocked_output_symbols) > 0:
            index = torch.tensor(self.blocked_output_symbols, device=logits.device)
            logits = logits.index_fill(-1, index, -1e4)  # BLOCKED_LOGIT (a literal for TorchScript)
        return logits


def build_decoder(args, tgt_dict, embed_tokens) -> GatedTransformerDecoder:
    """The gated model's decoder: the options above applied to fairseq's."""
    start = getattr(args, "decoder_start_token", None) or "eos"
    if start == "pad":
        embed_tokens = DecoderStartEmbedding(embed_tokens, tgt_dict.eos(), tgt_dict.pad())
    decoder = GatedTransformerDecoder(
        TransformerConfig.from_namespace(args), tgt_dict, embed_tokens,
        no_encoder_attn=getattr(args, "no_cross_attention", False),
        output_bias=bool(getattr(args, "output_bias", False)),
        blocked=parse_blocked_symbols(getattr(args, "blocked_output_symbols", None)))
    if getattr(args, "sinusoidal_table", None) == "marian":
        decoder.embed_positions = marian_positions(decoder.embed_positions, args.max_target_positions)
    return decoder


def marian_positions(fairseq_positions, max_positions: int) -> MarianSinusoidalPositions:
    if not isinstance(fairseq_positions, SinusoidalPositionalEmbedding):
        raise ValueError("--sinusoidal-table marian: needs sinusoidal positions (not "
                         "--encoder-learned-pos / --decoder-learned-pos / no positions)")
    return MarianSinusoidalPositions(fairseq_positions.embedding_dim,
                                     fairseq_positions.padding_idx, max_positions)


def apply_model_options(model, args) -> None:
    """The options that act on a built model: the encoder's positions (the decoder's are built
    in, `build_decoder`) and --swish-activation in every layer."""
    if getattr(args, "sinusoidal_table", None) == "marian":
        model.encoder.embed_positions = marian_positions(model.encoder.embed_positions,
                                                         args.max_source_positions)
    if getattr(args, "swish_activation", False):
        for layer in list(model.encoder.layers) + list(model.decoder.layers):
            layer.activation_fn = F.silu

