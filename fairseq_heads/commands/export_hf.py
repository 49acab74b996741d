"""`fairseq-heads export-hf --path CKPT --source MODEL_DIR --out HF_DIR`: a (pruned) model
imported by `import-hf` back in Hugging Face format, where HF can represent it: a gated_llama
(LLaMA family) or a gated_transformer (Marian, FSMT, M2M100). Wiring only; see
`fairseq_heads.hf`."""
import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", required=True, metavar="CHECKPOINT",
                        help="a checkpoint from `import-hf` (pruned or fine-tuned)")
    parser.add_argument("--source", required=True, metavar="MODEL_DIR",
                        help="the HF directory it was imported from (config, tokenizer)")
    parser.add_argument("--out", required=True, metavar="HF_DIR",
                        help="folder for config.json, model.safetensors and the tokenizer files")


def run(args) -> int:
    from ..hf.translation_config import is_translation_config

    if is_translation_config(args.source):
        from ..hf.export_translation import export_translation

        result = export_translation(args.path, args.source, args.out)
        for attention_type, kept in result.heads.items():
            print(f"{attention_type}: heads kept per layer {kept} (removed heads exported as zeros)")
    else:
        from ..hf.export_hf import export_hf

        result = export_hf(args.path, args.source, args.out)
        print(f"{result.query_heads} query heads / {result.kv_heads} KV heads per layer")
    for path in result.files:
        print(f"wrote {path}")
    return 0
