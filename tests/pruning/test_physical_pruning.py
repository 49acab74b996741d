"""Physically pruned model ≡ the same model with the heads masked (log-probs and beam search)."""
import copy
import json

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from fairseq_heads.gating.head_masks import apply_head_mask, head_mask_from_gates
from fairseq_heads.models.gated_transformer import iter_gates
from fairseq_heads.heads import iter_attention
from fairseq_heads.pruning import HeadlessAttention, HeadPruningError, head_layout, physically_prune
from fairseq_heads.pruning.physical import count_parameters, head_layout_json

from core.helpers import TINY_WIDEST_SUM, build_model, random_batch, reordered_tolerance, write_dictionaries

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

ALL_TYPES = "enc-self,dec-self,enc-dec"
PARTIAL_AND_EMPTY = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)  # layer 1: no heads


def full_lprobs(model, src, lengths, prev):
    with torch.no_grad():
        return model.get_normalized_probs(model(src, lengths, prev), log_probs=True)


def incremental_lprobs(model, src, lengths, prev):
    with torch.no_grad():
        encoder_out = model.encoder(src, src_lengths=lengths)
        state, steps = {}, []
        for t in range(prev.size(1)):
            out = model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
            steps.append(model.get_normalized_probs(out, log_probs=True))
        return torch.cat(steps, dim=1)


def beam_search(model, src, lengths, beam=3):
    generator = SequenceGenerator([model], model.decoder.dictionary, beam_size=beam, max_len_b=12)
    with torch.no_grad():
        hypos = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lengths}})
    tokens = [[h["tokens"].tolist() for h in sentence] for sentence in hypos]
    scores = torch.tensor([[h["score"].item() for h in sentence] for sentence in hypos])
    return tokens, scores


def assert_same_function(reference, pruned, vocab):
    src, lengths, prev = random_batch(vocab, bsz=4, src_len=9, tgt_len=8, seed=3)
    expected = full_lprobs(reference, src, lengths, prev)
    tolerance = reordered_tolerance(expected, max(TINY_WIDEST_SUM, vocab))  # float32, fewer heads
    assert (full_lprobs(pruned, src, lengths, prev) - expected).abs().max() <= tolerance
    assert (incremental_lprobs(pruned, src, lengths, prev) - expected).abs().max() <= tolerance
    tokens, scores = beam_search(pruned, src, lengths)
    expected_tokens, expected_scores = beam_search(reference, src, lengths)
    assert tokens == expected_tokens
    assert (scores - expected_scores).abs().max() <= tolerance


@pytest.fixture(scope="module")
def dictionaries(tmp_path_factory):
    return write_dictionaries(tmp_path_factory.mktemp("dicts"))


def fresh(dictionaries, arch="gated_transformer", extra=("--gated-attention", ALL_TYPES), seed=0):
    torch.manual_seed(seed)
    _, model = build_model(dictionaries, arch, list(extra))
    with torch.no_grad():  # fairseq starts out_proj biases at 0: a headless block must output them
        for _, _, attention in iter_attention(model):
            attention.out_proj.bias.normal_(0, 0.5)
    return model.eval()


@pytest.mark.parametrize("attention_type", ["enc-self", "dec-self", "enc-dec"])
def test_pruned_equals_masked_per_type_including_an_empty_layer(dictionaries, attention_type):
    model = fresh(dictionaries)
    mask = {attention_type: PARTIAL_AND_EMPTY}
    masked = apply_head_mask(copy.deepcopy(model), mask)
    pruned = physically_prune(copy.deepcopy(model), mask)
    blocks = {(t, layer): a for t, layer, a in iter_attention(pruned)}
    assert blocks[(attention_type, 0)].num_heads == 3
    assert blocks[(attention_type, 0)].q_proj.weight.shape == (3 * 8, 32)
    assert blocks[(attention_type, 0)].out_proj.weight.shape == (32, 3 * 8)
    assert isinstance(blocks[(attention_type, 1)], HeadlessAttention)
    assert count_parameters(pruned) < count_parameters(model)
    assert_same_function(masked, pruned, len(model.encoder.dictionary))


