"""Perplexity's paired bootstrap over test blocks (report/significance.py) and the LM report's
trained-vs-scratch rows with it (report/lm_protocol_tables.py), on hand-made block losses whose
every resample is known in closed form."""
import numpy as np
import pytest

from fairseq_heads.pruning.curve import perplexity_of_blocks
from fairseq_heads.report.lm_protocol_tables import advantage_rows, paired_cost_interval
from fairseq_heads.report.significance import (bootstrap_log_perplexity, relative_perplexity_cost,
                                               resample_counts, seed_interval)


def constant_rate(rate, blocks=50, seed=0):
    """Blocks of varying length whose NLL is `rate` nats on every token: every resample of them
    has log perplexity `rate` exactly."""
    tokens = np.random.default_rng(seed).integers(5, 40, size=blocks)
    return rate * tokens.astype(float), tokens


def test_each_resample_pools_the_drawn_blocks_as_the_perplexity_does():
    nll, tokens = np.array([10.0, 2.0, 6.0]), np.array([5, 1, 2])
    full, resampled = bootstrap_log_perplexity([(nll, tokens)], samples=20, seed=3)
    assert full[0] == pytest.approx(18.0 / 8)
    assert np.exp(full[0]) == pytest.approx(perplexity_of_blocks(nll, tokens))
    counts = resample_counts(3, 20, 3)  # the same draws
    assert resampled[:, 0] == pytest.approx((counts @ nll) / (counts @ tokens))


def test_a_constant_per_token_loss_has_no_test_set_spread():
    full, resampled = bootstrap_log_perplexity([constant_rate(1.5), constant_rate(1.2, seed=1)])
    assert resampled[:, 0] == pytest.approx(np.full(len(resampled), 1.5))
    cost = relative_perplexity_cost(full[0], full[1])
    assert cost == pytest.approx(np.exp(0.3) - 1)
    low, high = paired_cost_interval(constant_rate(1.5), constant_rate(1.2, seed=1))
    assert low == pytest.approx(100 * cost) and high == pytest.approx(100 * cost)


def test_the_pairing_cancels_what_the_blocks_share():
    # system = reference + 0.1 nats per token: a block-level difficulty shared by both leaves the
    # paired cost exact, though each perplexity alone varies from resample to resample
    rng = np.random.default_rng(7)
    tokens = rng.integers(5, 40, size=80)
    difficulty = rng.uniform(0.5, 3.0, size=80) * tokens
    reference, system = (difficulty, tokens), (difficulty + 0.1 * tokens, tokens)
    _, resampled = bootstrap_log_perplexity([system, reference])
    assert resampled[:, 1].std() > 0.05
    assert relative_perplexity_cost(resampled[:, 0], resampled[:, 1]) == pytest.approx(
        np.full(len(resampled), np.expm1(0.1)))


def test_block_losses_of_different_test_sets_are_refused():
    with pytest.raises(ValueError, match="block losses of different test sets"):
        bootstrap_log_perplexity([constant_rate(1.0, blocks=5), constant_rate(1.0, blocks=6)])


def quadruple(seed, rates):
    names = {side: f"{side}_s{seed}" for side in ("trained", "control", "scratch", "full_scratch")}
    results = {side: {"name": names[side], "perplexity": float(np.exp(rate)), "l0_lambda": 0.5 if side == "trained" else 0,
                      "seed": seed, "heads_kept": 3, "heads_total": 8} for side, rate in zip(names, rates)}
    blocks = {names[side]: constant_rate(rate, seed=k) for k, (side, rate) in enumerate(zip(names, rates))}
    return results, blocks


def test_trained_vs_scratch_rows_carry_paired_intervals_and_the_mean_the_seed_spread():
    # per-token losses (trained, control, scratch, full scratch): exact per seed, so each seed's
    # interval is its point and the mean's interval is Student's t over the seeds alone
    q1, b1 = quadruple(1, (1.10, 1.00, 1.30, 1.00))
    q2, b2 = quadruple(2, (1.05, 1.00, 1.10, 1.00))
    rows = advantage_rows([q1, q2], {**b1, **b2})
    trained, scratch = 100 * np.expm1(0.10), 100 * np.expm1(0.30)
    assert rows[0][7:] == [f"{trained:+.1f} [{trained:+.1f}, {trained:+.1f}]", f"{scratch:+.1f} [{scratch:+.1f}, {scratch:+.1f}]",
                           f"{scratch - trained:+.1f} [{scratch - trained:+.1f}, {scratch - trained:+.1f}]"]
    per_seed = [100 * np.expm1(0.10), 100 * np.expm1(0.05)]
    student = seed_interval(per_seed)
    assert rows[2][:2] == ["0.5", "mean of 2"]
    assert rows[2][7].startswith(f"{student.delta:+.1f} [{student.ci_low:+.1f}, {student.ci_high:+.1f}]")
    # one model without its block losses: no model is bootstrapped, the plain floats come back
    del b2["scratch_s2"]
    plain = advantage_rows([q1, q2], {**b1, **b2})
    assert plain[0][7:] == pytest.approx([trained, scratch, scratch - trained])
