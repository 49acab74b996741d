"""Every `transformer` and `transformer_lm` architecture fairseq registers has a gated counterpart
that, with its gates open, computes exactly what fairseq's model computes; `stats` and `prune`
run on each translation one, physical pruning on each language model.

Sizes are overridden to a tiny model; pre-norm, shared decoder input/output embeddings, learned
positions and layerdrop are switched on for every architecture (fairseq allows them all).
"""
import copy

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY

from fairseq_heads import cli
from fairseq_heads.stats.capture import python_attention_path
from fairseq_heads.gating.head_masks import apply_head_mask
from fairseq_heads.heads import heads_per_layer as model_head_shape
from fairseq_heads.models.gated_transformer import GATED_ARCHITECTURES
from fairseq_heads.models.gated_transformer_lm import GATED_ARCHITECTURES as GATED_LM_ARCHITECTURES
from fairseq_heads.heads import iter_attention
from fairseq_heads.pruning.physical import physically_prune
from fairseq_heads.stats import StatsOptions, compute_head_statistics

from .helpers import TINY_SIZES, USER_DIR, random_batch, reordered_tolerance

TRANSLATION_ARCHS = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer")
LM_ARCHS = sorted(a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer_lm")
SHARED = ["--decoder-normalize-before", "--share-decoder-input-output-embed", "--decoder-learned-pos",
          "--decoder-layerdrop", "0.1", "--dropout", "0", "--attention-dropout", "0", "--cpu"]
TRANSLATION_OPTIONS = [*TINY_SIZES, *SHARED, "--encoder-normalize-before", "--encoder-learned-pos",
                       "--encoder-layerdrop", "0.1", "-s", "src", "-t", "tgt"]
LM_OPTIONS = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64",
              "--decoder-attention-heads", "4", "--tokens-per-sample", "16", *SHARED]
# The wiki103 architectures use adaptive input/softmax with cutoffs beyond a toy vocabulary.
ADAPTIVE = ["--adaptive-input-cutoff", "20,40", "--adaptive-softmax-cutoff", "20,40"]


def build(data, task, arch, extra):
    """(args, model in eval mode) from command-line options. An architecture whose function is
    fairseq's no-op for dataclass models (`transformer_lm`) takes fairseq-train's way, through a
    hydra config, which fills in the dataclass defaults (slower)."""
    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data), "--task", task, "--arch", arch, "--user-dir", USER_DIR, *extra])
    if ARCH_CONFIG_REGISTRY[arch].__name__ == "noop":
        cfg = convert_namespace_to_omegaconf(args)
        return args, tasks.setup_task(cfg.task).build_model(cfg.model).eval()
    return args, tasks.setup_task(args).build_model(args).eval()


def save_cfg_checkpoint(model, args, path) -> str:
    """A checkpoint with its options as a config, as fairseq-train saves it (loading an `args`
    checkpoint converts them anew, through hydra, at every load)."""
    torch.save({"cfg": convert_namespace_to_omegaconf(args), "model": model.state_dict(),
                "extra_state": {}, "optimizer_history": [{"num_updates": 0, "best_loss": None,
                                                                    "criterion_name": "CrossEntropyCriterion",
                                                                    "optimizer_name": "Adam",
                                                                    "lr_scheduler_state": {}}]}, path)
    return str(path)


def gated_equals_plain(plain, gated, *inputs):
    """Load the plain weights into the gated model (gates start open) and compare outputs. Both
    run fairseq's Python attention computation (the plain blocks off torch's fused kernel, the
    gated ones on their explicit path, `use_sdpa = False`), and an open gate multiplies by
    exactly 1.0: the same operations in the same order, so the outputs are equal bit for bit."""
    gated.load_state_dict(plain.state_dict(), strict=True)
    for _, _, attention in iter_attention(gated):
        attention.use_sdpa = False
    with torch.no_grad(), python_attention_path(plain):
        expected = plain(*inputs)[0]
        actual = gated(*inputs)[0]
    assert torch.equal(actual, expected), (actual - expected).abs().max()


