"""`fairseq-heads binarise-hf`: text through the HF model's own tokenizer into a data-bin that
the imported checkpoint reads; fairseq-eval-lm's perplexity on it equals HF's on the same
blocks."""
import math
import re

import pytest
import torch

from core.helpers import USER_DIR, run_cli
from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.cli import main
from fairseq_heads.hf.import_hf import import_hf
from llama.hf_models import hf_model, save_hf_model, tokenizer_strings

pytest.importorskip("transformers")


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_eval_lm_on_binarised_text_gives_hf_perplexity(kind, tmp_path):
    hf = hf_model(kind, kv_heads=2)
    source = save_hf_model(hf, kind, tmp_path / "hf")
    imported = import_hf(source, str(tmp_path / "imported"))
    words = [w for w in tokenizer_strings(kind) if w.startswith("w")]
    g = torch.Generator().manual_seed(0)
    text = tmp_path / "text"
    text.mkdir()
    lines = [" ".join(words[i] for i in torch.randint(0, len(words), (int(n),), generator=g).tolist())
             for n in torch.randint(3, 12, (20,), generator=g)]
    (text / "valid.txt").write_text("\n".join(lines[:10] + [""] + lines[10:]) + "\n")
    assert main(["binarise-hf", source, "--text", str(text), "--out", str(tmp_path / "bin")]) == 0
    assert (tmp_path / "bin" / "dict.txt").read_text() == (tmp_path / "imported" / "dict.txt").read_text()

    model, task = load_model_and_task(str(tmp_path / "imported" / "checkpoint.pt"),
                                      {"data": str(tmp_path / "bin"), "tokens_per_sample": 16})
    task.load_dataset("valid")
    dictionary = task.dictionary
    stream = torch.cat([task.dataset("valid").dataset.dataset[i] for i in range(21)]).tolist()
    expected = [i for line in lines[:10] for i in [dictionary.index(w) for w in line.split()] + [2]]
    assert stream[:len(expected)] == expected  # each line's words, then </s>
    assert stream.count(2) == 21  # the empty line is a lone </s>

    process = run_cli(["fairseq-eval-lm", str(tmp_path / "bin"), "--user-dir", USER_DIR, "--path",
                       str(tmp_path / "imported" / "checkpoint.pt"), "--tokens-per-sample", "16",
                       "--cpu", "--gen-subset", "valid", "--max-tokens", "512"])
    assert process.returncode == 0, process.stderr[-2000:]
    reported = float(re.search(r"Perplexity: ([\d.]+)", process.stderr + process.stdout).group(1))

    to_hf = {f: h for h, f in enumerate(imported.vocab.hf_to_fairseq)}
    nll = count = 0.0
    with torch.no_grad():
        for sample in task.dataset("valid"):
            source = torch.tensor([[to_hf[int(t)] for t in sample["source"]]])
            target = [to_hf[int(t)] for t in sample["target"]]
            lprobs = torch.log_softmax(hf(source).logits[0].double(), -1)
            nll -= float(sum(lprobs[i, t] for i, t in enumerate(target)))
            count += len(target)
    assert reported == pytest.approx(math.exp(nll / count), abs=0.006)  # eval-lm prints 2 decimals


def test_prepare_lm_with_a_hf_tokenizer(tmp_path, capsys):
    """`prepare-lm --tokenizer MODEL_DIR`: the corpus text, binarised with the model's tokenizer
    into WORK/hf_bin with the import's dictionary; a bad model directory fails first."""
    source = save_hf_model(hf_model("llama", kv_heads=2), "llama", tmp_path / "hf")
    work = tmp_path / "work"
    assert main(["prepare-lm", "--work-dir", str(work), "--corpus", "synthetic",
                 "--synthetic-sentences", "60", "--tokenizer", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err and not work.exists()
    assert main(["prepare-lm", "--work-dir", str(work), "--corpus", "synthetic",
                 "--synthetic-sentences", "60", "--tokenizer", source]) == 0
    import_hf(source, str(tmp_path / "imported"))
    assert (work / "hf_bin" / "dict.txt").read_text() == (tmp_path / "imported" / "dict.txt").read_text()
    from fairseq.data import data_utils

    valid = data_utils.load_indexed_dataset(str(work / "hf_bin" / "valid"), None)
    lines = (work / "text" / "valid.txt").read_text().splitlines()
    assert len(valid) == len(lines)
    # the toy grammar's words are not this tokenizer's: each word is <unk> (fairseq's 3), then </s>
    assert valid[0].tolist() == [3] * len(lines[0].split()) + [2]
