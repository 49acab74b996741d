"""capture_heads: per-head weights and (gated) head outputs, and nothing changed afterwards."""
import conllu
import pytest
import torch

from fairseq_heads.stats.capture import capture_heads
from fairseq_heads.stats.syntax.conllu_index import ConlluIndex
from fairseq_heads.heads import iter_attention
from fairseq_heads.stats.syntax.alignment import fill_unknown_pieces
from tests.core.helpers import build_model, random_batch, reordered_tolerance, write_dictionaries

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels


@pytest.fixture(scope="module")
def dicts(tmp_path_factory):
    return write_dictionaries(tmp_path_factory.mktemp("dicts"))


def test_capture_returns_what_callers_asked_for_and_restores_everything(dicts):
    torch.manual_seed(0)
    _, model = build_model(dicts, "transformer")
    model.eval()
    src, lengths, prev = random_batch(40)
    with torch.no_grad():
        plain_logits, plain_extra = model(src, lengths, prev)
        with capture_heads(model) as captured:
            logits, extra = model(src, lengths, prev)
        after_logits, _ = model(src, lengths, prev)
    # capturing may run another attention kernel (the explicit path, for the weights)
    torch.testing.assert_close(logits, plain_logits, rtol=0, atol=reordered_tolerance(plain_logits))
    torch.testing.assert_close(after_logits, plain_logits)
    # The decoder asked its last enc-dec block for head-averaged weights: it still gets them.
    last = captured.weights[("enc-dec", 1)]
    torch.testing.assert_close(extra["attn"][0], last.mean(dim=1))
    assert captured.weights[("enc-self", 0)].shape == (3, 4, 7, 7)
    assert captured.weights[("dec-self", 1)].shape == (3, 4, 6, 6)
    assert captured.head_outputs[("enc-dec", 0)].shape == (6, 3, 32)
    assert torch.allclose(captured.weights[("enc-self", 0)].sum(-1), torch.ones(3, 4, 7))
    assert captured.weights[("enc-self", 0)][0, :, :, :2].abs().max() == 0  # left padding
    for _, _, attention in iter_attention(model):
        assert "forward" not in attention.__dict__ and not attention.skip_embed_dim_check
        assert not attention.out_proj._forward_pre_hooks


def test_head_outputs_are_captured_after_the_gate(dicts):
    _, model = build_model(dicts, "gated_transformer", ["--gated-attention", "enc-self"])
    model.eval()
    attention = next(a for t, _, a in iter_attention(model) if t == "enc-self")
    attention.gate.fix(torch.tensor([1.0, 0.0, 1.0, 1.0]))
    src, lengths, prev = random_batch(40)
    with torch.no_grad(), capture_heads(model, weights=False) as captured:
        model(src, lengths, prev)
    per_head = captured.per_head_output(("enc-self", 0))
    assert per_head[:, :, 1].abs().max() == 0 and per_head[:, :, 0].abs().max() > 0
    assert not attention.out_proj._forward_pre_hooks  # capture removed its hook; the gate has none


SENTENCE = """# sent_id = s1
# text = The dog sleeps.
1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_
2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_
3\tsleeps\tsleep\tVERB\t_\t_\t0\troot\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

"""


def test_unknown_pieces_take_the_characters_left_uncovered():
    tokenlist = conllu.parse(SENTENCE)[0]
    assert fill_unknown_pieces(["▁The", "<unk>", "▁sleep", "s", "."], tokenlist, "<unk>") == \
        ["▁The", "dog", "▁sleep", "s", "."]
    assert fill_unknown_pieces(["▁The", "<unk>", "<unk>", "."], tokenlist, "<unk>") == \
        ["▁The", "dogsleeps", "", "."]
    with pytest.raises(ValueError, match="sent_id=s1"):
        fill_unknown_pieces(["▁A", "<unk>", "."], tokenlist, "<unk>")


def test_conllu_index_reads_sentences_on_demand(tmp_path):
    path = tmp_path / "two.conllu"
    path.write_text(SENTENCE + SENTENCE.replace("s1", "s2"), encoding="utf-8")
    with ConlluIndex(str(path)) as index:
        assert len(index) == 2
        assert index[1].metadata["sent_id"] == "s2" and index[0].metadata["sent_id"] == "s1"
        assert [t["form"] for t in index[0]] == ["The", "dog", "sleeps", "."]
