"""`fairseq-heads export-hf`: a (pruned) `gated_llama` checkpoint imported from a Hugging Face
model -> a Hugging Face directory again (config.json, model.safetensors, the source's tokenizer
files), where HF can represent it.

HF's LLaMA-family configs have one query-head count and one KV-head count for every layer, and
query head h reads KV head h // (H / H_kv). So a model pruned by `--prune-unit kv-group` with the
same number of groups kept in every layer exports; anything else (per-query pruning that left
unequal groups, layers with different counts, a layer with no head) exits 2 saying why. The
gates are folded into o_proj's columns (a head's deterministic gate times its columns), so the
exported model computes what the gated one does in eval mode. The vocabulary goes back to HF's
order through the same map `import-hf` used (recomputed from the source directory).
"""
import json
import os
import shutil
from typing import Dict, List, NamedTuple

import torch

from ..checkpoints import load_checkpoint, model_options
from ..files import write_files_into
from .hf_config import HFImportError, read_config_json, read_hf_config
from .import_hf import LAYER_NAMES
from .vocabulary import read_tokenizer_vocabulary, vocabulary_map

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                   "special_tokens_map.json", "generation_config.json")


class ExportResult(NamedTuple):
    query_heads: int
    kv_heads: int
    files: List[str]


def build_from_state(state: dict):
    """The checkpoint's model, built from its options alone (placeholder dictionary)."""
    from fairseq import models
    from fairseq.data import Dictionary

    from ..models.gated_llama import GatedLlamaLanguageModel

    args = model_options(state)
    if getattr(args, "_name", getattr(args, "arch", "")) != "gated_llama" and not str(
            getattr(args, "arch", "")).startswith("gated_llama"):
        raise HFImportError(f"not a gated_llama checkpoint (arch {getattr(args, 'arch', None)!r})")
    dictionary = Dictionary()
    for i in range(state["model"]["decoder.embed_tokens.weight"].size(0) - len(dictionary)):
        dictionary.add_symbol(f"<placeholder{i}>")

    class Task:
        source_dictionary = target_dictionary = dictionary

    model = models.build_model(args, Task())
    assert isinstance(model, GatedLlamaLanguageModel)
    model.load_state_dict(state["model"], strict=True, model_cfg=args)
    return model.eval()


def hf_head_counts(model, path: str):
    """(query heads, KV heads) every layer has, when HF can represent the layout; else why not."""
    from ..models.llama_attention import LlamaAttention, uniform_group_size

    counts = []
    for layer, block in enumerate(model.decoder.layers):
        attention = block.self_attn
        if not isinstance(attention, LlamaAttention):
            raise HFImportError(f"{path}: layer {layer} has no attention heads left; HF's config "
                                f"cannot express it")
        if attention.num_heads % attention.num_kv_heads or not uniform_group_size(
                attention.kv_head_of, attention.num_kv_heads):
            raise HFImportError(f"{path}: layer {layer}'s query heads are not {attention.num_kv_heads} "
                                f"equal KV groups (per-query pruning); HF needs whole groups: prune "
                                f"with --prune-unit kv-group")
        counts.append((attention.num_heads, attention.num_kv_heads))
    if len(set(counts)) != 1:
        raise HFImportError(f"{path}: layers keep different head counts {sorted(set(counts))} "
                            f"(query, KV); HF's config has one count for every layer")
    return counts[0]


def hf_weights(model, rows: List[int], tied: bool) -> Dict[str, torch.Tensor]:
    """HF name -> tensor; `rows[i]`: our dictionary row of HF id i."""
    index = torch.tensor(rows)
    decoder = model.decoder
    out = {"model.embed_tokens.weight": decoder.embed_tokens.weight.index_select(0, index),
           "model.norm.weight": decoder.layer_norm.weight}
    if not tied:
        out["lm_head.weight"] = decoder.output_projection.weight.index_select(0, index)
    theirs = {ours: hf for hf, ours in LAYER_NAMES.items()}
    for i, block in enumerate(decoder.layers):
        for name, tensor in block.state_dict().items():
            module, _, kind = name.rpartition(".")
            if module in theirs:
                out[f"model.layers.{i}.{theirs[module]}.{kind}"] = tensor
        attention = block.self_attn
        gate = attention.gate().detach()  # eval mode: the deterministic gates (their rule)
        out[f"model.layers.{i}.self_attn.o_proj.weight"] = (
            attention.out_proj.weight.view(-1, attention.num_heads, attention.head_dim)
            * gate.view(1, -1, 1)).reshape(attention.out_proj.weight.shape)
    return {name: t.detach().contiguous().clone() for name, t in out.items()}


def export_hf(checkpoint: str, source_dir: str, out_dir: str) -> ExportResult:
    shape = read_hf_config(source_dir)  # checks the source first: one line if it is not one
    config = read_config_json(source_dir)
    tokenizer = read_tokenizer_vocabulary(source_dir, shape.vocab_size)
    vocab = vocabulary_map(tokenizer.strings, shape.eos_token_id, shape.bos_token_id, tokenizer.unk_id)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise HFImportError(f"--out {out_dir}: is a file, not a folder")
    state = load_checkpoint(checkpoint)
    rows = state["model"]["decoder.embed_tokens.weight"].size(0)
    if rows != vocab.size:
        raise HFImportError(f"{checkpoint}: {rows} dictionary rows, but {source_dir}'s vocabulary "
                            f"gives {vocab.size}: not the model imported from it")
    model = build_from_state(state)
    heads, kv_heads = hf_head_counts(model, checkpoint)
    tied = model.decoder.share_input_output_embed
    weights = hf_weights(model, vocab.hf_to_fairseq, tied)
    config.update(num_attention_heads=heads, num_key_value_heads=kv_heads,
                  head_dim=model.decoder.layers[0].self_attn.head_dim, tie_word_embeddings=tied,
                  torch_dtype="float32")

    def write(staging: str) -> None:
        from safetensors.torch import save_file

        save_file(weights, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(staging, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(source_dir, name)):
                shutil.copyfile(os.path.join(source_dir, name), os.path.join(staging, name))

    return ExportResult(heads, kv_heads, write_files_into(out_dir, write))
