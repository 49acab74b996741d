"""Gated attention against plain fairseq: equivalence when open, silence when closed."""
import contextlib
import copy

import pytest
import torch

from fairseq_heads.stats.capture import python_attention_path
from fairseq_heads.gating.head_masks import apply_head_mask
from fairseq_heads.models.gated_transformer import expected_l0, iter_gates, open_heads_per_type
from fairseq_heads.gating.gated_attention import (
    MIN_SDPA_QUERIES_ON_CPU,
    GatedMultiheadAttention,
    iter_attention,
)

from .helpers import build_model, random_batch, write_dictionaries
from .rounding import max_difference, model_rounding_tolerance, one_thread  # noqa: F401

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

ALL_TYPES = "enc-self,dec-self,enc-dec"


@pytest.fixture(scope="module")
def plain_and_gated(tmp_path_factory):
    data = write_dictionaries(tmp_path_factory.mktemp("dicts"))
    torch.manual_seed(0)
    _, plain = build_model(data, "transformer")
    _, gated = build_model(data, "gated_transformer", ["--gated-attention", ALL_TYPES])
    # A plain checkpoint's state dict has no gates: loading it goes through upgrade_state_dict.
    gated.load_state_dict(plain.state_dict(), strict=True)
    return plain.eval(), gated.eval()


def full_lprobs(model, src, lengths, prev):
    with torch.no_grad():
        logits, _ = model(src, lengths, prev)
        # fairseq's get_normalized_probs computes in float32; keep the model's dtype
        return logits.log_softmax(-1)


def incremental_lprobs(model, src, lengths, prev):
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=lengths)
        state = {}
        steps = []
        for t in range(prev.size(1)):
            logits, _ = model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
            steps.append(logits.log_softmax(-1))
        return torch.cat(steps, dim=1)


@contextlib.contextmanager
def explicit_attention(model):
    """Gated blocks compute attention as fairseq's Python path does (no SDPA)."""
    blocks = [a for *_, a in iter_attention(model) if isinstance(a, GatedMultiheadAttention)]
    for attention in blocks:
        attention.use_sdpa = False
    try:
        yield
    finally:
        for attention in blocks:
            attention.use_sdpa = True


def test_every_attention_block_is_gated_and_open(plain_and_gated):
    _, gated = plain_and_gated
    blocks = list(iter_attention(gated))
    assert len(blocks) == 2 + 2 + 2 and all(isinstance(a, GatedMultiheadAttention) for *_, a in blocks)
    assert open_heads_per_type(gated) == {"enc-self": (8, 8), "dec-self": (8, 8), "enc-dec": (8, 8)}


@contextlib.contextmanager
def sdpa_for_single_queries(model):
    """Incremental decoding's one-query steps through SDPA too (on CPU they take the bmm
    arithmetic by default, which is faster there)."""
    blocks = [a for *_, a in iter_attention(model) if isinstance(a, GatedMultiheadAttention)]
    for attention in blocks:
        attention.min_sdpa_queries_on_cpu = 0
    try:
        yield
    finally:
        for attention in blocks:
            attention.min_sdpa_queries_on_cpu = MIN_SDPA_QUERIES_ON_CPU


