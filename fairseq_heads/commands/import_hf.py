"""`fairseq-heads import-hf MODEL_DIR --out OUT_DIR`: a local Hugging Face LLaMA-family model ->
a `gated_llama` checkpoint.pt + dict.txt. Wiring only; the work is in `fairseq_heads.hf`."""
import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="MODEL_DIR",
                        help="a local HF model directory: config.json, *.safetensors, "
                             "tokenizer.json or tokenizer.model (LLaMA, Qwen2, Mistral without "
                             "sliding windows)")
    parser.add_argument("--out", required=True, metavar="OUT_DIR",
                        help="folder for checkpoint.pt and dict.txt (fairseq's language_modeling "
                             "layout; both written together or not at all)")


def run(args) -> int:
    from ..hf.import_hf import import_hf

    result = import_hf(args.model_dir, args.out)
    shape, vocab = result.shape, result.vocab
    print(f"{shape.model_type}: {shape.layers} layers, d={shape.hidden_size}, {shape.heads} query "
          f"heads / {shape.kv_heads} KV heads, vocabulary {shape.vocab_size} "
          f"({len(vocab.blocked)} fairseq symbols blocked)")
    for path in result.files:
        print(f"wrote {path}")
    print("model options (fairseq-train --finetune-from-model ...): " + " ".join(result.model_options()))
    return 0
