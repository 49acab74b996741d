"""`gated_llama` in-process: KV cache ≡ full sequence, fused ≡ explicit attention, GQA ≡ MHA with
each KV head repeated, gates (closed ≡ no head, open ≡ ungated), and the pure pieces (RoPE's
relative positions, RMSNorm)."""
import copy

import pytest
import torch

from core.rounding import sum_tolerance
from fairseq_heads.gating.head_masks import apply_head_mask, head_mask_from_gates
from fairseq_heads.gating.gated_attention import iter_gates
from fairseq_heads.models.llama_attention import LlamaAttention, query_groups, uniform_group_size
from fairseq_heads.models.llama_layers import apply_rotary, rms_norm, rotary_cos_sin
from llama.helpers import LPROBS_TOLERANCE as TOLERANCE  # the paths compared differ in summation order only
from llama.helpers import build_llama, full_lprobs, incremental_lprobs, random_tokens

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels


def test_kv_cache_equals_full_sequence_gqa_and_mha(dict_dir):
    for kv_heads in ("2", "4", "1"):
        task, model = build_llama(dict_dir, ["--decoder-kv-heads", kv_heads])
        x = random_tokens(len(task.dictionary))
        assert (incremental_lprobs(model, x) - full_lprobs(model, x)).abs().max() <= TOLERANCE


def test_fused_attention_equals_explicit_path(dict_dir):
    task, model = build_llama(dict_dir, ["--qkv-bias"])
    x = random_tokens(len(task.dictionary), length=9)
    x[0, -3:] = task.dictionary.pad()  # right padding, as the LM task pads: a key padding mask
    fused = full_lprobs(model, x)
    for block in model.decoder.layers:
        block.self_attn.use_sdpa = False
    assert (full_lprobs(model, x) - fused).abs().max() <= TOLERANCE


def test_gqa_equals_mha_with_repeated_kv_heads(dict_dir):
    task, gqa = build_llama(dict_dir, ["--decoder-kv-heads", "2", "--qkv-bias"])
    _, mha = build_llama(dict_dir, ["--decoder-kv-heads", "4", "--qkv-bias"])
    state = gqa.state_dict()
    for name, value in list(state.items()):
        if ".k_proj." in name or ".v_proj." in name:  # KV head g serves query heads 2g, 2g+1
            heads = value.view(2, -1, *value.shape[1:])
            state[name] = heads.repeat_interleave(2, dim=0).reshape(-1, *value.shape[1:])
    mha.load_state_dict(state)
    x = random_tokens(len(task.dictionary))
    assert (full_lprobs(mha.eval(), x) - full_lprobs(gqa, x)).abs().max() <= TOLERANCE


def test_a_closed_gate_removes_its_head_and_open_gates_change_nothing(dict_dir):
    task, model = build_llama(dict_dir)
    x = random_tokens(len(task.dictionary))
    before = full_lprobs(model, x)
    assert [g.num_gates for _, _, g in iter_gates(model)] == [4, 4]
    assert bool(head_mask_from_gates(model)["dec-self"].all())  # gates start open
    ungated = copy.deepcopy(model)
    for block in ungated.decoder.layers:
        block.self_attn.gate.fix(torch.ones(4))
    assert torch.equal(full_lprobs(ungated, x), before)

    mask = {"dec-self": torch.tensor([[1, 0, 1, 1], [0, 0, 1, 0]], dtype=torch.bool)}
    apply_head_mask(model, mask)
    zeroed = copy.deepcopy(ungated)
    with torch.no_grad():  # the same heads removed by hand: their o-proj columns zero
        for layer, block in enumerate(zeroed.decoder.layers):
            for head in (~mask["dec-self"][layer]).nonzero().flatten().tolist():
                block.self_attn.out_proj.weight[:, head * 16:(head + 1) * 16] = 0
    assert (full_lprobs(model, x) - full_lprobs(zeroed, x)).abs().max() <= TOLERANCE
    assert (full_lprobs(model, x) - before).abs().max() > 1e-3


def test_rope_scores_depend_only_on_the_distance():
    """RoFormer's property: <R(m) q, R(n) k> = <q, R(n - m) k> (Su et al. 2021, eq. 16)."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)
    cos, sin = rotary_cos_sin(torch.arange(40), 8, 100.0, torch.float32)
    rotated_q, rotated_k = apply_rotary(q.expand(40, 8), cos, sin), apply_rotary(k.expand(40, 8), cos, sin)
    score = lambda m, n: float(rotated_q[m] @ rotated_k[n])  # noqa: E731
    # the angles are float32 (as HF's): angle m carries up to m eps, its cos / sin a few eps more,
    # so each rotated vector is off by <= |v| (37 + 2) eps at m <= 37; then an 8-term dot product
    # bounded by |q| |k| (the rotation keeps norms)
    bound = sum_tolerance(torch.float32, 2 * (37 + 2) + 8, float(q.norm() * k.norm()))
    assert abs(score(3, 10) - score(30, 37)) <= bound
    assert abs(score(3, 10) - score(3, 11)) > 1e-3
    assert torch.allclose(apply_rotary(q.expand(1, 8), cos[:1], sin[:1]), q.expand(1, 8))  # position 0


def test_rms_norm_and_query_groups():
    x = torch.tensor([[3.0, 4.0]])
    assert torch.allclose(rms_norm(x, torch.tensor([1.0, 2.0]), 0.0),
                          torch.tensor([[3.0, 8.0]]) / (12.5 ** 0.5))
    assert query_groups(6, 2) == [0, 0, 0, 1, 1, 1]
    assert uniform_group_size([0, 0, 1, 1], 2) == 2 and uniform_group_size([0, 1, 1], 2) == 0


def test_is_a_gated_block_everywhere(dict_dir):
    _, model = build_llama(dict_dir)
    assert all(isinstance(b.self_attn, LlamaAttention) for b in model.decoder.layers)
    assert [t for t, _, _ in iter_gates(model)] == ["dec-self", "dec-self"]


def test_beam_search_with_fairseqs_generator_reorders_the_kv_cache(dict_dir):
    """fairseq's SequenceGenerator (beam 3: the cache is reordered between steps) scores each
    hypothesis as a fresh full-sequence forward does."""
    from argparse import Namespace

    task, model = build_llama(dict_dir, ["--decoder-kv-heads", "2"])
    generator = task.build_generator([model], Namespace(beam=3, max_len_b=12, min_len=1))
    prompt = random_tokens(len(task.dictionary), batch=2, length=5, seed=3)
    sample = {"net_input": {"src_tokens": prompt, "src_lengths": torch.full((2,), 5)}}
    with torch.no_grad():
        hypotheses = task.inference_step(generator, [model], sample)
    lengths = []
    for sentence in hypotheses:
        for hypothesis in sentence:
            tokens = hypothesis["tokens"]  # the 4 prompt tokens, then generated ones
            source = torch.cat([torch.tensor([task.dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
            fresh = full_lprobs(model, source)[0].gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            assert (fresh - hypothesis["positional_scores"]).abs().max() <= TOLERANCE
            lengths.append(len(tokens))
    assert max(lengths) >= 4 + 6  # several steps of beam search, not only an immediate </s>
