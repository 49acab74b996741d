"""Decoder-only LM fixtures: a toy LM data-bin and a tiny plain `transformer_lm` trained on it."""
import pytest

from core.helpers import USER_DIR, run_cli

LM_SIZES = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
            "--decoder-attention-heads", "4", "--tokens-per-sample", "64"]


@pytest.fixture(scope="session")
def lm_data_bin(tmp_path_factory):
    """`fairseq-heads prepare-lm --corpus synthetic` (toy grammar; 1,500 train sentences)."""
    from fairseq_heads.data.lm_corpus import LMCorpusConfig, prepare_lm

    work = tmp_path_factory.mktemp("lm_data") / "work"
    return prepare_lm(LMCorpusConfig(work_dir=work, corpus="synthetic", synthetic_sentences=1500,
                                     vocab_size=300))


@pytest.fixture(scope="session")
def plain_lm(lm_data_bin, tmp_path_factory):
    """checkpoint_last.pt of a plain 2-layer, d=32, 4-head `transformer_lm` (60 updates)."""
    save_dir = tmp_path_factory.mktemp("plain_lm")
    process = run_cli([
        "fairseq-train", str(lm_data_bin), "--user-dir", USER_DIR, "--task", "language_modeling",
        "--arch", "transformer_lm", *LM_SIZES, "--sample-break-mode", "none", "--max-tokens", "1024",
        "--optimizer", "adam", "--lr", "3e-3", "--max-update", "60", "--cpu", "--num-workers", "0",
        "--save-dir", str(save_dir), "--no-epoch-checkpoints", "--disable-validation",
        "--no-save-optimizer-state", "--seed", "1", "--log-format", "simple"])
    assert process.returncode == 0, process.stderr[-3000:]
    return save_dir / "checkpoint_last.pt"
