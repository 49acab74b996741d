"""The spread over baseline seeds (report/baseline_seeds.py) on hand-made result files: three
seeds' baselines and quick-protocol fine-tunes, with BLEU chosen so that every cell is known."""
import pytest

from fairseq_heads.report.baseline_seeds import baseline_seed_table
from fairseq_heads.report.tables import MissingInput

from .hand_made_results import model_result


def seeded(name, kind, bleu, kept, lam, seed):
    result = model_result(name + ("" if seed == 1 else f"_s{seed}"), kind, bleu, kept, lam)
    result.update(seed=seed, protocol=None if kind == "baseline" else "quick", updates=200)
    return result


ENC_3 = {"enc-self": [[1, 1], [0, 1]]}   # 3 of 4 encoder heads
ENC_1 = {"enc-self": [[1, 0], [0, 0]]}


def three_seeds():
    results = []
    for seed, base, control, pruned, kept in ((1, 30.0, 30.5, 29.0, ENC_3), (2, 28.0, 28.0, 27.5, ENC_1),
                                              (3, 29.0, 29.5, 27.0, ENC_3)):
        results += [seeded("baseline", "baseline", base, {}, None, seed),
                    seeded("enc_l0_0", "encoder_l0", control, {}, 0.0, seed),
                    seeded("enc_l0_0.01", "encoder_l0", pruned, kept, 0.01, seed)]
    return results


def test_each_kind_and_lambda_gets_its_seeds_and_their_spread():
    table = baseline_seed_table(three_seeds())
    rows = {row[0]: dict(zip(table.columns, row)) for row in table.rows}
    assert list(rows) == ["baseline", "encoder_l0 λ=0", "encoder_l0 λ=0.01"]
    pruned = rows["encoder_l0 λ=0.01"]
    assert pruned["baseline seeds"] == "1, 2, 3" and pruned["heads kept"] == "3, 1, 3"
    assert pruned["BLEU per seed"] == "29.00, 27.50, 27.00"
    assert pruned["BLEU mean"] == pytest.approx(27.833333, abs=1e-5)
    assert (pruned["BLEU min"], pruned["BLEU max"]) == (27.0, 29.0)
    # against the same seed's baseline: -1, -0.5, -2; against its control: -1.5, -0.5, -2.5
    assert pruned["Δ baseline mean"] == pytest.approx(-3.5 / 3)
    assert (pruned["Δ baseline min"], pruned["Δ baseline max"]) == (-2.0, -0.5)
    assert pruned["Δ control mean"] == pytest.approx(-1.5)
    assert (pruned["Δ control min"], pruned["Δ control max"]) == (-2.5, -0.5)
    assert rows["encoder_l0 λ=0"]["Δ control mean"] is None   # the control is not its own reference
    assert rows["baseline"]["Δ baseline mean"] is None
    assert rows["baseline"]["BLEU mean"] == pytest.approx(29.0)


def test_converged_models_of_one_baseline_are_not_baseline_seeds():
    results = three_seeds()[:3]  # seed 1 only
    for seed in (2, 3):
        converged = seeded(f"enc_l0_0.01_conv_s{seed}", "encoder_l0", 29.0, ENC_3, 0.01, 1)
        converged.update(seed=seed, protocol="converged")
        results.append(converged)
    with pytest.raises(MissingInput, match="fewer than two baseline seeds"):
        baseline_seed_table(results)


def test_a_model_run_for_one_seed_only_gets_no_row():
    results = three_seeds() + [seeded("enc_l0_0.5", "encoder_l0", 10.0, ENC_1, 0.5, 2)]
    assert "encoder_l0 λ=0.5" not in [row[0] for row in baseline_seed_table(results).rows]


def test_the_report_shows_the_table_only_for_several_baseline_seeds(tmp_path):
    import json
    import os

    from fairseq_heads.report.build import build_report

    def write(results, folder):
        for result in results:
            os.makedirs(folder / "results" / result["name"], exist_ok=True)
            with open(folder / "results" / result["name"] / "result.json", "w") as f:
                json.dump(result, f)

    write(three_seeds(), tmp_path / "three")
    write(three_seeds()[:3], tmp_path / "one")
    for folder, shown in (("three", True), ("one", False)):
        build_report(str(tmp_path / folder))
        text = (tmp_path / folder / "tables.md").read_text()
        assert ("over baseline seeds" in text) == shown
        if shown:
            assert "| encoder_l0 λ=0.01 | 1, 2, 3 | 3, 1, 3 | 29.00, 27.50, 27.00 |" in text
