"""Olsson et al.'s in-context learning score on natural text: per-position losses, the score as
the mean of late - early over blocks, and the reasons it cannot be computed."""
import math

import pytest
import torch

from fairseq_heads.stats.metrics.natural_icl import (
    NaturalICLAccumulator,
    check_positions,
    natural_icl_meta,
    position_nll,
    unavailable_reason,
)


def test_position_losses_of_known_distributions():
    vocab = 10
    lprobs = torch.full((2, 2, vocab), -math.log(vocab), dtype=torch.float64)  # uniform
    lprobs[1, 1] = float("-inf")
    lprobs[1, 1, 7] = 0.0  # certain of token 7
    nll = position_nll(lprobs, torch.tensor([[3, 4], [5, 7]]))
    assert torch.allclose(nll, torch.tensor([[math.log(10)] * 2, [math.log(10), 0.0]], dtype=torch.float64))


def test_score_is_the_mean_over_blocks_of_late_minus_early():
    acc = NaturalICLAccumulator((50, 500), replicates=20)
    acc.update(torch.tensor([[4.0, 3.0], [5.0, 2.0]], dtype=torch.float64))  # -1, -3
    acc.update(torch.tensor([[3.0, 3.5]], dtype=torch.float64))  # +0.5
    result = acc.finalize()
    assert result["score"].estimate.item() == pytest.approx((-1 - 3 + 0.5) / 3)
    assert result["early_loss"].estimate.item() == pytest.approx(4.0)
    assert result["late_loss"].estimate.item() == pytest.approx(8.5 / 3)
    assert result["score"].count.item() == 3
    meta = natural_icl_meta(acc, result)
    assert meta["early_position"] == 50 and meta["late_position"] == 500 and meta["blocks"] == 3
    assert meta["reason"] is None and meta["score"]["ci_low"] <= meta["score"]["estimate"] <= meta["score"]["ci_high"]


def test_no_block_gives_nan_and_the_reason_says_why():
    assert "the model takes 256 positions" in unavailable_reason(256, [256] * 4, 500)
    assert "needs 501" in unavailable_reason(500, [500], 500)
    assert "no block of the subset reaches position 500" in unavailable_reason(1024, [30, 480, 500], 500)
    assert unavailable_reason(1024, [30, 501], 500) is None
    assert unavailable_reason(None, [501], 500) is None
    acc = NaturalICLAccumulator((50, 500), replicates=5)
    assert math.isnan(acc.finalize()["score"].estimate.item())


@pytest.mark.parametrize("positions", [(500, 50), (50, 50), (-1, 5), (50,), (1, 2, 3)])
def test_positions_must_be_early_then_late(positions):
    with pytest.raises(ValueError, match="^--icl-positions: expected two positions EARLY,LATE"):
        check_positions(positions)
