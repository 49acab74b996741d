"""The paper's analysis of a Hugging Face translation model (OPUS-MT's MarianMTModel; FSMT,
M2M100 / NLLB where `binarise-hf` reads their tokenizer): nmt.py's steps with the model
imported instead of trained (docs/hf_translation.md, recipes/README.md).

    baseline      import-hf of the local model folder (`hf.path`) -> models/baseline/
                  checkpoint_best.pt (gates open: the HF model's function) + its model options
    data          binarise-hf of the parallel corpus (data.corpus/{stem}.{src,tgt}[.gz], the
                  stems of data.prefix) with the model's own tokenizer -> data/bin
    bleu_baseline, stats, syntax_data + syntax_stats (PUD, binarised the same way, its gold
                  parses checked to align with the model's pieces), curve_<m>: as nmt.py
    enc_l0_<λ>    (l0.encoder_lambdas, empty but at the `gpu` and `toy` scales) the L0 encoder
                  fine-tune of the imported model with the model's own options, its λ=0 control
                  (l0.control), each with bleu_ and pruned_ (`prune --from-gates`)
    report        tables.md, figures

The model's size and options come from the import (the `model` section is not read); `train`
holds the fine-tunes' batch size, dropout and label smoothing. A model whose target starts with
a language token (M2M100, NLLB) is refused by the baseline step: BLEU and the curves would have
to force that token (`--prefix-size 1`), which they do not yet.
"""
import os
from dataclasses import dataclass, field, replace
from typing import List

from ..commands import binarise_hf as binarise_hf_command, import_hf as import_hf_command, prune as prune_command
from ..errors import CommandError
from .fairseq_steps import StepError, run_fairseq_heads
from .nmt import NmtRecipe, NmtSteps
from .nmt_config import BASELINE_CHECKPOINT, L0, Curve, Data, Generate, Stats, Syntax, Train, lambda_name
from .runner import Step, StepContext


@dataclass(frozen=True)
class HfModel:
    path: str = ""              # the HF model folder: absolute, or relative to --data-root


@dataclass(frozen=True)
class HfTranslationRecipe(NmtRecipe):
    hf: HfModel = field(default_factory=HfModel)


# CI's scale: a tiny random Marian model with its own sentencepiece tokenizer and the toy corpus
# with its gold parses, both written under --data-root by the test
# (tests/hf_translation/test_translation_recipe.py); one encoder λ and its control, a few updates.
TOY_FOLDER = "hf_translation_toy"
HF_TRANSLATION_TOY = HfTranslationRecipe(
    name="hf_translation_toy",
    hf=HfModel(path=f"{TOY_FOLDER}/marian"),
    data=Data(corpus=TOY_FOLDER, src="en", tgt="de"),
    syntax=Syntax(source=f"{TOY_FOLDER}/test.en", target=f"{TOY_FOLDER}/test.de", conllu=f"{TOY_FOLDER}/test.conllu"),
    l0=L0(encoder_lambdas=(0.05,), control=True, updates=8, lr=1e-3, gate_lr_scale=400.0, trace_interval=4),
    generate=Generate(subset="test", beam=2, batch_size=64),
    curve=Curve(metrics=("grad", "confidence"), steps=(0, 2, 4, 6)),
)

# An OPUS-MT en->de model (`--set hf.path=MODEL_DIR`, e.g. a local Helsinki-NLP/opus-mt-en-de) on
# Multi30k en->de (its valid set in domain, its test set for BLEU) and PUD for the syntactic heads:
# the analysis needs no training, so a CPU runs it; the L0 sweep is the `gpu` scale's.
HF_TRANSLATION_CPU = HfTranslationRecipe(
    name="hf_translation",
    data=Data(corpus="multi30k_en_de", prefix=("train", "val", "test_2016_flickr"), src="en", tgt="de"),
    syntax=Syntax(source="ud_pud/pud.en.txt.gz", target="ud_pud/pud.de.txt.gz",
                  conllu="ud_pud/en_pud-ud-test.conllu.gz"),
    l0=L0(encoder_lambdas=(), control=True),
    generate=Generate(subset="test", beam=5, batch_size=64),
    stats=Stats(subset="valid", bootstrap_replicates=200, max_tokens=4096, rare_outside_top=500),
    curve=Curve(metrics=("grad", "lrp"), steps=(0, 12, 24, 36, 44)),
)
# + the L0 encoder sweep with its control, fine-tuning the imported model (fp16, gates 1000x faster)
HF_TRANSLATION_GPU = replace(
    HF_TRANSLATION_CPU,
    train=Train(max_tokens=8192, dropout=0.1, label_smoothing=0.1, fp16=True),
    l0=L0(encoder_lambdas=(0.005, 0.02), control=True, updates=1000, lr=1e-4, gate_lr_scale=1000.0,
          trace_interval=25),
    cpu=False,
)
HF_TRANSLATION_SCALES = {"toy": HF_TRANSLATION_TOY, "cpu": HF_TRANSLATION_CPU, "gpu": HF_TRANSLATION_GPU}


def corpus_file(data_root: str, corpus: str, stem: str, lang: str) -> str:
    """{stem}.{lang}.gz where it exists, else {stem}.{lang} (what the check names when neither does)."""
    plain = os.path.join(data_root, corpus, f"{stem}.{lang}")
    return plain + ".gz" if os.path.exists(plain + ".gz") else plain


def model_folder(config: HfTranslationRecipe, data_root: str) -> str:
    if not config.hf.path:
        raise CommandError("--set hf.path=MODEL_DIR: the hf_translation recipe needs a local Hugging Face "
                           "translation model folder (absolute, or under --data-root)")
    return os.path.join(data_root, config.hf.path)  # an absolute path stays itself


