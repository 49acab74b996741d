"""The decoding-speed table (report/decode_speed_table.py, issue 37 item 7) on hand-made result
files and speed files: each measured model beside its own seed's control, with a ΔBLEU that is
sacreBLEU's difference of the two, the measured and predicted speed-ups as the speed file has
them, and the section in tables.md only where speeds were measured."""
import json

import pytest
from sacrebleu.metrics import BLEU

from fairseq_heads.report.build import build_report
from fairseq_heads.report.decode_speed_table import decode_speed_table
from fairseq_heads.report.table_basics import MissingInput

from .hand_made_results import model_result, write_results_dir

REFERENCES = [f"the old man number {i} reads a long letter by the window" for i in range(12)]
ENC_2 = {"enc-self": [[1, 0], [0, 1]]}


def converged(name, bleu, kept, lam, seed):
    result = model_result(f"{name}_conv_s{seed}", "encoder_l0", bleu, kept, lam)
    result.update(protocol="converged", seed=seed, gate_lr_scale=1000)
    return result


def speed_file(name, masked, pruned, predicted, same=True):
    return {"subset": "test", "sentences": 12, "sentence_limit": 1000000, "beam": 5, "batch_size": 32,
            "rounds": 2, "device": "cpu", "unpruned_tokens_per_s": masked,
            "results": [{"mask": name, "heads_kept": {"enc-self": 2},
                         "tokens_per_s": {f"masked_{name}": masked, f"pruned_{name}": pruned},
                         "speedup": round(pruned / masked, 3), "predicted_speedup_flops": predicted,
                         "same_translations": same}]}


# seed 2's pruned model before seed 1's in the dict: the table orders by seed
RESULTS = [model_result("baseline", "baseline", 30.0, {}),
           converged("enc_l0_0.01", 29.0, ENC_2, 0.01, 2), converged("enc_l0_0", 30.0, {}, 0.0, 2),
           converged("enc_l0_0.01", 29.5, ENC_2, 0.01, 1), converged("enc_l0_0", 30.5, {}, 0.0, 1),
           converged("enc_l0_0.01", 28.0, ENC_2, 0.01, 3)]  # seed 3 has no control
SPEEDS = {"enc_l0_0.01_conv_s2": speed_file("enc_l0_0.01_conv_s2", 100.0, 130.0, 1.21),
          "enc_l0_0.01_conv_s1": speed_file("enc_l0_0.01_conv_s1", 110.0, 121.0, 1.2),
          "enc_l0_0.01_conv_s3": speed_file("enc_l0_0.01_conv_s3", 90.0, 99.0, 1.19, same=False)}
DROPS = {"enc_l0_0.01_conv_s1": 4, "enc_l0_0_conv_s1": 1, "enc_l0_0.01_conv_s2": 2, "enc_l0_0_conv_s2": 3,
         "enc_l0_0.01_conv_s3": 5}


def translations():
    return {name: ([" ".join(r.split()[:-3]) if i < drop else r for i, r in enumerate(REFERENCES)], REFERENCES)
            for name, drop in DROPS.items()}


def test_each_model_beside_its_own_control_and_its_speed_file():
    given = translations()
    score = {name: BLEU().corpus_score(h, [r]).score for name, (h, r) in given.items()}
    table = decode_speed_table(RESULTS, given, SPEEDS, samples=200)
    rows = [dict(zip(table.columns, row)) for row in table.rows]
    assert [(r["model"], r["seed"]) for r in rows] == [("enc_l0_0.01_conv_s1", "1"), ("enc_l0_0.01_conv_s2", "2"),
                                                      ("enc_l0_0.01_conv_s3", "3")]
    for row, seed in zip(rows[:2], (1, 2)):
        expected = score[f"enc_l0_0.01_conv_s{seed}"] - score[f"enc_l0_0_conv_s{seed}"]
        assert row["Δ vs its control"] == pytest.approx(expected)
        assert row["95% CI low"] <= expected <= row["95% CI high"]
    assert rows[0]["Δ vs its control"] < 0 < rows[1]["Δ vs its control"]  # seed 1 drops more than its control
    assert [rows[0][c] for c in ("encoder heads kept", "BLEU", "tokens/s masked", "tokens/s pruned",
                                 "speed-up measured", "speed-up predicted (FLOPs)", "same translations")] == \
        ["2/4", 29.5, 110.0, 121.0, 1.1, 1.2, "yes"]
    # without a control of its own seed: no ΔBLEU (not another seed's); a changed translation is shown
    assert [rows[2][c] for c in ("Δ vs its control", "95% CI low", "same translations")] == ["", "", "NO"]
    assert "cpu, 12 sentences of test, beam 5, batch 32, median of 2 interleaved rounds" in table.note


def test_a_speed_file_of_a_model_without_result_is_named():
    with pytest.raises(MissingInput, match="speed/enc_l0_0.5_conv_s1"):
        decode_speed_table(RESULTS, translations(), {"enc_l0_0.5_conv_s1": speed_file("enc_l0_0.5_conv_s1", 1, 2, 2)})


def test_the_report_has_the_table_where_speeds_were_measured(tmp_path):
    measured, unmeasured = tmp_path / "measured", tmp_path / "unmeasured"
    for folder in (measured, unmeasured):
        write_results_dir(str(folder), with_trace=False, results=RESULTS)
        for name, (hypotheses, _) in translations().items():
            (folder / "results" / name / "generate.txt").write_text("".join(
                f"S-{i}\tsource {i}\nT-{i}\t{ref}\nH-{i}\t-0.1\tx\nD-{i}\t-0.1\t{hyp}\n"
                for i, (hyp, ref) in enumerate(zip(hypotheses, REFERENCES))))
    for name, report in SPEEDS.items():
        (measured / "speed" / name).mkdir(parents=True)
        (measured / "speed" / name / "decode_speed.json").write_text(json.dumps(report))
    for folder in (measured, unmeasured):
        build_report(str(folder))
    title = "Decoding speed of the pruned models"
    assert title in (measured / "tables.md").read_text() and "| enc_l0_0.01_conv_s2 | 2 | 2/4 |" in \
        (measured / "tables.md").read_text()
    assert title not in (unmeasured / "tables.md").read_text()
