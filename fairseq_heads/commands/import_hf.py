"""`fairseq-heads import-hf MODEL_DIR --out OUT_DIR`: a local Hugging Face model -> a fairseq
checkpoint.pt with its dictionaries: a LLaMA-family decoder -> `gated_llama` + dict.txt, a
translation model (Marian, FSMT, M2M100 / NLLB) -> `gated_transformer` + dict.SRC.txt and
dict.TGT.txt. Wiring only; the work is in `fairseq_heads.hf`."""
import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="MODEL_DIR",
                        help="a local HF model directory: config.json, *.safetensors and the "
                             "tokenizer's vocabulary (LLaMA, Qwen2, Mistral without sliding "
                             "windows; MarianMTModel, FSMTForConditionalGeneration, "
                             "M2M100ForConditionalGeneration)")
    parser.add_argument("--out", required=True, metavar="OUT_DIR",
                        help="folder for checkpoint.pt and its dictionaries (fairseq's "
                             "language_modeling or translation layout; all written together "
                             "or not at all)")
    parser.add_argument("--source-lang", metavar="SRC",
                        help="translation models: the source dictionary's name, dict.SRC.txt "
                             "(default: FSMT's config langs, else src)")
    parser.add_argument("--target-lang", metavar="TGT",
                        help="translation models: the target dictionary's name (default: FSMT's "
                             "config langs, else tgt)")


def run_translation(args) -> int:
    from ..hf.import_translation import import_translation

    result = import_translation(args.model_dir, args.out, args.source_lang, args.target_lang)
    shape = result.shape
    print(f"{shape.architecture}: {shape.encoder_layers}+{shape.decoder_layers} layers, "
          f"d={shape.d_model}, {shape.encoder_heads}/{shape.decoder_heads} heads (encoder/decoder), "
          f"{'pre' if shape.normalize_before else 'post'}-norm, vocabulary "
          f"{shape.source_vocab_size}/{shape.target_vocab_size} "
          f"({len(result.target.blocked)} fairseq symbols blocked)")
    for path in result.files:
        print(f"wrote {path}")
    print(f"model options (fairseq-train -s {result.langs[0]} -t {result.langs[1]} "
          f"--finetune-from-model ...): " + " ".join(result.model_options()))
    return 0


def run(args) -> int:
    from ..hf.import_hf import import_hf
    from ..hf.translation_config import is_translation_config

    if is_translation_config(args.model_dir):
        return run_translation(args)
    if args.source_lang or args.target_lang:
        raise ValueError("--source-lang / --target-lang: only for translation models")
    result = import_hf(args.model_dir, args.out)
    shape, vocab = result.shape, result.vocab
    print(f"{shape.model_type}: {shape.layers} layers, d={shape.hidden_size}, {shape.heads} query "
          f"heads / {shape.kv_heads} KV heads, vocabulary {shape.vocab_size} "
          f"({len(vocab.blocked)} fairseq symbols blocked)")
    for path in result.files:
        print(f"wrote {path}")
    print("model options (fairseq-train --finetune-from-model ...): " + " ".join(result.model_options()))
    return 0