def test_plain_transformer_all_types_at_once(dictionaries):
    model = fresh(dictionaries, arch="transformer", extra=())
    mask = {"enc-self": torch.tensor([[0, 0, 0, 0], [0, 1, 1, 0]]).bool(),
            "dec-self": torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0]]).bool(),
            "enc-dec": torch.tensor([[0, 0, 0, 0], [1, 1, 0, 1]]).bool()}
    masked = apply_head_mask(copy.deepcopy(model), mask)
    pruned = physically_prune(copy.deepcopy(model), mask)
    assert head_layout(pruned) == {"enc-self": [[], [1, 2]], "dec-self": [[0], []],
                                   "enc-dec": [[], [0, 1, 3]]}
    assert_same_function(masked, pruned, len(model.encoder.dictionary))


def test_fractional_gates_shrink_with_their_heads(dictionaries):
    """Trained gates are not 0/1: kept heads keep their deterministic gate value in the pruned model."""
    model = fresh(dictionaries)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, _, gate in iter_gates(model):  # ~ half closed (< -2.4), the rest fractional or open
            gate.log_alpha.copy_(torch.randn(gate.num_gates, generator=generator) * 3)
    mask = head_mask_from_gates(model)
    assert 0 < sum(int(m.sum()) for m in mask.values()) < 24
    pruned = physically_prune(copy.deepcopy(model), mask)
    for (_, _, gate), (_, _, kept_gate) in zip(iter_gates(model), iter_gates(pruned)):
        assert torch.equal(kept_gate.log_alpha, gate.log_alpha[gate.is_open()])
    assert_same_function(model, pruned, len(model.encoder.dictionary))


def test_layout_rebuilds_the_pruned_shapes_and_loads_the_state_dict_strictly(dictionaries):
    model = fresh(dictionaries)
    mask = {"enc-dec": PARTIAL_AND_EMPTY, "enc-self": torch.tensor([[0, 1, 0, 0], [1, 1, 1, 1]]).bool()}
    pruned = physically_prune(model, mask)
    layout = head_layout_json(pruned)
    assert json.loads(layout)["enc-dec"] == [[0, 2, 3], []]
    rebuilt = fresh(dictionaries, extra=("--gated-attention", ALL_TYPES, "--head-layout", layout), seed=5)
    rebuilt.load_state_dict(pruned.state_dict(), strict=True)
    assert head_layout(rebuilt) == head_layout(pruned)
    assert_same_function(pruned, rebuilt, len(model.encoder.dictionary))


def test_pruning_a_pruned_model_composes_layouts(dictionaries):
    model = fresh(dictionaries)
    once = physically_prune(copy.deepcopy(model), {"enc-self": torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]]).bool()})
    twice = physically_prune(once, {"enc-self": [torch.tensor([0, 1, 1]).bool(), torch.tensor([1, 0, 0, 0]).bool()]})
    assert head_layout(twice)["enc-self"] == [[2, 3], [0]]
    direct = apply_head_mask(copy.deepcopy(model), {"enc-self": torch.tensor([[0, 0, 1, 1], [1, 0, 0, 0]]).bool()})
    assert_same_function(direct, twice, len(model.encoder.dictionary))


def test_mask_of_the_wrong_shape_is_an_error(dictionaries):
    model = fresh(dictionaries)
    with pytest.raises(HeadPruningError, match="enc-self layer 0: mask has 3 heads"):
        physically_prune(model, {"enc-self": torch.ones(2, 3, dtype=torch.bool)})
    with pytest.raises(HeadPruningError, match="mask has 1 layers"):
        physically_prune(model, {"dec-self": torch.ones(1, 4, dtype=torch.bool)})


def test_a_mask_that_overrides_trained_gates_is_what_the_saved_pruned_model_computes(dictionaries):
    """apply_head_mask pins kept heads fully open; the pruned checkpoint must keep them so."""
    model = fresh(dictionaries)
    with torch.no_grad():
        for _, _, gate in iter_gates(model):
            gate.log_alpha.fill_(0.0)  # deterministic gate 0.5: not what the mask says
    mask = {"enc-dec": PARTIAL_AND_EMPTY}
    masked = apply_head_mask(copy.deepcopy(model), mask)
    pruned = physically_prune(copy.deepcopy(masked), mask)
    rebuilt = fresh(dictionaries, extra=("--gated-attention", ALL_TYPES,
                                         "--head-layout", head_layout_json(pruned)), seed=5)
    rebuilt.load_state_dict(pruned.state_dict(), strict=True)  # fixed masks are not saved
    assert_same_function(masked, rebuilt, len(model.encoder.dictionary))
