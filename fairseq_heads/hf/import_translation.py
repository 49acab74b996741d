"""`fairseq-heads import-hf` for translation models: a local Hugging Face MarianMTModel,
FSMTForConditionalGeneration or M2M100ForConditionalGeneration directory -> OUT_DIR/checkpoint.pt
+ dict.SRC.txt + dict.TGT.txt, the layout of fairseq's translation task, as a
`gated_transformer` with open gates (the imported function unchanged).

The order of the LLaMA importer: config.json checked (translation_config), the vocabularies read
(translation_vocabulary), every tensor looked up in the safetensors headers with its shape, then
the weights read and converted to float32, and the model built as fairseq's CLIs build it (from
the written dictionaries); all files appear together or not at all. The three architectures
name their layers as fairseq does (all are fairseq's layers, ported), so a layer tensor is
`model.` + our name; only embeddings, the output projection and final_logits_bias move rows
into fairseq's dictionary order.
"""
import os
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch

from ..files import write_files_into, write_text_atomic
from .hf_config import HFImportError
from .import_hf import checkpoint_state, fairseq_rows, load_hf_tensors, safetensors_files, safetensors_header
from .translation_config import TranslationShape, read_translation_config
from .translation_vocabulary import read_translation_vocabularies, special_ids, translation_vocabulary_map
from .vocabulary import VocabularyMap, dictionary_text

ATTENTION = ("q_proj", "k_proj", "v_proj", "out_proj")
ROWS_SOURCE, ROWS_TARGET, PLAIN = "source rows", "target rows", "plain"


class Tensor(NamedTuple):
    """One of our weights: the HF names it may be stored under (tied weights are saved once,
    under any of their names), HF's shape, how its rows map, whether HF may leave it out."""
    ours: str
    hf_names: Tuple[str, ...]
    shape: Tuple[int, ...]
    rows: str = PLAIN
    optional: bool = False


def layer_tensors(side: str, layers: int, d: int, ffn: int) -> List[Tensor]:
    modules = {f"self_attn.{p}": (d, d) for p in ATTENTION}
    if side == "decoder":
        modules.update({f"encoder_attn.{p}": (d, d) for p in ATTENTION})
        modules["encoder_attn_layer_norm"] = None
    modules.update({"self_attn_layer_norm": None, "fc1": (ffn, d), "fc2": (d, ffn), "final_layer_norm": None})
    out = []
    for i in range(layers):
        for module, weight in modules.items():
            ours = f"{side}.layers.{i}.{module}"
            out.append(Tensor(ours + ".weight", ("model." + ours + ".weight",), weight or (d,)))
            out.append(Tensor(ours + ".bias", ("model." + ours + ".bias",), (weight or (d,))[:1]))
    return out


def tensor_plan(shape: TranslationShape) -> List[Tensor]:
    """Every weight of ours, where HF keeps it."""
    d = shape.d_model
    plan = layer_tensors("encoder", shape.encoder_layers, d, shape.encoder_ffn)
    plan += layer_tensors("decoder", shape.decoder_layers, d, shape.decoder_ffn)
    if shape.normalize_before:  # M2M100's final layer norms
        plan += [Tensor(f"{side}.layer_norm.{kind}", (f"model.{side}.layer_norm.{kind}",), (d,))
                 for side in ("encoder", "decoder") for kind in ("weight", "bias")]
    shared = ("model.shared.weight",) if shape.shared_vocabulary else ()
    decoder_embedding = ("model.decoder.embed_tokens.weight",) + shared
    if shape.tied_output:
        decoder_embedding += ("model.decoder.output_projection.weight", "lm_head.weight")
    plan += [Tensor("encoder.embed_tokens.weight", ("model.encoder.embed_tokens.weight",) + shared,
                    (shape.source_vocab_size, d), ROWS_SOURCE),
             Tensor("decoder.embed_tokens.weight", decoder_embedding,
                    (shape.target_vocab_size, d), ROWS_TARGET)]
    if not shape.tied_output:
        plan.append(Tensor("decoder.output_projection.weight",
                           ("lm_head.weight", "model.decoder.output_projection.weight"),
                           (shape.target_vocab_size, d), ROWS_TARGET))
    if shape.marian:  # a buffer HF may leave out of the file (then zeros)
        plan.append(Tensor("decoder.final_logits_bias", ("final_logits_bias",),
                           (1, shape.target_vocab_size), ROWS_TARGET, optional=True))
    return plan


def locate_tensors(model_dir: str, plan: List[Tensor]) -> Tuple[List[str], Dict[str, Optional[str]]]:
    """(safetensors files, our name -> the HF name holding it), every shape checked (headers
    only: no tensor is read)."""
    files = safetensors_files(model_dir)
    found: Dict[str, Tuple[int, ...]] = {}
    for path in files:
        found.update(safetensors_header(path))
    located: Dict[str, Optional[str]] = {}
    for tensor in plan:
        name = next((n for n in tensor.hf_names if n in found), None)
        if name is None and not tensor.optional:
            raise HFImportError(f"{model_dir}: tensor {tensor.hf_names[0]} missing from the "
                                f"safetensors files")
        if name is not None and found[name] != tensor.shape:
            raise HFImportError(f"{model_dir}: tensor {name} has shape {list(found[name])}, "
                                f"config.json implies {list(tensor.shape)}")
        located[tensor.ours] = name
    return files, located


