"""Which heads the seeds keep (report/seed_masks.py): the chance Jaccard index against enumerating
every pair of subsets, and the table on hand-made converged result files whose masks are known."""
from fractions import Fraction
from itertools import combinations

import pytest

from fairseq_heads.report.build import build_report
from fairseq_heads.report.seed_masks import chance_jaccard, jaccard, seed_mask_table
from fairseq_heads.report.table_basics import MissingInput

from .hand_made_results import model_result, write_results_dir


@pytest.mark.parametrize("n,a,b", [(4, 2, 2), (6, 2, 3), (6, 5, 4), (5, 0, 3), (5, 5, 5), (7, 1, 6)])
def test_chance_jaccard_is_the_mean_over_every_pair_of_subsets(n, a, b):
    pairs = [(frozenset(x), frozenset(y)) for x in combinations(range(n), a) for y in combinations(range(n), b)]
    exact = sum(Fraction(len(x & y), len(x | y)) if x | y else Fraction(1) for x, y in pairs) / len(pairs)
    assert chance_jaccard(n, a, b) == pytest.approx(float(exact), abs=1e-12)


def test_the_closed_form_of_two_halves_of_four():
    # overlap 0, 1, 2 with probabilities 1/6, 4/6, 1/6; Jaccard 0, 1/3, 1
    assert chance_jaccard(4, 2, 2) == pytest.approx(7 / 18)
    assert jaccard(frozenset(), frozenset()) == 1.0 and jaccard(frozenset({1}), frozenset({2})) == 0.0


def converged(name, kept, lam, seed, kind="encoder_l0", protocol="converged"):
    result = model_result(f"{name}_conv_s{seed}", kind, 30.0, kept, lam)
    result.update(protocol=protocol, seed=seed, gate_lr_scale=1000)
    return result


# 2 layers x 2 heads (hand_made_results): heads (layer, head) kept per seed
SEEDS = {1: [[1, 1], [0, 0]], 2: [[1, 0], [1, 0]], 3: [[1, 1], [1, 0]]}
RESULTS = ([model_result("baseline", "baseline", 32.0, {})]
           + [converged("enc_l0_0.01", {"enc-self": kept}, 0.01, seed) for seed, kept in SEEDS.items()]
           + [converged("enc_l0_0", {}, 0.0, seed) for seed in SEEDS]              # controls: not rows
           + [converged("enc_l0_0.1", {"enc-self": [[1, 0], [0, 0]]}, 0.1, 1)]      # one seed: no row
           + [converged("all_l0_0.01", {"dec-self": [[1, 0], [0, 0]]}, 0.01, s, "all_l0") for s in (1, 2)])


def test_the_seeds_masks_side_by_side_against_chance():
    table = seed_mask_table(RESULTS)
    (row,) = [dict(zip(table.columns, r)) for r in table.rows]
    assert [row[c] for c in ("models", "seeds", "heads kept per seed", "heads", "kept by every seed",
                             "kept by any seed")] == ["encoder_l0 λ=0.01", "1 2 3", "2 2 3", 4, 1, 3]
    # pairs: {00,01}~{00,10} 1/3, {00,01}~{00,01,10} 2/3, {00,10}~{00,01,10} 2/3
    assert row["mean Jaccard of the seeds' kept sets"] == pytest.approx((1 / 3 + 2 / 3 + 2 / 3) / 3)
    expected_chance = (chance_jaccard(4, 2, 2) + 2 * chance_jaccard(4, 2, 3)) / 3
    assert row["by chance (random sets of those sizes)"] == pytest.approx(expected_chance)


def test_all_types_masks_pool_every_type_and_quick_seeds_are_not_compared():
    (row,) = seed_mask_table(RESULTS, "all_l0").rows
    # dec-self keeps 1 of 4, the other types all 8: 9 of 12 in both seeds
    assert row[2:6] == ["9 9", 12, 9, 9] and row[6] == 1.0
    quick = [dict(r, protocol="quick") for r in RESULTS]  # a baseline per seed: not the same heads
    with pytest.raises(MissingInput):
        seed_mask_table(quick)


def test_the_report_shows_it_with_two_seeds_and_not_with_one(tmp_path):
    title = "The heads each seed keeps, and how much the seeds agree"
    several, one = tmp_path / "several", tmp_path / "one"
    write_results_dir(str(several), with_trace=False, results=RESULTS)
    write_results_dir(str(one), with_trace=False, results=[r for r in RESULTS if r.get("seed") in (None, 1)])
    for folder in (several, one):
        build_report(str(folder))
    assert (several / "tables.md").read_text().count(title) == 2  # encoder-only and all types
    assert title not in (one / "tables.md").read_text()
