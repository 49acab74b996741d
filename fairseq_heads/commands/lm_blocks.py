"""--sample-break-mode and --block-start of every command that reads a language model's data
(`stats`, `lm-result`, `curve`), declared once. Left out, the blocks are read as the model was
trained: what its checkpoint records (`import-hf` records one document a block from <s> for
models whose tokenizer adds it), else its task's own break mode (`checkpoints.apply_lm_blocks`)."""
import argparse

from ..checkpoints import BLOCK_STARTS, LM_BREAK_MODES


def add_lm_block_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("language-model blocks (default: as the model was trained)")
    group.add_argument("--sample-break-mode", choices=LM_BREAK_MODES, default=None,
                       help="fairseq's: how the subset is cut into blocks (eos: one line a block; "
                            "complete_doc: whole lines, never across an empty line; none: packed)")
    group.add_argument("--block-start", choices=BLOCK_STARTS, default=None,
                       help="what a gated_llama reads at a block's first position: <s> (bos) or "
                            "fairseq's </s> (eos)")
