"""The data root of the hf_translation recipe's toy scale: the toy corpus (en -> de, gold parses
of its test split) and a tiny random Marian model with a sentencepiece tokenizer trained on it,
under hf_translation_toy/ as pipeline/hf_translation.py's TOY config names them."""
import os

from fairseq_heads.data.synthetic_corpus import generate_corpus
from hf_translation.marian_tokenizer import save_marian_with_tokenizer

TOY_FOLDER = "hf_translation_toy"


def write_toy_root(root, sizes=(300, 30, 30)) -> str:
    folder = os.path.join(str(root), TOY_FOLDER)
    files = generate_corpus(folder, *sizes, src_lang="en", tgt_lang="de")
    save_marian_with_tokenizer(os.path.join(folder, "marian"), str(files["train"].src), str(files["train"].tgt))
    return str(root)
