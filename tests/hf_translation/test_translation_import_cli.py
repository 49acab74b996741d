"""`fairseq-heads import-hf` on translation directories from the command line: the files and
the dictionaries written, and what it refuses (exit 2, one line naming it, nothing written, the
config checked before any weight is read)."""
import json
import os

import pytest

from fairseq_heads.cli import main
from hf_translation.hf_models import VOCAB, hf_model, save_hf_model

pytest.importorskip("transformers")


def import_cli(capsys, *argv):
    status = main(["import-hf", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_marian_import_writes_both_dictionaries(tmp_path, capsys):
    source = save_hf_model(hf_model("marian"), "marian", tmp_path / "hf")
    status, out, _ = import_cli(capsys, source, "--out", tmp_path / "out", "--source-lang", "en",
                                "--target-lang", "de")
    assert status == 0 and "MarianMTModel" in out and "--decoder-start-token pad" in out
    assert sorted(os.listdir(tmp_path / "out")) == ["checkpoint.pt", "dict.de.txt", "dict.en.txt"]
    lines = (tmp_path / "out" / "dict.en.txt").read_text(encoding="utf-8").splitlines()
    # Marian's </s>, <unk>, <pad> are fairseq's 2, 3, 1: every other id is one line, in id order;
    # "a " (trailing space: dict.txt cannot hold it) is a placeholder
    words = [line.split(" ")[0] for line in lines]  # (the counts are vocabulary.dictionary_text's)
    assert len(words) == VOCAB - 3 and words[:3] == ["▁a", "<hf_id_3>", "w0"]
    assert (tmp_path / "out" / "dict.de.txt").read_text(encoding="utf-8") == "\n".join(lines) + "\n"


T5 = dict(model_type="t5", architectures=["T5ForConditionalGeneration"], vocab_size=32, d_model=8,
          d_kv=4, d_ff=16, num_layers=1, num_heads=2, relative_attention_num_buckets=8)
MARIAN = dict(model_type="marian", architectures=["MarianMTModel"], vocab_size=16, d_model=8,
              encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
              encoder_ffn_dim=16, decoder_ffn_dim=16, pad_token_id=15, eos_token_id=0,
              decoder_start_token_id=15, activation_function="swish")
CASES = {
    "t5": (T5, "'t5' (model_type: relative position buckets)"),
    "bart": (dict(model_type="bart", architectures=["BartForConditionalGeneration"]), "'bart'"),
    "marian head": (dict(MARIAN, architectures=["MarianForCausalLM"]), "'MarianForCausalLM'"),
    "activation": (dict(MARIAN, activation_function="tanh"), "activation_function 'tanh'"),
    "separate vocabularies": (dict(MARIAN, share_encoder_decoder_embeddings=False),
                              "share_encoder_decoder_embeddings"),
    "start token": (dict(MARIAN, decoder_start_token_id=0), "decoder_start_token_id 0"),
    "m2m100 pad": (dict(MARIAN, model_type="m2m_100", architectures=["M2M100ForConditionalGeneration"],
                        pad_token_id=0, eos_token_id=2, decoder_start_token_id=2), "pad_token_id 0"),
    "missing size": ({k: v for k, v in MARIAN.items() if k != "d_model"}, "d_model"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unsupported_translation_config_exits_2_before_reading_weights(tmp_path, capsys, case):
    config, named = CASES[case]
    source = tmp_path / "hf"
    source.mkdir()
    (source / "config.json").write_text(json.dumps(config))
    (source / "model.safetensors").write_bytes(b"not a safetensors file")  # never reached
    status, _, err = import_cli(capsys, source, "--out", tmp_path / "out")
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and named in lines[0] and "config.json" in lines[0], err
    assert os.listdir(tmp_path) == ["hf"]


def test_real_t5_config_is_refused(tmp_path, capsys):
    """The config transformers itself writes for a tiny T5."""
    from transformers import T5Config

    T5Config(vocab_size=32, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2).save_pretrained(tmp_path / "t5")
    status, _, err = import_cli(capsys, tmp_path / "t5", "--out", tmp_path / "out")
    assert status == 2 and "relative position buckets" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_missing_vocabulary_and_tensor_are_named(tmp_path, capsys):
    source = save_hf_model(hf_model("fsmt"), "fsmt", tmp_path / "hf")
    os.remove(os.path.join(source, "vocab-tgt.json"))
    status, _, err = import_cli(capsys, source, "--out", tmp_path / "out")
    assert status == 2 and "no vocab-tgt.json" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