def test_open_gates_equal_plain_transformer_full_and_incremental(plain_and_gated):
    """Same arithmetic, exact: gated blocks forced to the explicit path against fairseq's
    Python path, full and incremental; and by default, incremental against incremental (both
    fairseq's arithmetic for one-query steps on CPU).

    Different kernels: gated (SDPA, is_causal in the decoder; enc-dec explicit, as fairseq asks
    it for weights) against plain (torch's fused attention; fairseq's Python path for enc-dec,
    which passes static_kv), full and incremental-through-SDPA, within the model rounding bound
    (tests/core/rounding.py): 1.5e-2 in float32 (measured <= 1.5e-6) and 2.8e-11 in float64
    (measured <= 2e-15), where any semantic difference (a gate, a mask, a cache step) would still
    show at >= 1e-4. Plain fairseq's own incremental path is not compared with its full pass in
    float64: its softmax is float32 whatever the dtype."""
    plain, gated = plain_and_gated
    src, lengths, prev = random_batch(len(plain.encoder.dictionary))
    with python_attention_path(plain), explicit_attention(gated):
        reference = full_lprobs(plain, src, lengths, prev)
        assert torch.equal(full_lprobs(gated, src, lengths, prev), reference)
        assert torch.equal(incremental_lprobs(gated, src, lengths, prev),
                           incremental_lprobs(plain, src, lengths, prev))
    assert torch.equal(incremental_lprobs(gated, src, lengths, prev),
                       incremental_lprobs(plain, src, lengths, prev))
    for dtype in (torch.float32, torch.float64):
        plain_d, gated_d = copy.deepcopy(plain).to(dtype), copy.deepcopy(gated).to(dtype)
        reference = full_lprobs(plain_d, src, lengths, prev)
        tolerance = model_rounding_tolerance(dtype, reference)
        with sdpa_for_single_queries(gated_d):
            incremental = incremental_lprobs(gated_d, src, lengths, prev)
        runs = [("full", full_lprobs(gated_d, src, lengths, prev)), ("incremental", incremental)]
        if dtype == torch.float32:
            runs.append(("plain incremental", incremental_lprobs(plain_d, src, lengths, prev)))
        for name, lprobs in runs:
            difference = max_difference(lprobs, reference)
            assert difference <= tolerance, f"{dtype} {name}: {difference:.3g} > {tolerance:.3g}"


def test_closed_head_contributes_exactly_nothing(tmp_path):
    data = write_dictionaries(tmp_path)
    torch.manual_seed(1)
    _, model = build_model(data, "gated_transformer", ["--gated-attention", ALL_TYPES])
    model.eval()
    src, lengths, prev = random_batch(len(model.encoder.dictionary))
    attention = model.encoder.layers[1].self_attn
    attention.gate.fix(torch.tensor([1.0, 0.0, 1.0, 1.0]))
    before = full_lprobs(model, src, lengths, prev)
    with torch.no_grad():  # scramble everything that belongs to head 1 only
        rows = slice(attention.head_dim, 2 * attention.head_dim)
        for proj in (attention.q_proj, attention.k_proj, attention.v_proj):
            proj.weight[rows] = torch.randn_like(proj.weight[rows]) * 10
            proj.bias[rows] = torch.randn_like(proj.bias[rows]) * 10
        attention.out_proj.weight[:, rows] = torch.randn_like(attention.out_proj.weight[:, rows])
    assert torch.equal(full_lprobs(model, src, lengths, prev), before)


def test_layer_with_all_heads_closed_runs_and_outputs_only_the_bias(tmp_path):
    data = write_dictionaries(tmp_path)
    _, model = build_model(data, "gated_transformer", ["--gated-attention", ALL_TYPES])
    model.eval()
    src, lengths, prev = random_batch(len(model.encoder.dictionary))
    for attention in (model.encoder.layers[0].self_attn, model.decoder.layers[1].encoder_attn):
        attention.gate.fix(torch.zeros(4))
    seen = {}

    def keep_output(module, inputs, output):
        seen["out"] = output[0]

    handle = model.decoder.layers[1].encoder_attn.register_forward_hook(keep_output)
    lprobs = full_lprobs(model, src, lengths, prev)
    handle.remove()
    assert torch.isfinite(lprobs).all()
    bias = model.decoder.layers[1].encoder_attn.out_proj.bias
    assert torch.allclose(seen["out"], bias.expand_as(seen["out"]), atol=0)
    assert torch.isfinite(incremental_lprobs(model, src, lengths, prev)).all()


