"""`fairseq-heads export-hf` for translation models: a (pruned, fine-tuned) `gated_transformer`
imported from a Hugging Face Marian, FSMT or M2M100 directory -> that format again.

HF's three classes derive the head size from d_model / heads, one head count per side, so a
physically smaller attention block has no HF form; the function it computes does: every layer
keeps the source's head count, a removed head's q/k/v rows and out_proj columns are zeros (its
output is 0, as in the pruned block), and each kept head's out_proj columns are multiplied by
its deterministic gate (eval mode). So every head layout exports, with the source's config.json
unchanged; what does not is refused in one line: a checkpoint that is not a gated_transformer
of the source's shape and conventions (`HFImportError`, exit status 2).
"""
import os
import shutil
from typing import Dict, List, NamedTuple

import torch

from ..checkpoints import load_checkpoint, model_options
from ..files import write_files_into
from ..heads import iter_attention
from .hf_config import HFImportError
from .import_translation import PLAIN, locate_tensors, read_vocabulary_maps, tensor_plan
from .translation_config import read_translation_config

SOURCE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "vocab.json", "vocab-src.json", "vocab-tgt.json",
                "merges.txt", "source.spm", "target.spm", "sentencepiece.bpe.model")
# options of ours that must be what import-hf set from the source's config
CONVENTIONS = ("encoder_normalize_before", "decoder_normalize_before", "sinusoidal_table",
               "decoder_start_token", "output_bias", "swish_activation", "activation_fn",
               "no_scale_embedding", "share_all_embeddings", "layernorm_embedding",
               "encoder_learned_pos", "decoder_learned_pos", "encoder_layers", "decoder_layers",
               "encoder_embed_dim", "encoder_ffn_embed_dim", "decoder_ffn_embed_dim",
               "encoder_attention_heads", "decoder_attention_heads")


class TranslationExportResult(NamedTuple):
    heads: Dict[str, List[int]]  # type -> heads kept per layer (the rest exported as zeros)
    files: List[str]


def build_translation_model(state: dict, path: str):
    from fairseq import models
    from fairseq.data import Dictionary

    args = model_options(state)
    if not str(getattr(args, "arch", "")).startswith("gated_transformer"):
        raise HFImportError(f"{path}: not a gated_transformer checkpoint (arch {getattr(args, 'arch', None)!r})")

    def placeholder(rows: int) -> Dictionary:
        dictionary = Dictionary()
        for i in range(rows - len(dictionary)):
            dictionary.add_symbol(f"<placeholder{i}>")
        return dictionary

    source = placeholder(state["model"]["encoder.embed_tokens.weight"].size(0))
    target = (source if getattr(args, "share_all_embeddings", False)
              else placeholder(state["model"]["decoder.embed_tokens.weight"].size(0)))

    class Task:
        source_dictionary, target_dictionary = source, target

    model = models.build_model(args, Task())
    model.load_state_dict(state["model"], strict=True, model_cfg=args)
    return args, model.eval()


def imported_options(shape):
    """The model options `import-hf` gives a model of `shape` (parsed as fairseq-train would)."""
    from fairseq import options

    user_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return options.parse_args_and_arch(options.get_training_parser(), [
        "unused", "--task", "translation", "--arch", "gated_transformer", "--user-dir", user_dir,
        *shape.fairseq_options()])


def _differ(ours, theirs) -> bool:
    flags = (bool, type(None))
    return bool(ours) != bool(theirs) if isinstance(ours, flags) or isinstance(theirs, flags) else ours != theirs


def check_conventions(args, expected, path: str, source_dir: str) -> None:
    for name in CONVENTIONS:
        ours, theirs = getattr(args, name, None), getattr(expected, name, None)
        if _differ(ours, theirs):
            raise HFImportError(f"{path}: option {name}={ours!r}, but {source_dir}'s model has "
                                f"{theirs!r}: not a model imported from it, and HF's config cannot say it")


def full_attention_weights(attention, heads: int) -> Dict[str, torch.Tensor]:
    """q/k/v/out of `heads` heads, removed ones zero, gates folded into out_proj's columns."""
    d = attention.out_proj.out_features
    head_dim = d // heads
    kept = list(getattr(attention, "kept_heads", range(attention.num_heads)))
    gate = attention.gate().detach() if callable(getattr(attention, "gate", None)) else torch.ones(len(kept))
    out = {f"{p}.{k}": torch.zeros(d, d) if k == "weight" else torch.zeros(d)
           for p in ("q_proj", "k_proj", "v_proj") for k in ("weight", "bias")}
    out["out_proj.weight"] = torch.zeros(d, d)
    out["out_proj.bias"] = attention.out_proj.bias.detach().clone()
    for j, h in enumerate(kept):
        ours, theirs = slice(j * head_dim, (j + 1) * head_dim), slice(h * head_dim, (h + 1) * head_dim)
        for p in ("q_proj", "k_proj", "v_proj"):
            module = getattr(attention, p)
            out[f"{p}.weight"][theirs] = module.weight.detach()[ours]
            out[f"{p}.bias"][theirs] = module.bias.detach()[ours]
        out["out_proj.weight"][:, theirs] = attention.out_proj.weight.detach()[:, ours] * gate[j]
    return out


def export_translation(checkpoint: str, source_dir: str, out_dir: str) -> TranslationExportResult:
    shape = read_translation_config(source_dir)  # the source first: one line if it is not one
    source, target = read_vocabulary_maps(source_dir, shape)
    plan = tensor_plan(shape)
    _, located = locate_tensors(source_dir, plan)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise HFImportError(f"--out {out_dir}: is a file, not a folder")
    state = load_checkpoint(checkpoint)
    args, model = build_translation_model(state, checkpoint)
    check_conventions(args, imported_options(shape), checkpoint, source_dir)
    ours = {k: v.detach() for k, v in model.state_dict().items()}
    heads_of = {"enc-self": shape.encoder_heads, "dec-self": shape.decoder_heads, "enc-dec": shape.decoder_heads}
    kept: Dict[str, List[int]] = {}
    module_names = {"enc-self": "encoder.layers.{}.self_attn", "dec-self": "decoder.layers.{}.self_attn",
                    "enc-dec": "decoder.layers.{}.encoder_attn"}
    for attention_type, layer, attention in iter_attention(model):
        prefix = module_names[attention_type].format(layer)
        for name, tensor in full_attention_weights(attention, heads_of[attention_type]).items():
            ours[f"{prefix}.{name}"] = tensor
        kept.setdefault(attention_type, []).append(len(getattr(attention, "kept_heads", range(attention.num_heads))))
    weights = {}
    for tensor in plan:
        name = located[tensor.ours]
        if name is None:
            continue
        value = ours[tensor.ours]
        if tensor.rows != PLAIN:
            vocab = source if tensor.ours.startswith("encoder") else target
            value = value.index_select(0, torch.tensor(vocab.hf_to_fairseq))
        weights[name] = value.reshape(tensor.shape).float().contiguous().clone()

    def write(staging: str) -> None:
        from safetensors.torch import save_file

        save_file(weights, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
        for name in SOURCE_FILES:
            if os.path.isfile(os.path.join(source_dir, name)):
                shutil.copyfile(os.path.join(source_dir, name), os.path.join(staging, name))

    return TranslationExportResult(kept, write_files_into(out_dir, write))
