"""`fairseq-heads binarise-hf` on parallel text for an imported Marian model: the data-bin holds
what MarianTokenizer gives (source input_ids, target labels, language code and <unk> included),
fairseq's teacher forcing on it equals HF's forward pass on the tokenizer's own batch, dict.txt
counts the training tokens, gold parses are checked to align, and bad input exits 2 in one line
with nothing written."""
import collections
import os

import pytest
import torch

from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.cli import main
from fairseq_heads.data.synthetic_corpus import generate_corpus
from fairseq_heads.hf.import_translation import read_vocabulary_maps
from fairseq_heads.hf.translation_config import read_translation_config
from hf_translation.hf_models import parity_tolerance
from hf_translation.marian_tokenizer import MULTILINGUAL_CODE, save_marian_with_tokenizer

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    work = tmp_path_factory.mktemp("marian_binarise")
    files = generate_corpus(work / "corpus", 120, 16, 16, src_lang="en", tgt_lang="de")
    model_dir, hf = save_marian_with_tokenizer(work / "hf", str(files["train"].src), str(files["train"].tgt))
    # a line with a target-language code and a character the tokenizer never saw (<unk>)
    extra_en, extra_de = work / "extra.en", work / "extra.de"
    extra_en.write_text(f"{MULTILINGUAL_CODE} the Ω cat .\nfoo bar .\n", encoding="utf-8")
    extra_de.write_text("die Ω katze .\nfu ba .\n", encoding="utf-8")
    assert main(["import-hf", model_dir, "--out", str(work / "imported"), "--source-lang", "en",
                 "--target-lang", "de"]) == 0
    return dict(work=work, files=files, model_dir=model_dir, hf=hf, extra=(str(extra_en), str(extra_de)))


def pairs(files, split):
    return f"{files[split].src},{files[split].tgt}"


def binarise(marian, out, *extra):
    files = marian["files"]
    return main(["binarise-hf", marian["model_dir"], "--train", pairs(files, "train"), "--valid",
                 ",".join(marian["extra"]), "--test", pairs(files, "test"), "--source-lang", "en",
                 "--target-lang", "de", "--conllu", f"test={files['test'].conllu}", "--out", str(out), *extra])


def read_split(data_bin, split, lang):
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(os.path.join(data_bin, f"{split}.en-de.{lang}"), None)
    return [dataset[i].tolist() for i in range(len(dataset))]


def test_data_bin_holds_what_marian_tokenizer_gives_and_counts_the_train_tokens(marian, tmp_path):
    from transformers import AutoTokenizer

    assert binarise(marian, tmp_path / "bin") == 0
    tokenizer = AutoTokenizer.from_pretrained(marian["model_dir"])
    source, target = read_vocabulary_maps(marian["model_dir"], read_translation_config(marian["model_dir"]))
    files = marian["files"]
    texts = {"train": (files["train"].src, files["train"].tgt), "valid": marian["extra"],
             "test": (files["test"].src, files["test"].tgt)}
    counts = {"en": collections.Counter(), "de": collections.Counter()}
    for split, (en, de) in texts.items():
        for lang, path, side, vocab in (("en", en, "input_ids", source), ("de", de, "labels", target)):
            lines = open(path, encoding="utf-8").read().splitlines()
            encoded = tokenizer(lines) if side == "input_ids" else tokenizer(text_target=lines)
            expected = [[vocab.hf_to_fairseq[i] for i in ids] for ids in encoded["input_ids"]]
            assert read_split(str(tmp_path / "bin"), split, lang) == expected, (split, lang)
            if split == "train":
                counts[lang].update(i for ids in expected for i in ids)
    valid_en = read_split(str(tmp_path / "bin"), "valid", "en")
    code = source.hf_to_fairseq[tokenizer.convert_tokens_to_ids(MULTILINGUAL_CODE)]
    assert valid_en[0][0] == code and 3 in valid_en[0]  # the code a token of its own; Ω is <unk>
    for lang in ("en", "de"):  # dict.txt: the importer's words in its order, the train split's counts
        imported = (marian["work"] / "imported" / f"dict.{lang}.txt").read_text(encoding="utf-8").splitlines()
        written = (tmp_path / "bin" / f"dict.{lang}.txt").read_text(encoding="utf-8").splitlines()
        assert [line.split(" ")[0] for line in written] == [line.split(" ")[0] for line in imported]
        assert [int(line.split(" ")[1]) for line in written] == [counts[lang][4 + i] for i in range(len(written))]
    assert (tmp_path / "bin" / "test.conllu").read_text() == files["test"].conllu.read_text()


@pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels
def test_teacher_forcing_on_the_data_bin_equals_hf_on_its_own_tokenizer(marian, tmp_path):
    from transformers import AutoTokenizer

    assert binarise(marian, tmp_path / "bin") == 0
    model, task = load_model_and_task(str(marian["work"] / "imported" / "checkpoint.pt"),
                                      {"data": str(tmp_path / "bin")})
    model.eval()  # (training mode samples the gates)
    task.load_dataset("test")
    dataset = task.dataset("test")
    tokenizer = AutoTokenizer.from_pretrained(marian["model_dir"])
    files = marian["files"]
    sources = files["test"].src.read_text(encoding="utf-8").splitlines()[:4]
    targets = files["test"].tgt.read_text(encoding="utf-8").splitlines()[:4]
    hf = marian["hf"]
    for i, (src, tgt) in enumerate(zip(sources, targets)):
        batch = task.dataset("test").collater([dataset[i]])
        with torch.no_grad():
            ours = model.get_normalized_probs(model(**batch["net_input"]), log_probs=True)[0]
            encoded = tokenizer(src, text_target=tgt, return_tensors="pt")
            theirs = torch.log_softmax(hf(**encoded).logits.float(), dim=-1)[0]
        target = batch["target"][0]
        labels = encoded["labels"][0]
        assert target.tolist() == [task.target_dictionary.index(tokenizer.convert_ids_to_tokens(int(t)))
                                   if int(t) != hf.config.eos_token_id else 2 for t in labels]
        # log p of each reference token, fairseq's index against HF's id, within the parity bound
        # of a log-sum-exp over the tokenizer's words (capped at the 1e-4)
        difference = ours[torch.arange(len(target)), target] - theirs[torch.arange(len(labels)), labels]
        assert difference.abs().max() <= parity_tolerance(theirs, words=theirs.size(-1))


def one_line_exit_2(capsys, argv, out, named):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err
    assert not os.path.exists(out)


def test_bad_input_exits_2_in_one_line_with_nothing_written(marian, tmp_path, capsys):
    files, model_dir = marian["files"], marian["model_dir"]
    out = tmp_path / "bin"
    common = [model_dir, "--source-lang", "en", "--target-lang", "de", "--out", str(out)]
    one_line_exit_2(capsys, ["binarise-hf", *common, "--train", f"{files['train'].src},{files['valid'].tgt}"],
                    out, "lines")
    # the parses of another split do not spell these sentences
    one_line_exit_2(capsys, ["binarise-hf", *common, "--test", pairs(files, "valid"), "--conllu",
                             f"test={files['test'].conllu}"], out, "do not spell the parsed text")
    one_line_exit_2(capsys, ["binarise-hf", *common, "--valid", pairs(files, "valid"), "--conllu",
                             f"test={files['test'].conllu}"], out, "'test'")
    one_line_exit_2(capsys, ["binarise-hf", model_dir, "--text", str(tmp_path), "--out", str(out)], out,
                    "is a translation model")
    one_line_exit_2(capsys, ["binarise-hf", *common], out, "no split")


@pytest.mark.parametrize("kind", ["fsmt", "m2m_100"])
def test_a_tokenizer_that_does_not_load_exits_2_in_one_line(kind, tmp_path, capsys):
    """The tiny models of hf_models have vocabularies but no tokenizer files (FSMT's also needs
    sacremoses): refused before anything is written."""
    from hf_translation.hf_models import hf_model, save_hf_model

    model_dir = save_hf_model(hf_model(kind), kind, tmp_path / "hf")
    (tmp_path / "p.en").write_text("a b\n", encoding="utf-8")
    (tmp_path / "p.de").write_text("c d\n", encoding="utf-8")
    one_line_exit_2(capsys, ["binarise-hf", model_dir, "--train", f"{tmp_path / 'p.en'},{tmp_path / 'p.de'}",
                             "--source-lang", "en", "--target-lang", "de", "--out", str(tmp_path / "bin")],
                    tmp_path / "bin", "its tokenizer does not load")
