"""The text of gold-parsed sentences (CoNLL-U) as subsets of a language model's data: binarised
with the LM's own sentencepiece model and dictionary, one sentence a line, so that
`fairseq-heads stats --conllu` can score the LM's syntactic heads on it (docs/metrics.md).

    python -m fairseq_heads.data.lm_conllu_subset --data-bin WORK/bin --spm-model WORK/spm.model \
        --subset pud=../shared/data/ud_pud/en_pud-ud-test.conllu.gz --out-dir OUT

OUT gets dict.txt (BIN's) and, per --subset NAME=FILE, NAME.bin/.idx (line i = the `# text` of
sentence i, normalised as `prepare-lm` normalises text: NFKC, whitespace) and NAME.conllu[.gz]
(FILE, copied). Every sentence becomes exactly one line, never filtered, so the dataset index is
the sentence index. Everything is written to a hidden temporary folder beside OUT and renamed:
a failure leaves no OUT. Then:

    fairseq-heads stats OUT --path LM.pt --gen-subset pud --conllu OUT/pud.conllu.gz --out-dir DIR
"""
import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from ..files import make_staging_dir, replace_dir
from .extra_subset import named_file
from .binarising import fairseq_preprocess_command
from .cleaning import normalise
from .text_files import DataPrepError, conllu_blocks, read_lines, write_lines

TEXT_COMMENT = "# text = "


def conllu_sentence_texts(path: str) -> List[str]:
    """The normalised `# text` of every sentence of a CoNLL-U file (plain or gzip), in order.

    The text is the sentence's surface string, which the stats' subword -> word alignment matches
    character by character; a sentence without one, or with an empty one, is an error naming
    the file and the sentence (1-based), since dropping it would shift every later sentence."""
    texts = []
    for number, block in enumerate(conllu_blocks("\n".join(read_lines(Path(path)))), start=1):
        comments = [line[len(TEXT_COMMENT):] for line in block.split("\n") if line.startswith(TEXT_COMMENT)]
        text = normalise(comments[0]) if comments else ""
        if not text:
            raise DataPrepError(f"{path}: sentence {number} has no '# text = ...' line (or an empty one)")
        texts.append(text)
    if not texts:
        raise DataPrepError(f"{path}: no CoNLL-U sentences")
    return texts


def binarize_conllu_subsets(data_bin: str, spm_model: str, subsets: Dict[str, str], out_dir: str,
                            fairseq_preprocess: Optional[str] = None) -> str:
    """Binarise the sentence texts of each {subset: CoNLL-U file} with data_bin's dict.txt."""
    import sentencepiece as spm

    dictionary = Path(data_bin) / "dict.txt"
    if not dictionary.is_file():
        raise DataPrepError(f"--data-bin {data_bin}: no dict.txt (not a language-model data-bin)")
    for path in [spm_model, *subsets.values()]:
        if not os.path.isfile(path):
            raise DataPrepError(f"file not found: {path}")
    texts = {subset: conllu_sentence_texts(path) for subset, path in subsets.items()}
    out = Path(out_dir).absolute()
    staging = Path(make_staging_dir(out))
    try:
        model = spm.SentencePieceProcessor(model_file=spm_model)
        binary = staging / "bin"
        binary.mkdir()
        for subset, lines in texts.items():
            write_lines(staging / f"{subset}.txt", [" ".join(p) for p in model.encode(lines, out_type=str)])
            # fairseq-preprocess names a --testpref subset "test": binarise each subset on its
            # own into a scratch folder and rename its files
            scratch = staging / f"preprocess-{subset}"
            command = fairseq_preprocess_command(fairseq_preprocess) + [
                "--only-source", "--testpref", str(staging / f"{subset}.txt"), "--srcdict", str(dictionary),
                "--destdir", str(scratch), "--workers", "1"]
            process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if process.returncode != 0:
                tail = "\n".join(process.stdout.splitlines()[-20:])
                raise DataPrepError(f"{command[0]} exited with {process.returncode}:\n{tail}")
            for path in scratch.iterdir():
                if path.name.startswith("test."):
                    os.replace(path, binary / (subset + path.name[len("test"):]))
                elif path.name == "dict.txt":
                    os.replace(path, binary / path.name)
            source = subsets[subset]
            shutil.copyfile(source, binary / (f"{subset}.conllu" + (".gz" if source.endswith(".gz") else "")))
        replace_dir(binary, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(out)


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m fairseq_heads.data.lm_conllu_subset` (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-bin", required=True, help="the LM's data-bin (its dict.txt)")
    parser.add_argument("--spm-model", required=True, help="the LM's sentencepiece model (WORK/spm.model)")
    parser.add_argument("--subset", type=named_file("NAME=FILE.conllu[.gz]"), action="append", required=True,
                        metavar="NAME=FILE.conllu[.gz]", help="a subset from a CoNLL-U file's text (repeatable)")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    try:
        out = binarize_conllu_subsets(args.data_bin, args.spm_model, dict(args.subset), args.out_dir)
    except DataPrepError as error:
        print(f"lm_conllu_subset: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
