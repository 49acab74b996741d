"""`fairseq-heads import-hf`: a local Hugging Face LLaMA-family directory -> OUT_DIR/checkpoint.pt
+ OUT_DIR/dict.txt, the layout of fairseq's language_modeling task, as a `gated_llama` with
open gates (deterministic gate 1: the imported function unchanged).

Everything that can be checked cheaply is checked first (config.json, the tokenizer, the
safetensors headers: every tensor present with its shape), then the weights are read, converted
to float32 and the model is built the way fairseq's CLIs build it (from the written dict.txt);
both files appear together or not at all (`files.write_files_into`).
"""
import json
import os
import struct
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from ..files import write_files_into, write_text_atomic
from .hf_config import HFImportError, LlamaShape, read_hf_config
from .vocabulary import (VocabularyMap, dictionary_text, read_tokenizer_vocabulary, tokenizer_adds_bos,
                         vocabulary_map)

# How an imported model's data is read (`gated_llama --block-break-mode`): one line a block, a
# line being a document (binarise-hf's text), its first token <s> where the model was trained so.
IMPORT_BREAK_MODE = "eos"

# HF parameter name (after "model.layers.N.") -> ours (after "decoder.layers.N.")
LAYER_NAMES = {
    "self_attn.q_proj": "self_attn.q_proj", "self_attn.k_proj": "self_attn.k_proj",
    "self_attn.v_proj": "self_attn.v_proj", "self_attn.o_proj": "self_attn.out_proj",
    "mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.up_proj", "mlp.down_proj": "mlp.down_proj",
    "input_layernorm": "self_attn_layer_norm", "post_attention_layernorm": "final_layer_norm",
}


def expected_shapes(shape: LlamaShape) -> Dict[str, Tuple[int, ...]]:
    """HF tensor name -> shape, for every tensor the conversion reads."""
    d, head_dim = shape.hidden_size, shape.hidden_size // shape.heads
    kv = shape.kv_heads * head_dim
    out = {"model.embed_tokens.weight": (shape.vocab_size, d), "model.norm.weight": (d,)}
    if not shape.tied_embeddings:
        out["lm_head.weight"] = (shape.vocab_size, d)
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": (d, d), p + "self_attn.k_proj.weight": (kv, d),
                    p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, d),
                    p + "mlp.gate_proj.weight": (shape.intermediate_size, d),
                    p + "mlp.up_proj.weight": (shape.intermediate_size, d),
                    p + "mlp.down_proj.weight": (d, shape.intermediate_size),
                    p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,)})
        if shape.qkv_bias:
            out.update({p + "self_attn.q_proj.bias": (d,), p + "self_attn.k_proj.bias": (kv,),
                        p + "self_attn.v_proj.bias": (kv,)})
    return out


def safetensors_files(model_dir: str) -> List[str]:
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(single):
        return [single]
    if not os.path.isfile(index):
        raise HFImportError(f"{model_dir}: no model.safetensors or model.safetensors.index.json "
                            f"(only safetensors weights are read)")
    try:
        with open(index, encoding="utf-8") as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise HFImportError(f"{index}: not a safetensors index ({error})") from None
    files = [os.path.join(model_dir, name) for name in names]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise HFImportError(f"{missing[0]}: not found (named by {index})")
    return files


def safetensors_header(path: str) -> Dict[str, Tuple[int, ...]]:
    """Tensor name -> shape, from the file's JSON header (8-byte length, then JSON; no tensor
    is read)."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > os.path.getsize(path):
                raise ValueError("header longer than the file")
            header = json.loads(f.read(length))
        return {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}
    except (struct.error, ValueError, KeyError, TypeError, AttributeError) as error:
        raise HFImportError(f"{path}: not a safetensors file ({error})") from None


def check_weights(model_dir: str, shape: LlamaShape) -> List[str]:
    """The safetensors files, once every expected tensor is in them with its shape."""
    files = safetensors_files(model_dir)
    found: Dict[str, Tuple[int, ...]] = {}
    for path in files:
        found.update(safetensors_header(path))
    for name, expected in expected_shapes(shape).items():
        if name not in found:
            raise HFImportError(f"{model_dir}: tensor {name} missing from the safetensors files")
        if found[name] != expected:
            raise HFImportError(f"{model_dir}: tensor {name} has shape {list(found[name])}, "
                                f"config.json implies {list(expected)}")
    return files


def fairseq_rows(hf_matrix: torch.Tensor, vocab: VocabularyMap) -> torch.Tensor:
    """An HF (vocab, d) matrix with its rows in fairseq's dictionary order (zeros: no source)."""
    rows = torch.zeros(vocab.size, hf_matrix.size(1), dtype=torch.float32)
    ours = [i for i, hf_id in enumerate(vocab.row_source) if hf_id is not None]
    theirs = [vocab.row_source[i] for i in ours]
    rows[torch.tensor(ours, dtype=torch.long)] = hf_matrix[torch.tensor(theirs, dtype=torch.long)].float()
    return rows


