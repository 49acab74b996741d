"""`fairseq-heads export-hf --path CKPT --source MODEL_DIR --out HF_DIR`: a (pruned) gated_llama
back in Hugging Face format, where HF can represent it. Wiring only; see `fairseq_heads.hf`."""
import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", required=True, metavar="CHECKPOINT",
                        help="a gated_llama checkpoint from `import-hf` (pruned or fine-tuned)")
    parser.add_argument("--source", required=True, metavar="MODEL_DIR",
                        help="the HF directory it was imported from (config, tokenizer)")
    parser.add_argument("--out", required=True, metavar="HF_DIR",
                        help="folder for config.json, model.safetensors and the tokenizer files")


def run(args) -> int:
    from ..hf.export_hf import export_hf

    result = export_hf(args.path, args.source, args.out)
    print(f"{result.query_heads} query heads / {result.kv_heads} KV heads per layer")
    for path in result.files:
        print(f"wrote {path}")
    return 0
