"""A Hugging Face config.json of a LLaMA-family model, checked, as `gated_llama` options.

Supported: `LlamaForCausalLM`, `Qwen2ForCausalLM` and `MistralForCausalLM` without sliding
windows: RMSNorm, SiLU SwiGLU, default RoPE (no scaling), optional q/k/v biases (always on in
Qwen2), tied or untied embeddings. Anything else is refused with one line that names it,
before any weight is read (`HFImportError`, exit status 2 in the CLI).
"""
import json
import os
from typing import List, NamedTuple, Optional


class HFImportError(ValueError):
    """A model directory or config option `import-hf` cannot convert (a user-facing error)."""


SUPPORTED_MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                         "mistral": "MistralForCausalLM"}


class LlamaShape(NamedTuple):
    """What `gated_llama` needs to know of an HF model."""
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    rope_theta: float
    rms_norm_eps: float
    qkv_bias: bool
    tied_embeddings: bool
    max_positions: int
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]

    def fairseq_options(self) -> List[str]:
        """fairseq-train style options of the `gated_llama` model with this shape."""
        options = ["--decoder-embed-dim", str(self.hidden_size),
                   "--decoder-ffn-embed-dim", str(self.intermediate_size),
                   "--decoder-layers", str(self.layers),
                   "--decoder-attention-heads", str(self.heads),
                   "--decoder-kv-heads", str(self.kv_heads),
                   "--rope-theta", repr(self.rope_theta), "--rms-norm-eps", repr(self.rms_norm_eps),
                   "--max-target-positions", str(self.max_positions)]
        if self.qkv_bias:
            options.append("--qkv-bias")
        if self.tied_embeddings:
            options.append("--share-decoder-input-output-embed")
        return options


def _first_token_id(value) -> Optional[int]:
    """eos_token_id may be one id or a list (several end tokens): the first is fairseq's eos."""
    if isinstance(value, list):
        return int(value[0]) if value else None
    return None if value is None else int(value)


def read_config_json(model_dir: str) -> dict:
    path = os.path.join(model_dir, "config.json")
    if not os.path.isdir(model_dir):
        raise HFImportError(f"{model_dir}: not a directory")
    if not os.path.isfile(path):
        raise HFImportError(f"{path}: not found (a Hugging Face model directory has config.json)")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise HFImportError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(config, dict):
        raise HFImportError(f"{path}: not a JSON object")
    return config


def check_supported(config: dict, path: str) -> None:
    """Refuse what gated_llama cannot compute exactly, naming the option."""
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type not in SUPPORTED_MODEL_TYPES:
        name = model_type or (architectures[0] if architectures else "unknown")
        raise HFImportError(f"{path}: unsupported architecture {name!r} (model_type); supported: "
                            f"{', '.join(SUPPORTED_MODEL_TYPES.values())}")
    unsupported_heads = [a for a in architectures if a != SUPPORTED_MODEL_TYPES[model_type]]
    if unsupported_heads:
        raise HFImportError(f"{path}: unsupported architecture {unsupported_heads[0]!r}; "
                            f"expected {SUPPORTED_MODEL_TYPES[model_type]}")
    rope_scaling = config.get("rope_scaling")
    if rope_scaling:
        kind = rope_scaling.get("rope_type", rope_scaling.get("type")) if isinstance(rope_scaling, dict) else rope_scaling
        if kind != "default":
            raise HFImportError(f"{path}: unsupported rope_scaling {kind!r} (only unscaled RoPE)")
    if config.get("sliding_window") is not None and (
            model_type == "mistral" or config.get("use_sliding_window", False)):
        raise HFImportError(f"{path}: unsupported sliding_window {config['sliding_window']} "
                            f"(sliding-window attention)")
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise HFImportError(f"{path}: unsupported hidden_act {act!r} (SwiGLU with silu only)")
    for option in ("attention_bias", "mlp_bias"):
        if model_type != "qwen2" and config.get(option):
            raise HFImportError(f"{path}: unsupported {option} true (o-proj / MLP biases)")
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    head_dim = config.get("head_dim")
    if head_dim is not None and hidden and heads and head_dim * heads != hidden:
        raise HFImportError(f"{path}: unsupported head_dim {head_dim} != hidden_size / "
                            f"num_attention_heads")


def read_hf_config(model_dir: str) -> LlamaShape:
    """The checked shape of the model in `model_dir` (config.json only)."""
    config = read_config_json(model_dir)
    path = os.path.join(model_dir, "config.json")
    check_supported(config, path)
    try:
        heads = int(config["num_attention_heads"])
        shape = LlamaShape(
            model_type=config["model_type"], vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            intermediate_size=int(config["intermediate_size"]),
            layers=int(config["num_hidden_layers"]), heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
            qkv_bias=config["model_type"] == "qwen2" or bool(config.get("attention_bias", False)),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            max_positions=int(config.get("max_position_embeddings", 2048)),
            bos_token_id=_first_token_id(config.get("bos_token_id")),
            eos_token_id=_first_token_id(config.get("eos_token_id")))
    except KeyError as error:
        raise HFImportError(f"{path}: missing {error.args[0]}") from None
    except (TypeError, ValueError) as error:
        raise HFImportError(f"{path}: a size is not a number ({error})") from None
    if shape.hidden_size % heads or heads % shape.kv_heads:
        raise HFImportError(f"{path}: num_attention_heads {heads} must divide hidden_size "
                            f"{shape.hidden_size} and be a multiple of num_key_value_heads "
                            f"{shape.kv_heads}")
    return shape
