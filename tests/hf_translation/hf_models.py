"""Tiny random-initialised Hugging Face translation models, built from a config (no download):
Marian (swish, post-norm, Marian's table, <pad> start, final_logits_bias, one vocabulary with
</s> at id 0 and <pad> last), FSMT (relu, post-norm, separate source and target vocabularies)
and M2M100 (gelu, pre-norm with final norms, language tokens past vocab.json), each saved as
config.json + model.safetensors + the vocabulary files `import-hf` reads."""
import json
import os

import torch

from core.rounding import magnitude, sum_tolerance

KINDS = ("marian", "fsmt", "m2m_100")
VOCAB = 64  # rows (FSMT: source; its target has TARGET_VOCAB)
TARGET_VOCAB = 56
LANG_TOKENS = ("__en__", "__fr__")  # M2M100's, at the last rows (not in vocab.json)
SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
             max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
             activation_dropout=0.0, init_std=0.3)
def parity_tolerance(reference: torch.Tensor, words: int = VOCAB) -> float:
    """How far our float32 log-probs may be from Hugging Face's: the two implementations sum in
    different orders (fused against eager attention), so within the rounding bound of the models'
    widest sum (the log-sum-exp over `words`; width 32, FFN 48) at the scale of the log-probs
    (tests/core/rounding.py). At these models' |log p| ~ 30-45 that is 2-3e-4 (VOCAB words) or
    ~1e-3 (a tokenizer's ~200). Measured: <= 4.6e-5 under AVX512 and default (SSE4) CPU kernels
    on a Xeon, 1.0e-4 on an AVX2 AMD EPYC (MKL's Zen kernels), which an earlier cap at 1e-4 (an
    issue's acceptance figure, not a rounding bound) failed by a hair; a wrong table, norm,
    scale or mapping moves the log-probs by more than 1e-2."""
    return sum_tolerance(torch.float32, max(words, SIZES["decoder_ffn_dim"]), magnitude(reference))


def words(n, prefix="w", start=0):
    return [f"{prefix}{i}" for i in range(start, start + n)]


def vocabularies(kind: str):
    """{file name: [string per HF id]} of `kind`'s vocabulary files."""
    if kind == "marian":  # Marian's own layout: </s> first, <pad> appended last, no <s>
        return {"vocab.json": ["</s>", "<unk>", "▁a", "a "] + words(VOCAB - 5) + ["<pad>"]}
    fairseq = ["<s>", "<pad>", "</s>", "<unk>"]
    if kind == "fsmt":
        return {"vocab-src.json": fairseq + words(VOCAB - 4, "s"),
                "vocab-tgt.json": fairseq + words(TARGET_VOCAB - 4, "t")}
    return {"vocab.json": fairseq + words(VOCAB - 4 - len(LANG_TOKENS))}


def hf_config(kind: str, tied: bool = True):
    from transformers import FSMTConfig, M2M100Config, MarianConfig

    if kind == "marian":
        return MarianConfig(vocab_size=VOCAB, decoder_vocab_size=VOCAB, pad_token_id=VOCAB - 1,
                            eos_token_id=0, decoder_start_token_id=VOCAB - 1, forced_eos_token_id=None,
                            activation_function="swish", scale_embedding=True,
                            share_encoder_decoder_embeddings=True, tie_word_embeddings=tied, **SIZES)
    if kind == "fsmt":
        return FSMTConfig(langs=["en", "de"], src_vocab_size=VOCAB, tgt_vocab_size=TARGET_VOCAB,
                          activation_function="relu", scale_embedding=True, forced_eos_token_id=None,
                          **SIZES)
    return M2M100Config(vocab_size=VOCAB, activation_function="gelu", scale_embedding=True,
                        tie_word_embeddings=tied, forced_eos_token_id=None, **SIZES)


def hf_model(kind: str, tied: bool = True, seed: int = 0, config=None):
    from transformers import FSMTForConditionalGeneration, M2M100ForConditionalGeneration, MarianMTModel

    classes = {"marian": MarianMTModel, "fsmt": FSMTForConditionalGeneration,
               "m2m_100": M2M100ForConditionalGeneration}
    config = config or hf_config(kind, tied)  # (another config: e.g. a vocabulary of a real tokenizer's size)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = classes[kind](config)
    with torch.no_grad():  # HF initialises norms to 1 and biases to 0: make them count
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith(".weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "embed_tokens" in name or "shared" in name or "lm_head" in name:
                p.normal_(0, 1)  # peaked next-token distributions: no near-ties in greedy/beam
        if kind == "marian":
            model.final_logits_bias.normal_(0, 1)
    return model.eval()


def save_hf_model(model, kind: str, directory) -> str:
    model.save_pretrained(str(directory), safe_serialization=True)
    for name, strings in vocabularies(kind).items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump({s: i for i, s in enumerate(strings)}, f)
    return str(directory)
