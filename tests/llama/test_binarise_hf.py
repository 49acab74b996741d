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
    def entries(path):  # the words and flags (binarise-hf's counts are the text's, the import's 0)
        return [line.split()[:1] + line.split()[2:] for line in path.read_text().splitlines()]

    assert entries(tmp_path / "bin" / "dict.txt") == entries(tmp_path / "imported" / "dict.txt")

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
            source = [to_hf[int(t)] for t in sample["source"]]
            if imported.block_start == "bos" and int(sample["source"][0]) == 2:  # a line's start
                source[0] = imported.shape.bos_token_id  # read as <s> (gated_llama --block-start)
            source = torch.tensor([source])
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
    assert [line.split()[0] for line in (work / "hf_bin" / "dict.txt").read_text().splitlines()] == \
        [line.split()[0] for line in (tmp_path / "imported" / "dict.txt").read_text().splitlines()]
    from fairseq.data import data_utils

    valid = data_utils.load_indexed_dataset(str(work / "hf_bin" / "valid"), None)
    lines = (work / "text" / "valid.txt").read_text().splitlines()
    assert len(valid) == len(lines)
    # the toy grammar's words are not this tokenizer's: each word is <unk> (fairseq's 3), then </s>
    assert valid[0].tolist() == [3] * len(lines[0].split()) + [2]


def test_fine_tune_an_imported_model_with_gates(tmp_path):
    """docs/llama.md's fine-tune: the import's model options + --finetune-from-model, the L0
    criterion with --train-gates-only on the binarised text: the weights stay the imported ones,
    the gates learn."""
    source = save_hf_model(hf_model("qwen2", kv_heads=2), "qwen2", tmp_path / "hf")
    imported = import_hf(source, str(tmp_path / "imported"))
    words = [w for w in tokenizer_strings("qwen2") if w.startswith("w")]
    text = tmp_path / "text"
    text.mkdir()
    g = torch.Generator().manual_seed(0)
    (text / "train.txt").write_text("\n".join(" ".join(words[i] for i in torch.randint(
        0, len(words), (10,), generator=g).tolist()) for _ in range(40)) + "\n")
    assert main(["binarise-hf", source, "--text", str(text), "--out", str(tmp_path / "bin")]) == 0
    process = run_cli([
        "fairseq-train", str(tmp_path / "bin"), "--user-dir", USER_DIR, "--task", "language_modeling_heads",
        *imported.model_options(), "--finetune-from-model", str(tmp_path / "imported" / "checkpoint.pt"),
        "--tokens-per-sample", "32", "--max-tokens", "256", "--criterion", "cross_entropy_l0",
        "--l0-lambda", "0.01", "--optimizer", "gate_adam", "--lr", "1e-4", "--gate-lr-scale", "10",
        "--train-gates-only", "--max-update", "3", "--cpu", "--num-workers", "0", "--disable-validation",
        "--save-dir", str(tmp_path / "ft"), "--no-epoch-checkpoints", "--no-save-optimizer-state"])
    assert process.returncode == 0, process.stderr[-3000:]
    model, _ = load_model_and_task(str(tmp_path / "ft" / "checkpoint_last.pt"), {"data": str(tmp_path / "bin")})
    attention = model.decoder.layers[0].self_attn
    assert attention.num_kv_heads == 2 and model.decoder.blocked_output_symbols == imported.vocab.blocked
    imported_model, _ = load_model_and_task(str(tmp_path / "imported" / "checkpoint.pt"), {"data": str(tmp_path / "bin")})
    # --train-gates-only: every weight as imported, only log-alphas moved
    moved = []
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), imported_model.state_dict().items()):
        if name.endswith("log_alpha"):
            moved.append(not torch.equal(ours, theirs))
        else:
            assert torch.equal(ours, theirs), name
    assert moved and all(moved)
