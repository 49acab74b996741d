"""Binarise parallel text with an existing model's sentencepiece model and dictionaries, into a
data-bin of its own: to compute a model's statistics on another corpus (PUD has gold English
parses; Multi30k and newstest do not), or to fine-tune a model whose data-bin holds no train split.

    python -m fairseq_heads.data.extra_subset --data-bin BIN --spm-model spm.model --src en --tgt de \
        --subset test=pud.en.txt.gz,pud.de.txt.gz [--subset train=...] \
        [--conllu test=en_pud-ud-test.conllu.gz] --out-dir OUT

OUT gets dict.{src,tgt}.txt (BIN's), {subset}.{src}-{tgt}.{src,tgt}.{bin,idx} per --subset and
{subset}.conllu[.gz] per --conllu. Text is normalised as `prepare` normalises valid/test (NFKC,
whitespace) and never filtered, so line i of a CoNLL-U file stays sentence i. Everything is
written to a hidden temporary folder beside OUT and renamed, so a failure leaves no OUT.
"""
import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from ..files import make_staging_dir, replace_dir
from .binarising import fairseq_preprocess_command
from .cleaning import normalise
from .text_files import DataPrepError, read_lines, write_lines


def binarize_subsets(data_bin: str, spm_model: str, subsets: Dict[str, Tuple[str, str]], src: str,
                     tgt: str, out_dir: str, conllu: Optional[Dict[str, str]] = None) -> str:
    """Binarise each {subset: (src file, tgt file)} with data_bin's dictionaries into out_dir."""
    import sentencepiece as spm

    conllu = conllu or {}
    unknown = sorted(set(conllu) - set(subsets))
    if unknown:
        raise DataPrepError(f"--conllu for subsets without text: {unknown}")
    for path in [spm_model, *(p for pair in subsets.values() for p in pair), *conllu.values()]:
        if not os.path.isfile(path):
            raise DataPrepError(f"file not found: {path}")
    dictionaries = {lang: Path(data_bin) / f"dict.{lang}.txt" for lang in (src, tgt)}
    for path in dictionaries.values():
        if not path.is_file():
            raise DataPrepError(f"{data_bin}: no {path.name}")
    out = Path(out_dir).absolute()
    staging = Path(make_staging_dir(out))
    try:
        model = spm.SentencePieceProcessor(model_file=spm_model)
        binary = staging / "bin"
        for subset, (src_file, tgt_file) in subsets.items():
            lines = {src: [normalise(line) for line in read_lines(Path(src_file))],
                     tgt: [normalise(line) for line in read_lines(Path(tgt_file))]}
            if len(lines[src]) != len(lines[tgt]):
                raise DataPrepError(f"{src_file} has {len(lines[src])} lines, {tgt_file} has {len(lines[tgt])}")
            for lang, text in lines.items():
                write_lines(staging / f"{subset}.{lang}", [" ".join(p) for p in model.encode(text, out_type=str)])
            # fairseq-preprocess names a --testpref subset "test": binarise each subset on its
            # own into a scratch folder and rename its files.
            scratch = staging / f"preprocess-{subset}"
            command = fairseq_preprocess_command() + [
                "--source-lang", src, "--target-lang", tgt, "--testpref", str(staging / subset),
                "--srcdict", str(dictionaries[src]), "--tgtdict", str(dictionaries[tgt]),
                "--destdir", str(scratch), "--workers", "1"]
            process = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if process.returncode != 0:
                tail = "\n".join(process.stdout.splitlines()[-20:])
                raise DataPrepError(f"{command[0]} exited with {process.returncode}:\n{tail}")
            binary.mkdir(exist_ok=True)
            for path in scratch.iterdir():
                if path.name.startswith("test."):
                    os.replace(path, binary / (subset + path.name[len("test"):]))
                elif path.name.startswith("dict."):
                    os.replace(path, binary / path.name)
        for subset, path in conllu.items():
            shutil.copyfile(path, binary / (f"{subset}.conllu" + (".gz" if path.endswith(".gz") else "")))
        replace_dir(binary, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(out)


def _named_pair(text: str) -> Tuple[str, Tuple[str, str]]:
    name, _, files = text.partition("=")
    pair = tuple(files.split(","))
    if not name or len(pair) != 2 or not all(pair):
        raise argparse.ArgumentTypeError(f"expected SUBSET=SRC_FILE,TGT_FILE, got {text!r}")
    return name, pair


def named_file(form: str):
    """argparse type of a NAME=FILE option (--conllu here, --subset of lm_conllu_subset): the pair
    (NAME, FILE); `form` names the expected form in the error."""
    def parse(text: str) -> Tuple[str, str]:
        name, _, path = text.partition("=")
        if not name or not path:
            raise argparse.ArgumentTypeError(f"expected {form}, got {text!r}")
        return name, path
    return parse


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m fairseq_heads.data.extra_subset`: the subsets, binarised with BIN's model (module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-bin", required=True, help="the model's data-bin (its dict.*.txt)")
    parser.add_argument("--spm-model", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--subset", type=_named_pair, action="append", required=True,
                        metavar="NAME=SRC_FILE,TGT_FILE", help="a subset to binarise (repeatable)")
    parser.add_argument("--conllu", type=named_file("SUBSET=FILE"), action="append", default=[], metavar="NAME=FILE",
                        help="source-side parses of a subset, copied as NAME.conllu[.gz]")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    try:
        out = binarize_subsets(args.data_bin, args.spm_model, dict(args.subset), args.src, args.tgt,
                               args.out_dir, dict(args.conllu))
    except DataPrepError as error:
        print(f"extra_subset: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