def convert_weights(hf: Dict[str, torch.Tensor], shape: LlamaShape,
                    vocab: VocabularyMap) -> Dict[str, torch.Tensor]:
    """Our parameter name -> float32 tensor, for every converted weight."""
    out = {"decoder.embed_tokens.weight": fairseq_rows(hf["model.embed_tokens.weight"], vocab),
           "decoder.layer_norm.weight": hf["model.norm.weight"].float()}
    # tied: one parameter under both names, which load_state_dict fills in turn
    out["decoder.output_projection.weight"] = (out["decoder.embed_tokens.weight"] if shape.tied_embeddings
                                               else fairseq_rows(hf["lm_head.weight"], vocab))
    for i in range(shape.layers):
        for theirs, ours in LAYER_NAMES.items():
            for kind in ("weight", "bias"):
                name = f"model.layers.{i}.{theirs}.{kind}"
                if name in hf and (kind == "weight" or shape.qkv_bias):
                    out[f"decoder.layers.{i}.{ours}.{kind}"] = hf[name].float()
    return out


def load_hf_tensors(files: List[str], names) -> Dict[str, torch.Tensor]:
    from safetensors import safe_open

    wanted, out = set(names), {}
    for path in files:
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                if name in wanted:
                    out[name] = f.get_tensor(name)
    return out


def build_gated_llama(data_dir: str, shape: LlamaShape, vocab: VocabularyMap, block_start: str = "eos"):
    """(args, model) as fairseq's CLIs build them from `data_dir`'s dict.txt."""
    from fairseq import options, tasks

    user_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    blocked = ",".join(str(i) for i in vocab.blocked)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        data_dir, "--task", "language_modeling", "--arch", "gated_llama", "--user-dir", user_dir,
        "--tokens-per-sample", str(min(shape.max_positions, 2048)), "--cpu",
        "--blocked-output-symbols", blocked, "--dropout", "0", "--attention-dropout", "0",
        "--block-start", block_start, "--block-break-mode", IMPORT_BREAK_MODE,
        *shape.fairseq_options()])
    task = tasks.setup_task(args)
    if len(task.dictionary) != vocab.size:
        raise AssertionError(f"dict.txt read back with {len(task.dictionary)} symbols, "
                             f"expected {vocab.size}")
    return args, task.build_model(args)


class ImportResult(NamedTuple):
    shape: LlamaShape
    vocab: VocabularyMap
    files: List[str]
    block_start: str = "eos"  # bos: the model was trained with <s> at each document start

    def model_options(self) -> List[str]:
        """The fairseq-train options of this model (--arch gated_llama + these), to fine-tune it
        with `--finetune-from-model OUT_DIR/checkpoint.pt`."""
        return ["--arch", "gated_llama", *self.shape.fairseq_options(),
                "--blocked-output-symbols", ",".join(str(i) for i in self.vocab.blocked),
                "--block-start", self.block_start, "--block-break-mode", IMPORT_BREAK_MODE]

    def task_options(self) -> List[str]:
        """The language_modeling options that read data as the model was trained: one document
        a block (a line of binarise-hf's text), within the model's positions."""
        return ["--sample-break-mode", IMPORT_BREAK_MODE, "--tokens-per-sample",
                str(min(self.shape.max_positions, 2048))]


def checkpoint_state(args, model) -> dict:
    """A fairseq checkpoint of `model` (what fairseq-train saves, without optimizer state)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(convert_namespace_to_omegaconf(args), resolve=True,
                                 enum_to_str=True)
    return {"cfg": cfg, "args": None, "model": model.state_dict(),
            "optimizer_history": [{"criterion_name": "CrossEntropyCriterion",
                                   "optimizer_name": "none", "lr_scheduler_state": {"best": None},
                                   "num_updates": 0}],
            "extra_state": {"train_iterator": {"epoch": 1}}, "last_optimizer_state": None}


def import_hf(model_dir: str, out_dir: str, block_start: Optional[str] = None) -> ImportResult:
    """Convert `model_dir` into `out_dir`/checkpoint.pt and dict.txt (module docstring)."""
    shape = read_hf_config(model_dir)
    tokenizer = read_tokenizer_vocabulary(model_dir, shape.vocab_size)
    files = check_weights(model_dir, shape)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise HFImportError(f"--out {out_dir}: is a file, not a folder")
    if shape.eos_token_id is not None and not 0 <= shape.eos_token_id < shape.vocab_size:
        raise HFImportError(f"{model_dir}/config.json: eos_token_id {shape.eos_token_id} "
                            f"beyond vocab_size {shape.vocab_size}")
    vocab = vocabulary_map(tokenizer.strings, shape.eos_token_id, shape.bos_token_id,
                           tokenizer.unk_id)
    if block_start is None:  # as its tokenizer fed it in training
        block_start = "bos" if tokenizer_adds_bos(model_dir, shape.bos_token_id, vocab) else "eos"
    elif block_start == "bos" and vocab.row_source[0] is None:
        raise HFImportError(f"--block-start bos: {model_dir} has no BOS token (config.json "
                            f"bos_token_id) for fairseq's <s> to read")

    def write(staging: str) -> None:
        write_text_atomic(os.path.join(staging, "dict.txt"), dictionary_text(vocab))
        args, model = build_gated_llama(staging, shape, vocab, block_start)
        weights = convert_weights(load_hf_tensors(files, expected_shapes(shape)), shape, vocab)
        state = model.state_dict()
        unknown = set(weights) - set(state)
        if unknown:
            raise AssertionError(f"converted weights the model does not have: {sorted(unknown)[:3]}")
        state.update(weights)
        model.load_state_dict(state, strict=True)
        torch.save(checkpoint_state(args, model), os.path.join(staging, "checkpoint.pt"))

    write_files_into(out_dir, write)
    return ImportResult(shape, vocab, [os.path.join(out_dir, "checkpoint.pt"),
                                       os.path.join(out_dir, "dict.txt")], block_start)