def hf_corpus_files(config: HfTranslationRecipe, data_root: str):
    """{step: the files it reads}, checked before the run (recipes.corpus_files)."""
    d, root = config.data, data_root
    files = {"baseline": [os.path.join(model_folder(config, root), "config.json")],
             "data": [corpus_file(root, d.corpus, stem, lang) for stem in d.prefix for lang in (d.src, d.tgt)],
             "syntax_data": []}
    if config.syntax.source:
        files["syntax_data"] = [os.path.join(root, getattr(config.syntax, f)) for f in ("source", "target", "conllu")]
    return files


def imported_model_options(model_dir: str) -> List[str]:
    """The fairseq-train options of the model `import-hf` makes from `model_dir`, less --arch."""
    from ..hf.import_translation import TranslationImportResult, read_vocabulary_maps
    from ..hf.translation_config import read_translation_config

    shape = read_translation_config(model_dir)
    source, target = read_vocabulary_maps(model_dir, shape)
    options = TranslationImportResult(shape, source, target, ("src", "tgt"), []).model_options()
    return options[2:] if options[:2] == ["--arch", "gated_transformer"] else options


class HfTranslationSteps(NmtSteps):
    def __init__(self, config: HfTranslationRecipe, data_root: str, user_dir: str):
        super().__init__(config, data_root, user_dir)
        # an empty hf.path is refused by the check before the run (hf_corpus_files), not here:
        # the steps and their keys exist without a model (--dry-run, the config tests)
        self.model_dir = os.path.join(data_root, config.hf.path)

    def steps(self) -> List[Step]:
        c = self.c
        steps = super().steps()  # the order: data, baseline, ... (each reads only earlier steps)
        steps[0:2] = [Step("baseline", "models/baseline", {"hf": c.hf.path, "langs": [c.data.src, c.data.tgt]},
                           call=self.run_import),
                      Step("data", "data", {"corpus": c.data.corpus, "prefix": list(c.data.prefix),
                                            "langs": [c.data.src, c.data.tgt]},
                           inputs=("baseline",), call=self.run_data)]
        report = steps.pop()
        for lam in self.encoder_lambdas():
            name = f"enc_l0_{lambda_name(lam)}"
            steps.append(Step(f"pruned_{name}", f"models/pruned_{name}", {}, inputs=(name,),
                              call=self.prune_call(name)))
        return steps + [Step(report.name, None, {}, inputs=tuple(s.name for s in steps), call=report.call)]

    def encoder_lambdas(self):
        """The quick protocol's encoder fine-tunes, each pruned (the converged protocol,
        `converged.seeds`, names and prunes its models itself: nmt_converged.py)."""
        c = self.c
        if c.converged.seeds:
            return []
        return list(c.l0.encoder_lambdas) + ([0.0] if c.l0.control and c.l0.encoder_lambdas else [])

    # ------------------------------------------------------------------ the imported model's options
    def size(self) -> List[str]:
        return imported_model_options(self.model_dir)

    def training(self, max_tokens: int, seed: int = 0, gate_adam: bool = False) -> List[str]:
        """nmt.py's, less its position limits: the imported model keeps its own."""
        options = [str(o) for o in super().training(max_tokens, seed, gate_adam)]
        for name in ("--max-source-positions", "--max-target-positions"):
            i = options.index(name)
            del options[i:i + 2]
        return options

    # ------------------------------------------------------------------ the steps of their own
    def run_import(self, context: StepContext) -> None:
        from ..hf.translation_config import read_translation_config

        if read_translation_config(self.model_dir).model_type == "m2m_100":
            raise StepError(f"{self.model_dir}: M2M100 / NLLB targets start with a language token that BLEU "
                            f"and the curves do not force yet (--prefix-size 1); binarise-hf and the commands "
                            f"run on it one by one (docs/hf_translation.md)")
        c = self.c.data
        imported = os.path.join(context.out, "imported")
        run_fairseq_heads(import_hf_command, [self.model_dir, "--out", imported,
                                              "--source-lang", c.src, "--target-lang", c.tgt])
        for name in os.listdir(imported):
            os.replace(os.path.join(imported, name),
                       os.path.join(context.out, BASELINE_CHECKPOINT if name == "checkpoint.pt" else name))
        os.rmdir(imported)

    def binarise(self, out: str, splits: dict, conllu: str = "") -> None:
        c = self.c.data
        argv = [self.model_dir, "--out", out, "--source-lang", c.src, "--target-lang", c.tgt]
        for split, (source, target) in splits.items():
            argv += [f"--{split}", f"{source},{target}"]
        run_fairseq_heads(binarise_hf_command, argv + (["--conllu", f"test={conllu}"] if conllu else []))

    def run_data(self, context: StepContext) -> None:
        c = self.c.data
        self.binarise(os.path.join(context.out, "bin"), {
            split: tuple(corpus_file(self.data_root, c.corpus, stem, lang) for lang in (c.src, c.tgt))
            for split, stem in zip(("train", "valid", "test"), c.prefix)})

    def run_syntax_data(self, context: StepContext) -> None:
        s, root = self.c.syntax, self.data_root
        self.binarise(os.path.join(context.out, "bin"),
                      {"test": (os.path.join(root, s.source), os.path.join(root, s.target))},
                      os.path.join(root, s.conllu))

    def prune_call(self, name: str):
        def call(context: StepContext) -> None:
            run_fairseq_heads(prune_command, [
                "--path", context.path(f"models/{name}/checkpoint_last.pt"),
                "--out", os.path.join(context.out, "checkpoint.pt"), "--from-gates"])
        return call