def test_every_fairseq_architecture_has_a_gated_counterpart():
    assert sorted(GATED_ARCHITECTURES) == TRANSLATION_ARCHS and sorted(GATED_LM_ARCHITECTURES) == LM_ARCHS
    assert {ARCH_MODEL_NAME_REGISTRY[a] for a in GATED_ARCHITECTURES.values()} == {"gated_transformer"}
    assert {ARCH_MODEL_NAME_REGISTRY[a] for a in GATED_LM_ARCHITECTURES.values()} == {"gated_transformer_lm"}
    assert GATED_ARCHITECTURES["transformer_wmt_en_de_big_t2t"] == "gated_transformer_wmt_en_de_big_t2t"
    assert GATED_LM_ARCHITECTURES["transformer_lm_gpt"] == "gated_transformer_lm_gpt"


@pytest.mark.parametrize("arch", TRANSLATION_ARCHS)
def test_gated_translation_architecture(arch, toy_data_bin, tmp_path):
    data = toy_data_bin.data_bin
    _, plain = build(data, "translation_heads", arch, TRANSLATION_OPTIONS)
    gated_options = [*TRANSLATION_OPTIONS, "--gated-attention", "enc-self,dec-self,enc-dec"]
    args, gated = build(data, "translation_heads", GATED_ARCHITECTURES[arch], gated_options)
    assert args.encoder_normalize_before and args.share_decoder_input_output_embed
    gated_equals_plain(plain, gated, *random_batch(len(gated.encoder.dictionary)))

    # stats (the computation; its CLI only adds the checks and the figures) and prune (CLI)
    checkpoint = save_cfg_checkpoint(gated, args, tmp_path / "gated.pt")
    statistics = compute_head_statistics(str(data), checkpoint, "valid", StatsOptions(
        metrics=("confidence",), replicates=2, cpu=True, log_format="none", batch_size=100))
    assert len(statistics.rows) == 24 and all(row["confidence"] > 0 for row in statistics.rows)
    scores = tmp_path / "heads.csv"
    scores.write_text(statistics.table.to_csv())
    pruned = tmp_path / "pruned.pt"
    assert cli.main(["prune", "--path", checkpoint, "--out", str(pruned), "--from-importance", str(scores),
                     "--metric", "confidence", "--keep", "10"]) == 0
    [model], _ = checkpoint_utils.load_model_ensemble([str(pruned)], arg_overrides={"data": str(data)})
    assert sum(sum(heads) for heads in model_head_shape(model).values()) == 10


@pytest.mark.parametrize("arch", LM_ARCHS)
def test_gated_language_model_architecture(arch, toy_data_bin, tmp_path):
    (tmp_path / "dict.txt").write_text((toy_data_bin.data_bin / "dict.src.txt").read_text())
    extra = LM_OPTIONS + (ADAPTIVE if "wiki103" in arch else [])
    _, plain = build(tmp_path, "language_modeling", arch, extra)
    _, gated = build(tmp_path, "language_modeling", GATED_LM_ARCHITECTURES[arch], extra)
    tokens = torch.tensor([[2, 11, 25, 7, 40, 9, 13], [2, 30, 8, 8, 12, 19, 5]])
    gated_equals_plain(plain, gated, tokens)

    # Physically removing heads computes what masking them computes (a smaller matrix product:
    # float32 rounding differs, within reordered_tolerance: tests/core/helpers.py).
    mask = {"dec-self": torch.tensor([[1, 0, 1, 1], [0, 0, 1, 0]], dtype=torch.bool)}
    masked = apply_head_mask(copy.deepcopy(gated), mask)
    physically_prune(gated, mask)
    assert model_head_shape(gated) == {"dec-self": [3, 1]}
    with torch.no_grad():
        expected = masked(tokens)[0]
        assert (gated(tokens)[0] - expected).abs().max() <= reordered_tolerance(expected)
