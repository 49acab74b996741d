"""The formation curve's verdict (report/formation.py: formation_verdict) on hand-built rows: when
each function first has a head past its threshold, and the flatness rule (over the last epoch no
tracked statistic moves by 0.02 or more), including the edge of its window and tolerance."""
from fairseq_heads.report.formation import (FLAT_TOLERANCE, TRACKED, first_appearance, formation_verdict,
                                            last_epoch_moves)


def row(update, epoch, level=0.3, positional_heads=0, syntactic_heads=0, rare_heads=0, **overrides):
    values = {column: level for column in TRACKED}
    values.update(overrides)
    return {"update": update, "epoch": epoch, "positional_heads_enc-self": positional_heads,
            "positional_heads_dec-self": 0, "positional_heads_enc-dec": 0, "syntactic_heads": syntactic_heads,
            "rare_heads": rare_heads, **values}


def test_a_function_appears_at_the_first_row_with_a_head_past_its_threshold():
    rows = [row(500, 0.2), row(1000, 0.4, rare_heads=1), row(1500, 0.6, rare_heads=2, positional_heads=1)]
    assert first_appearance(rows, "rare-word")["update"] == 1000
    assert first_appearance(rows, "positional")["update"] == 1500
    assert first_appearance(rows, "syntactic") is None
    verdict = formation_verdict(rows)
    assert "rare-word: first at update 1000" in verdict and "positional: first at update 1500" in verdict
    assert "syntactic: no head by update 1500, epoch 0.60" in verdict


def test_the_curve_is_judged_only_once_it_spans_the_window():
    rows = [row(500, 0.2), row(1000, 0.5), row(1500, 0.9)]
    assert last_epoch_moves(rows) is None
    assert "flatness is not judged" in formation_verdict(rows)
    assert last_epoch_moves(rows + [row(2000, 1.2)]) is not None  # 1.2 - 0.2 >= 1


def test_flat_when_no_statistic_moves_by_the_tolerance_over_the_last_epoch():
    # a statistic rose fast early (outside the window), then moved by just under the tolerance
    early = [row(500, 0.2, level=0.05), row(1500, 0.6, level=0.2)]
    window = [row(3000, 1.2, level=0.30), row(4500, 1.7, level=0.30 + FLAT_TOLERANCE / 2),
              row(6000, 2.2, level=0.30 + FLAT_TOLERANCE * 0.99)]
    moves = last_epoch_moves(early + window)
    assert set(moves) == set(TRACKED)
    # the window starts at the last row at least an epoch before the final one (epoch 1.2)
    assert abs(moves["rare_best_share"] - FLAT_TOLERANCE * 0.99) < 1e-12
    assert "The curve is flat: over the last epoch" in formation_verdict(early + window)


def test_one_statistic_moving_by_the_tolerance_keeps_the_curve_moving_and_is_named():
    rows = [row(3000, 1.2), row(4500, 1.7), row(6000, 2.2, syntactic_best_gain=0.3 - FLAT_TOLERANCE)]
    verdict = formation_verdict(rows)
    assert "still moves" in verdict and "syntactic best gain by 0.02" in verdict
    assert "positional" not in verdict.split("still moves")[1]  # only the one that moved is named
