"""Tiny random-initialised Hugging Face LLaMA / Qwen2 directories, built from a config (no
download): config.json, model.safetensors, tokenizer.json (a word-level tokenizer whose
vocabulary has the awkward strings: HF specials, a line break, trailing space, "<pad>")."""
import json
import os

import torch

from core.rounding import magnitude, sum_tolerance

VOCAB = 96  # embedding rows; the tokenizer has fewer strings (the rest: rows without a string)


def parity_tolerance(reference: torch.Tensor) -> float:
    """How far our float32 log-probs may be from Hugging Face's: the two implementations sum in
    different orders (SDPA against HF's eager matmuls; RoPE and RMSNorm the same formulas), so
    within the rounding bound of the models' widest sum (the log-sum-exp over VOCAB words; width
    32, FFN 48) at the scale of the log-probs (tests/core/rounding.py): 5.7e-5 at |log p| ~ 5.
    Measured ~1e-6 on AVX512, AVX2 and default kernels; a misplaced rotation or norm moves the
    log-probs by more than 1e-2."""
    return sum_tolerance(torch.float32, VOCAB, magnitude(reference))


def tokenizer_strings(kind: str):
    if kind in ("llama", "mistral"):  # sentencepiece-style specials, equal to fairseq's
        specials = ["<unk>", "<s>", "</s>"]
    else:  # qwen2-style: none of fairseq's strings; eos is <|endoftext|>
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    awkward = ["\n", "a ", "<pad>", "▁the", "Ġworld"]
    words = [f"w{i}" for i in range(VOCAB - 4 - len(specials) - len(awkward))]
    return specials + awkward + words  # VOCAB - 4 strings: 4 rows without one


def write_tokenizer_json(path, strings, unk):
    vocab = {s: i for i, s in enumerate(strings)}
    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": unk}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def hf_model(kind: str, kv_heads: int, tied: bool = False, seed: int = 0):
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=128,
                  rms_norm_eps=1e-5, tie_word_embeddings=tied, attn_implementation="eager")
    torch.manual_seed(seed)
    if kind == "llama":
        config = LlamaConfig(rope_theta=500.0, bos_token_id=1, eos_token_id=2, **common)
        model = LlamaForCausalLM(config)
    elif kind == "mistral":  # LLaMA's layers; its sliding window off
        config = MistralConfig(rope_theta=1000.0, bos_token_id=1, eos_token_id=2, sliding_window=None, **common)
        model = MistralForCausalLM(config)
    else:
        config = Qwen2Config(rope_theta=10000.0, bos_token_id=None, eos_token_id=0, **common)
        model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # HF initialises RMSNorm weights to 1 and biases to 0: make them count
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
        # peaked next-token distributions (HF's std 0.02 gives nearly uniform ones), so that
        # greedy choices are not near-ties
        model.lm_head.weight.mul_(20)
    return model.eval()


def save_hf_model(model, kind: str, directory) -> str:
    model.save_pretrained(str(directory), safe_serialization=True)
    strings = tokenizer_strings(kind)
    write_tokenizer_json(os.path.join(directory, "tokenizer.json"), strings,
                         "<|im_end|>" if kind == "qwen2" else "<unk>")  # WordLevel needs one
    return str(directory)
