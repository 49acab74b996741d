"""GQA-aware physical pruning of `gated_llama`: masked ≡ pruned (log-probs and greedy
continuations) for both prune units, q/o slices and KV heads removed with their whole group,
the cost prediction against the pruned model, and gates per KV group (--prune-unit kv-group)."""
import copy

import pytest
import torch

from fairseq_heads.gating.group_gate import GroupGate
from fairseq_heads.gating.head_masks import apply_head_mask, head_mask_from_gates
from fairseq_heads.models.head_layout import apply_head_layout, head_layout_json
from fairseq_heads.pruning.gqa import (
    attention_cost,
    group_mean_scores,
    keep_top_k_groups,
    kv_groups,
    whole_group_mask,
)
from fairseq_heads.pruning.physical import fix_gates, physically_prune
from llama.helpers import LPROBS_TOLERANCE as TOLERANCE  # the same arithmetic on fewer heads
from llama.helpers import build_llama, full_lprobs, greedy, incremental_lprobs, random_tokens

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

# 4 query heads, KV groups {0, 1} and {2, 3}: layer 0 keeps one head of group 0 (group 1 goes
# whole), layer 1 keeps one head of each group (both KV heads stay)
QUERY_MASK = {"dec-self": torch.tensor([[0, 1, 0, 0], [0, 1, 1, 0]], dtype=torch.bool)}


def masked_and_pruned(model, mask):
    masked = apply_head_mask(copy.deepcopy(model), mask)
    pruned = physically_prune(fix_gates(copy.deepcopy(model), mask), mask)
    return masked.eval(), pruned.eval()


def assert_same_function(masked, pruned, vocab):
    x = random_tokens(vocab, length=10)
    assert (full_lprobs(pruned, x) - full_lprobs(masked, x)).abs().max() <= TOLERANCE
    assert (incremental_lprobs(pruned, x) - full_lprobs(masked, x)).abs().max() <= TOLERANCE
    (ours, margin), (theirs, _) = greedy(pruned, x[:, :4]), greedy(masked, x[:, :4])
    assert torch.equal(ours, theirs) and margin > 2 * TOLERANCE


def test_query_unit_masked_equals_pruned_and_kv_heads_go_with_their_group(dict_dir):
    task, model = build_llama(dict_dir, ["--qkv-bias"])
    masked, pruned = masked_and_pruned(model, QUERY_MASK)
    assert_same_function(masked, pruned, len(task.dictionary))
    first, second = (layer.self_attn for layer in pruned.decoder.layers)
    assert (first.num_heads, first.num_kv_heads, first.kv_head_of) == (1, 1, [0])
    assert (second.num_heads, second.num_kv_heads, second.kv_head_of) == (2, 2, [0, 1])
    assert first.q_proj.weight.shape == (16, 64) and first.k_proj.weight.shape == (16, 64)
    assert first.out_proj.weight.shape == (64, 16) and first.v_proj.bias.shape == (16,)
    # the kept rows are the original head 1's q rows and KV head 0's k rows
    original = model.decoder.layers[0].self_attn
    assert torch.equal(first.q_proj.weight, original.q_proj.weight[16:32])
    assert torch.equal(first.k_proj.weight, original.k_proj.weight[:16])


def test_kv_group_unit_masked_equals_pruned(dict_dir):
    task, model = build_llama(dict_dir)
    mask = whole_group_mask(QUERY_MASK, kv_groups(model))
    assert [m.int().tolist() for m in mask["dec-self"]] == [[1, 1, 0, 0], [1, 1, 1, 1]]
    masked, pruned = masked_and_pruned(model, mask)
    assert_same_function(masked, pruned, len(task.dictionary))
    assert [b.self_attn.num_kv_heads for b in pruned.decoder.layers] == [1, 2]


def test_a_pruned_layout_is_rebuilt_from_its_option(dict_dir):
    """What fairseq's CLIs do with a pruned checkpoint: build from --head-layout, load."""
    task, model = build_llama(dict_dir)
    _, pruned = masked_and_pruned(model, QUERY_MASK)
    _, rebuilt = build_llama(dict_dir, ["--head-layout", head_layout_json(pruned)])
    rebuilt.load_state_dict(pruned.state_dict(), strict=True)
    x = random_tokens(len(task.dictionary))
    assert torch.equal(full_lprobs(rebuilt.eval(), x), full_lprobs(pruned, x))


def test_cost_prediction_matches_the_pruned_model(dict_dir):
    _, model = build_llama(dict_dir, ["--qkv-bias"])
    _, pruned = masked_and_pruned(model, QUERY_MASK)
    predicted, measured = attention_cost(model, QUERY_MASK), attention_cost(pruned)
    assert predicted == measured
    full = attention_cost(model)
    assert (full.query_heads, full.kv_heads, predicted.query_heads, predicted.kv_heads) == (8, 4, 3, 3)
    # float32 K and V, head size 16, per KV head per token
    assert (full.kv_cache_bytes_per_token, predicted.kv_cache_bytes_per_token) == (4 * 2 * 16 * 4, 3 * 2 * 16 * 4)
    gates = sum(p.numel() for n, p in pruned.named_parameters() if ".self_attn." in n and "gate" not in n)
    assert measured.attention_parameters == gates


