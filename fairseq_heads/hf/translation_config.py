"""A Hugging Face config.json of a translation model, checked, as `gated_transformer` options.

Supported (docs/hf_translation.md has the whole map): `MarianMTModel` (post-norm, Marian's
position table from position 0, decoding starts from <pad>, final_logits_bias, one vocabulary),
`FSMTForConditionalGeneration` (post-norm, fairseq's table, source and target vocabularies,
decoder input and output tied) and `M2M100ForConditionalGeneration`, NLLB's class too
(pre-norm with final layer norms, fairseq's table, one vocabulary, decoding starts from eos
then the forced target-language token). Anything the conversion cannot make exact is refused
in one line naming it (`HFImportError`, exit status 2), before any weight is read.
"""
import os
from typing import Dict, List, NamedTuple, Optional

from .hf_config import SUPPORTED_MODEL_TYPES, HFImportError, read_config_json

TRANSLATION_MODEL_TYPES = {"marian": "MarianMTModel", "fsmt": "FSMTForConditionalGeneration",
                           "m2m_100": "M2M100ForConditionalGeneration"}
# why some encoder-decoders are not read (the rest: "not one of the supported architectures")
UNSUPPORTED_REASONS = {
    "t5": "relative position buckets", "mt5": "relative position buckets",
    "umt5": "relative position buckets", "longt5": "relative position buckets",
    "bart": "learned positions and layernorm_embedding", "mbart": "learned positions",
    "pegasus": "its own position table", "nllb_moe": "mixture-of-experts layers",
}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
FAIRSEQ_PAD = 1


def is_translation_config(model_dir: str) -> bool:
    """Does `model_dir`'s config.json name a translation model (supported or not)? LLaMA-family
    configs are the other importer's; everything else is checked (and refused) here."""
    model_type = read_config_json(model_dir).get("model_type")
    return model_type not in SUPPORTED_MODEL_TYPES


class TranslationShape(NamedTuple):
    model_type: str
    architecture: str
    d_model: int
    encoder_layers: int
    decoder_layers: int
    encoder_heads: int
    decoder_heads: int
    encoder_ffn: int
    decoder_ffn: int
    activation: str  # relu | gelu | swish
    normalize_before: bool
    scale_embedding: bool
    max_positions: int
    source_vocab_size: int
    target_vocab_size: int
    shared_vocabulary: bool  # one vocabulary, one embedding for encoder and decoder inputs
    tied_output: bool  # decoder input embedding = output projection
    pad_id: int
    eos_id: int
    bos_id: Optional[int]
    decoder_start_id: int
    dropout: Dict[str, float]
    langs: List[str]  # FSMT's [source, target]; else []

    @property
    def marian(self) -> bool:
        return self.model_type == "marian"

    def fairseq_options(self) -> List[str]:
        """fairseq-train style options of the `gated_transformer` with this shape."""
        options = ["--encoder-layers", str(self.encoder_layers),
                   "--decoder-layers", str(self.decoder_layers),
                   "--encoder-embed-dim", str(self.d_model), "--decoder-embed-dim", str(self.d_model),
                   "--encoder-ffn-embed-dim", str(self.encoder_ffn),
                   "--decoder-ffn-embed-dim", str(self.decoder_ffn),
                   "--encoder-attention-heads", str(self.encoder_heads),
                   "--decoder-attention-heads", str(self.decoder_heads),
                   "--max-source-positions", str(self.max_positions),
                   "--max-target-positions", str(self.max_positions),
                   "--activation-fn", "relu" if self.activation == "swish" else self.activation,
                   "--dropout", repr(self.dropout["dropout"]),
                   "--attention-dropout", repr(self.dropout["attention_dropout"]),
                   "--activation-dropout", repr(self.dropout["activation_dropout"])]
        if self.activation == "swish":
            options.append("--swish-activation")
        if self.normalize_before:
            options += ["--encoder-normalize-before", "--decoder-normalize-before"]
        if not self.scale_embedding:
            options.append("--no-scale-embedding")
        if self.shared_vocabulary and self.tied_output:
            options.append("--share-all-embeddings")
        elif self.tied_output:
            options.append("--share-decoder-input-output-embed")
        if self.marian:
            options += ["--sinusoidal-table", "marian", "--decoder-start-token", "pad", "--output-bias"]
        return options


def _refuse_model_type(config: dict, path: str) -> None:
    model_type = config.get("model_type")
    architectures = config.get("architectures") or []
    if model_type in TRANSLATION_MODEL_TYPES:
        wrong = [a for a in architectures if a != TRANSLATION_MODEL_TYPES[model_type]]
        if wrong:
            raise HFImportError(f"{path}: unsupported architecture {wrong[0]!r}; expected "
                                f"{TRANSLATION_MODEL_TYPES[model_type]}")
        return
    name = model_type or (architectures[0] if architectures else "unknown")
    reason = UNSUPPORTED_REASONS.get(model_type)
    supported = list(SUPPORTED_MODEL_TYPES.values()) + list(TRANSLATION_MODEL_TYPES.values())
    raise HFImportError(f"{path}: unsupported architecture {name!r} (model_type"
                        f"{': ' + reason if reason else ''}); supported: {', '.join(supported)}")