def convert_weights(hf: Dict[str, torch.Tensor], plan: List[Tensor], located: Dict[str, Optional[str]],
                    source: VocabularyMap, target: VocabularyMap) -> Dict[str, torch.Tensor]:
    """Our name -> float32 tensor (rows in fairseq's dictionary order)."""
    out = {}
    for tensor in plan:
        name = located[tensor.ours]
        if name is None:  # final_logits_bias left out: zeros, as HF loads it
            out[tensor.ours] = torch.zeros(target.size)
            continue
        value = hf[name].float()
        if tensor.ours == "decoder.final_logits_bias":
            out[tensor.ours] = fairseq_rows(value.view(-1, 1), target).view(-1)
        elif tensor.rows == PLAIN:
            out[tensor.ours] = value
        else:
            out[tensor.ours] = fairseq_rows(value, source if tensor.rows == ROWS_SOURCE else target)
    if "decoder.output_projection.weight" not in out:  # tied: one parameter, two names
        out["decoder.output_projection.weight"] = out["decoder.embed_tokens.weight"]
    return out


def language_pair(shape: TranslationShape, source_lang: Optional[str],
                  target_lang: Optional[str]) -> Tuple[str, str]:
    """The dictionaries' language names: given, else FSMT's config langs, else src / tgt."""
    default = shape.langs if len(shape.langs) == 2 else ["src", "tgt"]
    pair = (source_lang or default[0], target_lang or default[1])
    for option, lang in zip(("--source-lang", "--target-lang"), pair):
        if not lang or any(c in lang for c in "./\\ \t"):
            raise HFImportError(f"{option} {lang!r}: not a usable language name (dict.LANG.txt)")
    if pair[0] == pair[1]:
        raise HFImportError(f"--source-lang and --target-lang are both {pair[0]!r}")
    return pair


def build_gated_transformer(data_dir: str, shape: TranslationShape, langs: Tuple[str, str],
                            blocked: List[int]):
    """(args, model) as fairseq's CLIs build them from `data_dir`'s dictionaries."""
    from fairseq import options, tasks

    user_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    argv = [data_dir, "--task", "translation_heads", "-s", langs[0], "-t", langs[1],
            "--arch", "gated_transformer", "--user-dir", user_dir, "--cpu", *shape.fairseq_options()]
    if blocked:
        argv += ["--blocked-output-symbols", ",".join(map(str, blocked))]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    return args, task.build_model(args)


class TranslationImportResult(NamedTuple):
    shape: TranslationShape
    source: VocabularyMap
    target: VocabularyMap
    langs: Tuple[str, str]
    files: List[str]

    def model_options(self) -> List[str]:
        """The fairseq-train options of this model, to fine-tune it with
        `--finetune-from-model OUT_DIR/checkpoint.pt`."""
        options = ["--arch", "gated_transformer", *self.shape.fairseq_options()]
        if self.target.blocked:
            options += ["--blocked-output-symbols", ",".join(map(str, self.target.blocked))]
        return options


def read_vocabulary_maps(model_dir: str, shape: TranslationShape) -> Tuple[VocabularyMap, VocabularyMap]:
    source_strings, target_strings = read_translation_vocabularies(model_dir, shape)
    source = translation_vocabulary_map(source_strings, special_ids(source_strings, shape))
    target = (source if target_strings is source_strings else
              translation_vocabulary_map(target_strings, special_ids(target_strings, shape)))
    return source, target


def import_translation(model_dir: str, out_dir: str, source_lang: Optional[str] = None,
                       target_lang: Optional[str] = None) -> TranslationImportResult:
    """Convert `model_dir` into `out_dir` (module docstring)."""
    shape = read_translation_config(model_dir)
    langs = language_pair(shape, source_lang, target_lang)
    source, target = read_vocabulary_maps(model_dir, shape)
    plan = tensor_plan(shape)
    files, located = locate_tensors(model_dir, plan)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise HFImportError(f"--out {out_dir}: is a file, not a folder")

    def write(staging: str) -> None:
        for lang, vocab in zip(langs, (source, target)):
            write_text_atomic(os.path.join(staging, f"dict.{lang}.txt"), dictionary_text(vocab))
        args, model = build_gated_transformer(staging, shape, langs, target.blocked)
        hf = load_hf_tensors(files, [n for n in located.values() if n is not None])
        weights = convert_weights(hf, plan, located, source, target)
        state = model.state_dict()
        unknown = set(weights) - set(state)
        if unknown:
            raise AssertionError(f"converted weights the model does not have: {sorted(unknown)[:3]}")
        missing = [k for k in state if k not in weights and k.endswith((".weight", ".bias"))]
        if missing:
            raise AssertionError(f"model weights the conversion does not fill: {missing[:3]}")
        state.update(weights)
        model.load_state_dict(state, strict=True)
        torch.save(checkpoint_state(args, model), os.path.join(staging, "checkpoint.pt"))

    write_files_into(out_dir, write)
    names = ["checkpoint.pt"] + [f"dict.{lang}.txt" for lang in langs]
    return TranslationImportResult(shape, source, target, langs,
                                   [os.path.join(out_dir, n) for n in names])
