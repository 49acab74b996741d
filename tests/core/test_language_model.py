"""Decoder-only language models: `gated_transformer_lm` trained by fairseq-train on the toy corpus."""
import subprocess

import torch
from fairseq import checkpoint_utils

from fairseq_heads.models.gated_transformer import open_heads_per_type

from .helpers import BIN_DIR, USER_DIR, reordered_tolerance, run_cli


def test_gated_lm_trains_prunes_and_equals_plain_lm_when_open(toy_data_bin, tmp_path):
    lm_bin = tmp_path / "lm-bin"
    spm_train = toy_data_bin.spm_dir / "train.src"
    subprocess.run([BIN_DIR + "/fairseq-preprocess", "--only-source",
                    "--trainpref", str(spm_train), "--validpref", str(toy_data_bin.spm_dir / "valid.src"),
                    "--destdir", str(lm_bin), "--workers", "1"], check=True, capture_output=True)
    common = [str(lm_bin), "--user-dir", USER_DIR, "--task", "language_modeling", "--cpu",
              "--num-workers", "0", "--tokens-per-sample", "64", "--sample-break-mode", "eos",
              "--max-tokens", "1024", "--decoder-layers", "2", "--decoder-embed-dim", "32",
              "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4",
              "--no-epoch-checkpoints", "--no-progress-bar", "--seed", "1"]
    process = run_cli(["fairseq-train", *common, "--arch", "gated_transformer_lm",
                       "--criterion", "label_smoothed_cross_entropy_l0", "--l0-lambda", "5",
                       "--optimizer", "gate_adam", "--lr", "1e-3", "--gate-lr-scale", "150",
                       "--max-update", "40", "--save-dir", str(tmp_path / "ckpt")])
    assert process.returncode == 0, process.stderr[-2000:]
    [model], _ = checkpoint_utils.load_model_ensemble([str(tmp_path / "ckpt" / "checkpoint_last.pt")])
    opened, total = open_heads_per_type(model)["dec-self"]
    assert total == 8 and opened < total

    # with every gate open, the gated LM computes exactly what fairseq's plain LM computes
    from fairseq.models.transformer_lm import TransformerLanguageModel

    plain = TransformerLanguageModel(model.decoder.__class__(
        model.decoder.args, model.decoder.dictionary, model.decoder.embed_tokens, no_encoder_attn=True))
    # the plain LM has neither gates nor the head-target record of a gated model
    plain.load_state_dict({k: v for k, v in model.state_dict().items()
                           if "gate" not in k and not k.startswith("head_target_record.")})
    for layer in model.decoder.layers:
        layer.self_attn.gate.fix(torch.ones(4))
    tokens = torch.tensor([[2, 11, 25, 7, 40, 9]])
    with torch.no_grad():
        expected = plain.eval()(tokens)[0]  # logits: open gates, another attention path
        assert (model.eval()(tokens)[0] - expected).abs().max() <= reordered_tolerance(expected)
