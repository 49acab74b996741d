"""`stats` on a trained LM: the natural-text in-context learning score equals the losses at the
two positions computed here by a plain full forward of each whole block; with the default
positions (50, 500) a 64-token model gets NaN and the reason; the induction metric carries each
head's copying score, equal to metrics/induction's on the same weights."""
import math

import pytest
import torch
from fairseq import checkpoint_utils

from fairseq_heads.stats import StatsOptions, compute_head_statistics


def load(path, data_bin):
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(path)], arg_overrides={"data": str(data_bin)})
    return models[0].eval(), task


def block_losses_by_hand(model, task, early, late):
    """[(loss at early, loss at late)] of every valid block whose target reaches `late`."""
    task.load_dataset("valid")
    dataset, losses = task.dataset("valid"), []
    with torch.no_grad():
        for i in range(len(dataset)):
            item = dataset[i]
            if len(item["target"]) <= late:
                continue
            lprobs = model.get_normalized_probs(model(item["source"][None]), log_probs=True)[0].double()
            losses.append((-lprobs[early, item["target"][early]].item(), -lprobs[late, item["target"][late]].item()))
    return losses


@pytest.fixture(scope="module")
def lm_stats(plain_lm, lm_data_bin):
    options = StatsOptions(metrics=("induction", "natural_icl"), icl_positions=(5, 40), replicates=20,
                           cpu=True, log_format="none", induction_lengths=(8,), induction_probes=8)
    return compute_head_statistics(str(lm_data_bin), str(plain_lm), "valid", options)


def test_natural_icl_is_late_minus_early_over_the_blocks_that_reach_late(lm_stats, plain_lm, lm_data_bin):
    model, task = load(plain_lm, lm_data_bin)
    losses = block_losses_by_hand(model, task, 5, 40)
    assert len(losses) >= 5
    icl = lm_stats.meta["natural_icl"]
    assert icl["reason"] is None and (icl["early_position"], icl["late_position"]) == (5, 40)
    assert icl["blocks"] == len(losses)
    expected = sum(late - early for early, late in losses) / len(losses)
    assert icl["score"]["estimate"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
    assert icl["early_loss"]["estimate"] == pytest.approx(sum(e for e, _ in losses) / len(losses), rel=1e-4)
    assert icl["score"]["ci_low"] <= icl["score"]["estimate"] <= icl["score"]["ci_high"]


def test_default_positions_beyond_the_context_give_nan_and_the_reason(plain_lm, lm_data_bin):
    options = StatsOptions(metrics=("natural_icl",), replicates=5, cpu=True, log_format="none")
    icl = compute_head_statistics(str(lm_data_bin), str(plain_lm), "valid", options).meta["natural_icl"]
    assert icl["late_position"] == 500 and icl["blocks"] == 0
    assert math.isnan(icl["score"]["estimate"])
    assert "the model takes 64 positions" in icl["reason"]


def test_copying_score_column_is_the_weights_copying_score(lm_stats, plain_lm, lm_data_bin):
    from fairseq_heads.stats.metrics.induction import copying_scores

    model, _ = load(plain_lm, lm_data_bin)
    expected = copying_scores(model.decoder, [layer.self_attn for layer in model.decoder.layers])
    assert "copying_score" in lm_stats.columns
    assert lm_stats.meta["induction"]["copying_score_unavailable"] is None
    for row in lm_stats.rows:
        assert row["copying_score"] == pytest.approx(expected[row["layer"], row["head"]].item(), abs=1e-9)
        assert -1.0 <= row["copying_score"] <= 1.0
    assert "repeat_copy_loss_drop" in lm_stats.meta["induction"]


@pytest.mark.parametrize("positions", ["500,50", "50", "a,b"])
def test_bad_positions_fail_in_one_line_naming_the_option(positions, plain_lm, lm_data_bin, tmp_path, capsys):
    from fairseq_heads import cli

    assert cli.main(["stats", str(lm_data_bin), "--path", str(plain_lm), "--out-dir", str(tmp_path / "out"),
                     "--cpu", "--log-format", "none", "--icl-positions", positions]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--icl-positions: expected" in lines[0], lines
    assert not (tmp_path / "out").exists()
