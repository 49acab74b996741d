"""`fairseq-heads import-hf` on what it cannot convert: exit 2, one line naming the file or
option, nothing written, and the config checked before any weight is read."""
import json
import os

import pytest

from core.helpers import run_cli
from fairseq_heads.cli import main


def import_hf_cli(capsys, *argv):
    """(exit status, stderr) of `fairseq-heads import-hf ARGV`, in-process."""
    status = main(["import-hf", *map(str, argv)])
    return status, capsys.readouterr().err

LLAMA = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=16, hidden_size=8,
             intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1, hidden_act="silu", eos_token_id=2)


def model_dir(tmp_path, config, weights=b"not a safetensors file", tokenizer=True):
    directory = tmp_path / "hf"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    if weights is not None:
        (directory / "model.safetensors").write_bytes(weights)
    if tokenizer:
        vocab = {f"w{i}": i for i in range(16)}
        (directory / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordLevel", "vocab": vocab}}))
    return directory


CASES = {
    "gpt2": (dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=8), "'gpt2'"),
    "sliding window": (dict(LLAMA, model_type="mistral", architectures=["MistralForCausalLM"],
                            sliding_window=4096), "sliding_window"),
    "qwen2 sliding window": (dict(LLAMA, model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                                  use_sliding_window=True, sliding_window=64), "sliding_window"),
    "rope scaling": (dict(LLAMA, rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope_scaling 'yarn'"),
    "activation": (dict(LLAMA, hidden_act="gelu"), "hidden_act"),
    "missing size": ({k: v for k, v in LLAMA.items() if k != "hidden_size"}, "hidden_size"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unsupported_config_exits_2_before_reading_weights(tmp_path, capsys, case):
    config, named = CASES[case]
    source = model_dir(tmp_path, config)  # the weights file is garbage: never reached
    out = tmp_path / "out"
    status, stderr = import_hf_cli(capsys, source, "--out", out)
    assert status == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "config.json" in lines[0], stderr
    assert not out.exists() and os.listdir(tmp_path) == ["hf"]


def test_bad_weights_and_missing_tokenizer_are_named(tmp_path, capsys):
    source = model_dir(tmp_path, LLAMA)
    status, stderr = import_hf_cli(capsys, source, "--out", tmp_path / "out")
    assert status == 2 and "model.safetensors: not a safetensors file" in stderr
    os.remove(source / "tokenizer.json")
    status, stderr = import_hf_cli(capsys, source, "--out", tmp_path / "out")
    assert status == 2 and "no tokenizer.json or tokenizer.model" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["hf"]


def test_missing_directory_from_the_console_script(tmp_path):
    process = run_cli(["fairseq-heads", "import-hf", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert process.returncode == 2 and "nope: not a directory" in process.stderr
    assert len(process.stderr.strip().splitlines()) == 1