def test_group_scores_keep_whole_groups():
    groups = {"dec-self": [[0, 0, 1, 1], [0, 0, 1, 1]]}
    scores = {"dec-self": [[1.0, 3.0, 2.5, 2.5], [0.0, 0.5, 9.0, -9.0]]}
    assert group_mean_scores(scores, groups)["dec-self"][0] == [2.0, 2.0, 2.5, 2.5]
    mask = keep_top_k_groups(scores, groups, 2)  # means 2.0, 2.5 | 0.25, 0.0
    assert [m.int().tolist() for m in mask["dec-self"]] == [[1, 1, 1, 1], [0, 0, 0, 0]]


def test_kv_group_gates_switch_whole_groups(dict_dir):
    task, model = build_llama(dict_dir, ["--prune-unit", "kv-group"])
    gates = [b.self_attn.gate for b in model.decoder.layers]
    assert all(isinstance(g, GroupGate) and g.num_groups == 2 and g.num_gates == 4 for g in gates)
    with torch.no_grad():
        gates[0].log_alpha.copy_(torch.tensor([3.0, -5.0]))  # group 1 of layer 0 closed
    mask = head_mask_from_gates(model)
    assert mask["dec-self"].int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    # closed by its gate ≡ removed: the gates keep their values in the pruned model
    pruned = physically_prune(copy.deepcopy(model), mask)
    assert pruned.decoder.layers[0].self_attn.num_kv_heads == 1
    assert pruned.decoder.layers[0].self_attn.gate.num_groups == 1
    x = random_tokens(len(task.dictionary))
    assert (full_lprobs(pruned, x) - full_lprobs(model, x)).abs().max() <= TOLERANCE
    # L0 counts groups: P(open) of 2 groups per layer
    assert float(gates[1].expected_l0()) > 1.9 and float(gates[1].expected_l0()) <= 2.0


def test_query_gates_of_a_checkpoint_load_as_group_gates(dict_dir):
    _, query_gated = build_llama(dict_dir)
    with torch.no_grad():
        query_gated.decoder.layers[0].self_attn.gate.log_alpha.copy_(torch.tensor([1.0, 3.0, -2.0, -4.0]))
    _, group_gated = build_llama(dict_dir, ["--prune-unit", "kv-group"])
    group_gated.load_state_dict(query_gated.state_dict())  # fairseq's load upgrades the state
    assert group_gated.decoder.layers[0].self_attn.gate.log_alpha.tolist() == [2.0, -3.0]


def test_gate_table_of_kv_group_gates_has_a_row_per_query_head(dict_dir, tmp_path):
    """`fairseq-heads gates` reads a group-gated checkpoint: each query head shows its group's
    gate, also after pruning (the layout says which groups are left)."""
    from fairseq_heads.gating.gate_table import gate_rows

    _, model = build_llama(dict_dir, ["--prune-unit", "kv-group"])
    with torch.no_grad():
        model.decoder.layers[1].self_attn.gate.log_alpha.copy_(torch.tensor([-5.0, 2.0]))
    args = type("Options", (), dict(prune_unit="kv-group", decoder_attention_heads=4, decoder_kv_heads=2,
                                    head_layout=None))()
    state = {"model": model.state_dict(), "cfg": {"model": args}}
    rows = gate_rows(state)
    assert [(r.layer, r.head, r.log_alpha, r.kept) for r in rows if r.layer == 1] == [
        (1, 0, -5.0, False), (1, 1, -5.0, False), (1, 2, 2.0, True), (1, 3, 2.0, True)]
    pruned = physically_prune(copy.deepcopy(model), head_mask_from_gates(model))
    args.head_layout = head_layout_json(pruned)
    rows = gate_rows({"model": pruned.state_dict(), "cfg": {"model": args}})
    assert [(r.layer, r.head, r.log_alpha) for r in rows if r.layer == 1] == [(1, 0, 2.0), (1, 1, 2.0)]
    assert len(rows) == 6


def test_a_layer_without_heads(dict_dir):
    """Every head of layer 0 removed: the block outputs nothing (o-proj has no bias), masked ≡
    pruned, the layout rebuilds it, and the KV groups and costs count it as empty."""
    task, model = build_llama(dict_dir)
    mask = {"dec-self": torch.tensor([[0, 0, 0, 0], [1, 0, 0, 1]], dtype=torch.bool)}
    masked, pruned = masked_and_pruned(model, mask)
    assert_same_function(masked, pruned, len(task.dictionary))
    assert kv_groups(pruned) == {"dec-self": [[], [0, 1]]}
    assert attention_cost(pruned)[:2] == (2, 2) == attention_cost(model, mask)[:2]
    _, rebuilt = build_llama(dict_dir, ["--head-layout", head_layout_json(pruned)])
    rebuilt.load_state_dict(pruned.state_dict(), strict=True)
    x = random_tokens(len(task.dictionary))
    assert torch.equal(full_lprobs(rebuilt.eval(), x), full_lprobs(pruned, x))


def test_gate_trace_of_kv_group_gates_has_every_query_head(dict_dir):
    from fairseq_heads.tasks.head_hooks import gate_record

    _, model = build_llama(dict_dir, ["--prune-unit", "kv-group"])
    with torch.no_grad():
        model.decoder.layers[0].self_attn.gate.log_alpha.copy_(torch.tensor([-5.0, 2.0]))
    heads = [h for h in gate_record(model, 7)["heads"] if h["layer"] == 0]
    assert [(h["head"], h["log_alpha"], h["open"]) for h in heads] == [
        (0, -5.0, 0), (1, -5.0, 0), (2, 2.0, 1), (3, 2.0, 1)]