def test_head_mask_on_a_plain_model_equals_gated_model_with_same_mask(plain_and_gated, tmp_path):
    plain, gated = plain_and_gated
    data = write_dictionaries(tmp_path)
    _, masked_plain = build_model(data, "transformer")
    masked_plain.load_state_dict(plain.state_dict())
    mask = {"enc-self": torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]], dtype=torch.bool),
            "enc-dec": torch.tensor([[1, 1, 1, 0], [1, 0, 0, 1]], dtype=torch.bool)}
    apply_head_mask(masked_plain.eval(), mask)
    src, lengths, prev = random_batch(len(plain.encoder.dictionary))
    masked = full_lprobs(masked_plain, src, lengths, prev)
    assert not torch.allclose(masked, full_lprobs(plain, src, lengths, prev))
    for attention_type, layer, gate in iter_gates(gated):
        if attention_type in mask:
            gate.fix(mask[attention_type][layer].float())
    try:
        # dec-self is plain (torch's fused kernel) in one model, gated (SDPA, is_causal) in the other
        assert max_difference(full_lprobs(gated, src, lengths, prev), masked) <= \
            model_rounding_tolerance(torch.float32, masked)
    finally:
        for _, _, gate in iter_gates(gated):
            gate.unfix()


def test_expected_l0_counts_gated_heads_only(tmp_path):
    data = write_dictionaries(tmp_path)
    _, model = build_model(data, "gated_transformer", ["--gated-attention", "enc-dec"])
    assert [t for t, _, _ in iter_gates(model)] == ["enc-dec", "enc-dec"]
    assert 7.0 < expected_l0(model).item() < 8.0  # 8 heads, each P(open) ~ 0.98 at init


def test_train_gates_only_and_freeze_decoder(tmp_path):
    data = write_dictionaries(tmp_path)
    _, model = build_model(data, "gated_transformer",
                           ["--gated-attention", ALL_TYPES, "--train-gates-only"])
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.endswith("gate.log_alpha") for n in trainable)
    _, model = build_model(data, "gated_transformer", ["--gated-attention", ALL_TYPES, "--freeze-decoder"])
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert any(n.startswith("encoder.layers.0.fc1") for n in trainable)
    assert not any(n.startswith("decoder.") and not n.endswith("gate.log_alpha") for n in trainable)
    assert "decoder.layers.0.encoder_attn.gate.log_alpha" in trainable


def test_a_frozen_decoder_projects_onto_the_vocabulary_with_one_mm_not_a_weight_copy_per_sentence(tmp_path):
    """--freeze-decoder freezes the shared embedding, the output projection's weight; torch's
    matmul then folds fairseq's transposed decoder output into one mm only if it is contiguous,
    and otherwise broadcasts the vocabulary-sized weight into a bmm (a copy per sentence)."""
    from torch.profiler import ProfilerActivity, profile
    vocab = 40 + 4  # write_dictionaries' words and fairseq's specials
    data = write_dictionaries(tmp_path)
    _, model = build_model(data, "gated_transformer", ["--gated-attention", "enc-self", "--freeze-decoder",
                                                       "--share-all-embeddings"])
    assert not model.decoder.output_projection.weight.requires_grad
    src, lengths, prev = random_batch(vocab)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as trace:
        logits, _ = model(src, lengths, prev)
        logits.float().sum().backward()
    vocabulary_bmm = [event.input_shapes for event in trace.events() if event.name == "aten::bmm"
                      and any(vocab in shape for shape in event.input_shapes if shape)]
    assert vocabulary_bmm == []
    features = model.decoder.extract_features(prev, encoder_out=model.encoder(src, lengths))[0]
    torch.testing.assert_close(model.decoder.output_layer(features), features @ model.decoder.output_projection.weight.t())


def test_unknown_attention_type_is_an_error_naming_the_option(tmp_path):
    data = write_dictionaries(tmp_path)
    with pytest.raises(ValueError, match="--gated-attention.*enc-cross"):
        build_model(data, "gated_transformer", ["--gated-attention", "enc-self,enc-cross"])
