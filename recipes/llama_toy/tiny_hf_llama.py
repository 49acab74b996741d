"""A tiny random-initialised Hugging Face LlamaForCausalLM (2 layers, d=64, 4 query / 2 KV heads)
with a word-level tokenizer of a text's words: what the toy recipe imports, prunes and exports.

    python recipes/llama_toy/tiny_hf_llama.py OUT_DIR TEXT_FILE
"""
import collections
import json
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main(out_dir: str, text: str) -> None:
    counts = collections.Counter(w for line in open(text, encoding="utf-8") for w in line.split())
    vocab = ["<unk>", "<s>", "</s>"] + [w for w, _ in counts.most_common(1000)]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(out_dir, safe_serialization=True)
    tokenizer = {"version": "1.0", "added_tokens": [], "normalizer": None,
                 "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
                 "decoder": None, "truncation": None, "padding": None,
                 "model": {"type": "WordLevel", "vocab": {w: i for i, w in enumerate(vocab)},
                           "unk_token": "<unk>"}}
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
