"""`import-hf` against Hugging Face: tiny random LLaMA and Qwen2 models (GQA with 2 query heads
per KV head, and plain multi-head attention; and Mistral without a sliding window), converted, give HF's log-probabilities over HF's
vocabulary, full sequence and incremental (KV cache), and the same greedy continuations."""
import pytest
import torch

from core.rounding import sum_tolerance
from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.hf.import_hf import import_hf
from llama.helpers import full_lprobs, greedy, incremental_lprobs
from llama.hf_models import VOCAB, hf_model, parity_tolerance, save_hf_model

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

pytest.importorskip("transformers")

# fp32 throughout: within parity_tolerance (llama/hf_models.py) of each other.
CASES = [("llama", 2, False), ("llama", 4, True), ("qwen2", 2, True), ("qwen2", 4, False),
         ("mistral", 2, False)]


def hf_ids(seed=0, batch=2, length=10):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (batch, length), generator=g)


def hf_full_lprobs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(ids).logits.float(), dim=-1)


def hf_incremental(model, ids, new_tokens=0):
    """HF log-probs fed one token at a time with its cache; then `new_tokens` greedy ones."""
    past, steps = None, []
    with torch.no_grad():
        for t in range(ids.size(1) + new_tokens - 1):
            out = model(ids[:, t:t + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(torch.log_softmax(out.logits.float(), dim=-1))
            if t + 1 >= ids.size(1):
                ids = torch.cat([ids, steps[-1][:, -1].argmax(-1, keepdim=True)], dim=1)
    return torch.cat(steps, dim=1), ids


@pytest.fixture(scope="module", params=CASES, ids=[f"{k}-kv{kv}-{'tied' if t else 'untied'}" for k, kv, t in CASES])
def converted(request, tmp_path_factory):
    kind, kv_heads, tied = request.param
    hf = hf_model(kind, kv_heads, tied)
    work = tmp_path_factory.mktemp(f"{kind}{kv_heads}")
    result = import_hf(save_hf_model(hf, kind, work / "hf"), str(work / "out"))
    model, task = load_model_and_task(str(work / "out" / "checkpoint.pt"),
                                      {"data": str(work / "out")})
    index = torch.tensor(result.vocab.hf_to_fairseq)
    return hf, model.eval(), task, index, result


def test_full_sequence_log_probs_equal_hf(converted):
    hf, model, task, index, _ = converted
    ids = hf_ids()
    ours = full_lprobs(model, index[ids])
    theirs = hf_full_lprobs(hf, ids)
    # HF's vocabulary, in HF's order: the same distribution, nothing left for other symbols
    assert (ours[..., index] - theirs).abs().max() <= parity_tolerance(theirs)
    total = ours[..., index].exp().sum(-1)  # VOCAB probabilities summed in float32
    assert (total - 1).abs().max() <= sum_tolerance(torch.float32, VOCAB, 1.0)


def test_incremental_log_probs_and_greedy_continuations_equal_hf(converted):
    hf, model, _, index, _ = converted
    ids = hf_ids(seed=1)
    theirs, hf_continuation = hf_incremental(hf, ids, new_tokens=8)
    ours_steps = incremental_lprobs(model, index[ids])
    tolerance = parity_tolerance(theirs)
    assert (ours_steps[..., index] - theirs[:, :ids.size(1)]).abs().max() <= tolerance
    assert hf_continuation.size(1) == ids.size(1) + 8
    ours_continuation, margin = greedy(model, index[ids], steps=8)
    assert torch.equal(ours_continuation, index[hf_continuation])
    assert margin > 2 * tolerance  # no near-tie that rounding could flip on another machine


def test_gqa_and_gates(converted):
    hf, model, _, _, result = converted
    attention = model.decoder.layers[0].self_attn
    assert (attention.num_heads, attention.num_kv_heads) == (4, hf.config.num_key_value_heads)
    assert bool((attention.gate() == 1).all())  # open gates: the imported function unchanged


def test_every_hf_string_has_a_dictionary_entry(converted):
    hf, _, task, index, result = converted
    from llama.hf_models import tokenizer_strings

    kind = hf.config.model_type
    strings = tokenizer_strings(kind)
    dictionary = task.dictionary
    eos = hf.config.eos_token_id
    for hf_id, word in enumerate(strings):
        if hf_id == eos:  # fairseq's </s> is HF's end of sequence
            assert int(index[hf_id]) == dictionary.eos()
        if word in ("\n", "a "):  # dict.txt cannot hold them: a placeholder entry
            assert dictionary[int(index[hf_id])] == f"<hf_id_{hf_id}>"
        elif hf_id != eos or word == "</s>":
            assert dictionary.index(word) == int(index[hf_id]), word
    assert len(set(index.tolist())) == VOCAB  # one symbol per HF id
    assert len(dictionary) == VOCAB + 4 - (0 if kind == "qwen2" else 3)
