"""L0 against Michel et al.'s heuristic at equal heads (report/michel.py) on hand-made result
files: the pairing by `from_model`, the heads both keep beside chance, and ΔBLEU as sacreBLEU's
difference of the two models."""
import pytest
from sacrebleu.metrics import BLEU

from fairseq_heads.report.michel import heuristic_metric, michel_comparison_table
from fairseq_heads.report.table_basics import MissingInput

from .hand_made_results import model_result

REFERENCES = [f"a red boat number {i} sails past the harbour wall at dawn" for i in range(10)]


def pair(seed, l0_kept, heuristic_kept):
    l0 = model_result(f"enc_l0_0.01_conv_s{seed}", "encoder_l0", 0.0, {"enc-self": l0_kept}, 0.01)
    heuristic = model_result(f"michel_grad_as_{l0['name']}", "heuristic", 0.0, {"enc-self": heuristic_kept},
                             from_model=l0["name"])
    for result in (l0, heuristic):
        result.update(seed=seed, protocol="converged")
    heuristic["metric"] = "grad"
    return [l0, heuristic]


def translations(drops):
    return {name: ([" ".join(r.split()[:-2]) if i < drop else r for i, r in enumerate(REFERENCES)], REFERENCES)
            for name, drop in drops.items()}


def test_each_heuristic_beside_its_l0_model():
    # seed 1: the same two heads; seed 2: none in common
    results = pair(2, [[0, 1], [1, 0]], [[1, 0], [0, 1]]) + pair(1, [[1, 1], [0, 0]], [[1, 1], [0, 0]])
    given = translations({"enc_l0_0.01_conv_s1": 1, "michel_grad_as_enc_l0_0.01_conv_s1": 4,
                          "enc_l0_0.01_conv_s2": 2, "michel_grad_as_enc_l0_0.01_conv_s2": 2})
    score = {name: BLEU().corpus_score(h, [r]).score for name, (h, r) in given.items()}
    table = michel_comparison_table(results, given, samples=200)
    rows = [dict(zip(table.columns, row)) for row in table.rows]
    assert [r["L0 model"] for r in rows] == ["enc_l0_0.01_conv_s1", "enc_l0_0.01_conv_s2"]
    assert [(r["heads both keep"], r["by chance (expected)"]) for r in rows] == [(2, 1.0), (0, 1.0)]
    assert heuristic_metric(results[1]) == rows[0]["heuristic metric"] == "grad"
    for row, seed in zip(rows, (1, 2)):
        expected = score[f"enc_l0_0.01_conv_s{seed}"] - score[f"michel_grad_as_enc_l0_0.01_conv_s{seed}"]
        assert row["Δ L0 − heuristic"] == pytest.approx(expected)
    assert rows[0]["Δ L0 − heuristic"] > 0 and rows[1]["Δ L0 − heuristic"] == 0


def test_a_heuristic_without_its_l0_result_is_named():
    results = pair(1, [[1, 1], [0, 0]], [[1, 1], [0, 0]])[1:]
    with pytest.raises(MissingInput, match="enc_l0_0.01_conv_s1 has no result"):
        michel_comparison_table(results, {})