def _check(config: dict, path: str, shape: TranslationShape) -> None:
    if shape.activation not in ("relu", "gelu", "swish"):
        raise HFImportError(f"{path}: unsupported activation_function {shape.activation!r} "
                            f"(relu, gelu, swish)")
    for side, heads in (("encoder", shape.encoder_heads), ("decoder", shape.decoder_heads)):
        if shape.d_model % heads:
            raise HFImportError(f"{path}: {side}_attention_heads {heads} does not divide d_model "
                                f"{shape.d_model}")
    if shape.marian:
        if not config.get("share_encoder_decoder_embeddings", True):
            raise HFImportError(f"{path}: unsupported share_encoder_decoder_embeddings false "
                                f"(Marian with separate vocabularies)")
        if shape.decoder_start_id != shape.pad_id:
            raise HFImportError(f"{path}: unsupported decoder_start_token_id {shape.decoder_start_id} "
                                f"(Marian starts from pad_token_id {shape.pad_id})")
    else:
        if shape.pad_id != FAIRSEQ_PAD:  # positions count from the padding index: fairseq's is 1
            raise HFImportError(f"{path}: unsupported pad_token_id {shape.pad_id} (positions are "
                                f"counted from fairseq's padding index 1)")
        if shape.decoder_start_id != shape.eos_id:
            raise HFImportError(f"{path}: unsupported decoder_start_token_id {shape.decoder_start_id} "
                                f"(fairseq starts decoding from eos_token_id {shape.eos_id})")
    if config.get("normalize_embedding") or config.get("layernorm_embedding"):
        raise HFImportError(f"{path}: unsupported layernorm_embedding")
    ids = [shape.pad_id, shape.eos_id] + ([shape.bos_id] if shape.bos_id is not None else [])
    if len(set(ids)) < len(ids):
        raise HFImportError(f"{path}: bos/pad/eos token ids are not distinct")


def read_translation_config(model_dir: str) -> TranslationShape:
    """The checked shape of the translation model in `model_dir` (config.json only)."""
    config = read_config_json(model_dir)
    path = os.path.join(model_dir, "config.json")
    _refuse_model_type(config, path)
    model_type = config["model_type"]
    try:
        d = int(config["d_model"])
        if model_type == "fsmt":
            source_vocab, target_vocab = int(config["src_vocab_size"]), int(config["tgt_vocab_size"])
            shared = bool(config.get("tie_word_embeddings", False))
            tied = True  # FSMTDecoder ties its output projection to its embedding
        else:
            source_vocab = int(config["vocab_size"])
            target_vocab = int(config.get("decoder_vocab_size") or source_vocab)
            shared, tied = True, bool(config.get("tie_word_embeddings", True))
        pad = int(config["pad_token_id"])
        eos = int(config["eos_token_id"])
        shape = TranslationShape(
            model_type=model_type, architecture=TRANSLATION_MODEL_TYPES[model_type], d_model=d,
            encoder_layers=int(config["encoder_layers"]), decoder_layers=int(config["decoder_layers"]),
            encoder_heads=int(config["encoder_attention_heads"]),
            decoder_heads=int(config["decoder_attention_heads"]),
            encoder_ffn=int(config["encoder_ffn_dim"]), decoder_ffn=int(config["decoder_ffn_dim"]),
            activation=ACTIVATIONS.get(config.get("activation_function", "relu"),
                                       config.get("activation_function")),
            normalize_before=model_type == "m2m_100",
            scale_embedding=bool(config.get("scale_embedding", model_type != "marian")),
            max_positions=int(config.get("max_position_embeddings", 1024)),
            source_vocab_size=source_vocab, target_vocab_size=target_vocab,
            shared_vocabulary=shared, tied_output=tied, pad_id=pad, eos_id=eos,
            bos_id=None if model_type == "marian" or config.get("bos_token_id") is None
            else int(config["bos_token_id"]),
            decoder_start_id=int(config.get("decoder_start_token_id", pad if model_type == "marian" else eos)),
            dropout={k: float(config.get(k) or 0.0)
                     for k in ("dropout", "attention_dropout", "activation_dropout")},
            langs=[str(x) for x in config.get("langs") or []] if model_type == "fsmt" else [])
    except KeyError as error:
        raise HFImportError(f"{path}: missing {error.args[0]}") from None
    except (TypeError, ValueError) as error:
        raise HFImportError(f"{path}: a size or token id is not a number ({error})") from None
    if shape.shared_vocabulary and shape.source_vocab_size != shape.target_vocab_size:
        raise HFImportError(f"{path}: one shared vocabulary, but vocab sizes "
                            f"{shape.source_vocab_size} and {shape.target_vocab_size}")
    _check(config, path, shape)
    return shape
