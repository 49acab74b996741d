"""torch.jit.script of gated and pruned models, as fairseq scripts a plain transformer: our
counterparts of the JIT tests in fairseq's tests/test_sequence_generator.py, with every attention
block gated, plus scripted == eager."""
import copy

import pytest
import torch
from fairseq.sequence_generator import EnsembleModel, SequenceGenerator

from fairseq_heads.gating.head_masks import apply_head_mask
from fairseq_heads.pruning.physical import physically_prune

from fairseq_heads.gating.gated_attention import GatedMultiheadAttention

from fairseq_heads.heads import iter_attention

from .helpers import build_model, random_batch, write_dictionaries
from .rounding import max_difference, model_rounding_tolerance, one_thread  # noqa: F401

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

ALL_TYPES = "enc-self,dec-self,enc-dec"


@pytest.fixture(scope="module")
def task_and_gated(tmp_path_factory):
    data = write_dictionaries(tmp_path_factory.mktemp("dicts"))
    torch.manual_seed(0)
    task, gated = build_model(data, "gated_transformer", ["--gated-attention", ALL_TYPES])
    with torch.no_grad():  # some gates part-open, so that scripting must keep their values
        for attention in (gated.encoder.layers[0].self_attn, gated.decoder.layers[1].encoder_attn):
            attention.gate.log_alpha.copy_(torch.tensor([3.0, -1.0, 0.0, -5.0]))
    return task, gated.eval()


def sample(vocab):
    src, lengths, _ = random_batch(vocab)
    return {"net_input": {"src_tokens": src, "src_lengths": lengths}}


def assert_scripted_model_equals_eager(model):
    scripted = torch.jit.script(model)
    src, lengths, prev = random_batch(len(model.encoder.dictionary))
    with torch.no_grad():
        eager_logits, _ = model(src, lengths, prev)
        scripted_logits, _ = scripted(src, lengths, prev)
    if all(isinstance(a, GatedMultiheadAttention) for *_, a in iter_attention(model)):
        # scripting changes no gated block's path: the same ops in the same order, exact
        assert torch.equal(scripted_logits, eager_logits)
    else:  # scripted plain blocks take fairseq's Python path, eager ones torch's fused kernel
        assert max_difference(scripted_logits, eager_logits) <= \
            model_rounding_tolerance(torch.float32, eager_logits.log_softmax(-1))
    return scripted


def test_export_gated_transformer(task_and_gated):
    _, gated = task_and_gated
    assert_scripted_model_equals_eager(gated)


def test_export_ensemble_model(task_and_gated):
    _, gated = task_and_gated
    torch.jit.script(EnsembleModel([gated]))


def test_scripted_sequence_generator_saves_loads_and_equals_eager(task_and_gated, tmp_path):
    task, gated = task_and_gated
    generator = SequenceGenerator([gated], task.target_dictionary, beam_size=2,
                                  no_repeat_ngram_size=2, max_len_b=10)
    scripted = torch.jit.script(generator)
    path = str(tmp_path / "generator.pt")
    scripted.save(path)
    loaded = torch.jit.load(path)
    batch = sample(len(task.source_dictionary))
    with torch.no_grad():
        eager = generator.forward(batch)
        generated = loaded(batch)
    for eager_hypos, scripted_hypos in zip(eager, generated):
        for e, s in zip(eager_hypos, scripted_hypos):
            assert torch.equal(e["tokens"], s["tokens"])
            assert torch.equal(e["positional_scores"], s["positional_scores"])


def test_export_pruned_gated_transformer_with_an_empty_layer(task_and_gated):
    _, gated = task_and_gated
    pruned = copy.deepcopy(gated)
    physically_prune(pruned, {"enc-self": torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]]),
                              "enc-dec": torch.tensor([[1, 1, 0, 0], [0, 1, 1, 1]])})
    assert pruned.encoder.layers[0].self_attn.gate.num_gates == 3
    assert_scripted_model_equals_eager(pruned)


def test_export_head_masked_plain_transformer(task_and_gated, tmp_path):
    task, _ = task_and_gated
    _, plain = build_model(write_dictionaries(tmp_path), "transformer")
    apply_head_mask(plain.eval(), {"dec-self": torch.tensor([[1, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)})
    assert_scripted_model_equals_eager(plain)
