"""--target-heads: the Lagrangian, the top-K rule, and a short fairseq-train run ending at K heads."""
import json
import math

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_heads.gating.head_masks import head_mask_from_gates
from fairseq_heads.models.gated_transformer import expected_l0, iter_gates, open_heads_per_type
from fairseq_heads.gating.hard_concrete import prob_nonzero
from fairseq_heads.gating.head_target import (
    HeadTargetError,
    install_head_target,
    installed_head_target,
    parse_head_target,
)
from fairseq_heads.criterions.lagrangian import HeadCountLagrangian

from core.helpers import build_model, write_dictionaries
from core.rounding import sum_tolerance

from .conftest import ALL_TYPES, TARGET



def gated_model(tmp_path):
    torch.manual_seed(0)
    _, model = build_model(write_dictionaries(tmp_path), "gated_transformer", ["--gated-attention", ALL_TYPES])
    with torch.no_grad():
        for _, _, gate in iter_gates(model):
            gate.log_alpha.normal_(0, 2)
    return model.eval()


def test_parse_head_target():
    assert parse_head_target("10") == {"all": 10}
    assert parse_head_target("enc-self:3, enc-dec:5") == {"enc-self": 3, "enc-dec": 5}
    for bad in ("ten", "enc-self:3,enc-self:4", "encoder:3", "-1", "enc-self:3,4"):
        with pytest.raises(HeadTargetError, match="--target-heads"):
            parse_head_target(bad)


def test_top_k_rule_per_type_and_plain_rule_for_other_types(tmp_path):
    model = gated_model(tmp_path)
    plain_rule = {t: int(m.sum()) for t, m in head_mask_from_gates(model).items()}
    install_head_target(model, "enc-self:3,enc-dec:5")
    opened = {t: n for t, (n, _) in open_heads_per_type(model).items()}
    assert opened == {"enc-self": 3, "enc-dec": 5, "dec-self": plain_rule["dec-self"]}
    alphas = torch.cat([g.log_alpha for t, _, g in iter_gates(model) if t == "enc-self"]).detach()
    kept = torch.cat([g.is_open() for t, _, g in iter_gates(model) if t == "enc-self"])
    assert set(alphas[kept].tolist()) == set(alphas.topk(3).values.tolist())
    # eval-mode gate values follow the rule: closed heads output exactly 0
    for t, _, gate in iter_gates(model):
        assert torch.equal(gate() > 0, gate.is_open() & (gate() > 0))
        assert (gate()[~gate.is_open()] == 0).all()


def test_target_survives_a_state_dict_round_trip(tmp_path):
    model = gated_model(tmp_path)
    install_head_target(model, "7")
    _, fresh = build_model(write_dictionaries(tmp_path), "gated_transformer", ["--gated-attention", ALL_TYPES])
    assert installed_head_target(fresh) is None
    fresh.load_state_dict(model.state_dict(), strict=True)
    assert installed_head_target(fresh) == "7"
    # the rule each gate follows is its own state, set by the model's load_state_dict
    assert {gate.keep_rule for _, _, gate in iter_gates(fresh)} == {"top-7 of all"}
    assert "keep_rule=top-7 of all" in repr(next(iter_gates(fresh))[2])
    assert sum(int(m.sum()) for m in head_mask_from_gates(fresh.eval()).values()) == 7
    fresh.load_state_dict(gated_model(tmp_path).state_dict(), strict=True)  # no target recorded
    assert {gate.keep_rule for _, _, gate in iter_gates(fresh)} == {"deterministic gate > 0"}


def test_target_larger_than_the_gated_heads_is_an_error(tmp_path):
    model = gated_model(tmp_path)
    with pytest.raises(HeadTargetError, match="exceeds the 24 gated heads"):
        install_head_target(model, "25")


def test_multipliers_ascend_and_gates_descend(tmp_path):
    model = gated_model(tmp_path).train()
    lagrangian = HeadCountLagrangian("enc-self:2,dec-self:8")
    with torch.no_grad():
        lagrangian.lambda1.fill_(0.5)
        lagrangian.lambda2.fill_(0.1)
    penalty, logs = lagrangian(model)
    penalty.backward()
    expected = torch.tensor([logs["expected_heads_enc_self"], logs["expected_heads_dec_self"]])
    gap = expected - torch.tensor([2.0, 8.0])
    # reversed gradients: an optimizer step (descent) raises λ where E[L0] > K. E[L0] is a float32
    # sum of 8 probabilities (<= 8) per type, here and in the logs, maybe in another order
    tolerance = sum_tolerance(torch.float32, 8, 8.0)
    assert torch.allclose(lagrangian.lambda1.grad, -gap, rtol=0, atol=tolerance)
    assert torch.allclose(lagrangian.lambda2.grad, -gap ** 2, rtol=0, atol=2 * gap.abs().max() * tolerance + tolerance)
    enc_self_grad = torch.cat([g.log_alpha.grad for t, _, g in iter_gates(model) if t == "enc-self"])
    assert gap[0] > 0 and (enc_self_grad > 0).all()  # descent lowers enc-self log-alphas
    assert all(g.log_alpha.grad is None for t, _, g in iter_gates(model) if t == "enc-dec")


def load(checkpoint, data_bin):
    [model], _ = checkpoint_utils.load_model_ensemble([str(checkpoint)], arg_overrides={"data": str(data_bin)})
    return model.eval()


def test_training_with_target_heads_ends_with_exactly_k_heads(target_run, toy_data_bin):
    checkpoint, log = target_run
    model = load(checkpoint, toy_data_bin.data_bin)
    assert sum(n for n, _ in open_heads_per_type(model).values()) == TARGET
    # the gate table read from the raw checkpoint applies the same rule
    from fairseq_heads.checkpoints import load_checkpoint
    from fairseq_heads.gating.gate_table import gate_rows

    rows = gate_rows(load_checkpoint(str(checkpoint)))
    assert sum(row.kept for row in rows) == TARGET
    kept_by_model = {(t, layer, h) for t, layer, g in iter_gates(model) for h in torch.nonzero(g.is_open()).flatten().tolist()}
    assert {(r.attention_type, r.layer, r.head) for r in rows if r.kept} == kept_by_model
    # ... and E[L0] moved from ~all 24 heads toward K
    initial = 24 * prob_nonzero(torch.tensor(3.0), 1 / 3, -0.1, 1.1).item()
    final = expected_l0(model).item()
    assert abs(final - TARGET) < 0.5 * abs(initial - TARGET)
    records = [json.loads(line[line.index("{"):]) for line in log.splitlines() if "| train_inner |" in line]
    assert float(records[-1]["lambda1_all"]) > 0 and "expected_heads_all" in records[-1]
    assert records[-1]["target_heads_all"] == str(TARGET) or float(records[-1]["target_heads_all"]) == TARGET
    assert not math.isnan(float(records[-1]["lagrangian"]))


def test_multipliers_start_at_zero_from_a_checkpoint_without_them():
    """fairseq loads the criterion strictly, also when fine-tuning from a plain checkpoint."""
    lagrangian = HeadCountLagrangian("enc-self:2,dec-self:8")
    lagrangian.load_state_dict({}, strict=True)
    assert lagrangian.lambda1.tolist() == [0.0, 0.0]
    lagrangian.load_state_dict({"lambda1": torch.tensor([1.0, 2.0]), "lambda2": torch.tensor([3.0])})
    assert lagrangian.lambda1.tolist() == [1.0, 2.0] and lagrangian.lambda2.tolist() == [0.0, 0.0]
