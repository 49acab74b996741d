"""The formation curve (pipeline/formation.py, report/formation.py) on a tiny model trained on the toy
corpus with every interval checkpoint kept: one point per checkpoint, each computed once, and rows that
say what the points' heads tables say."""
import json
import os

import pytest
import torch

from fairseq_heads.pipeline.formation import (FormationSettings, epoch_length, formation_points,
                                              interval_checkpoints)
from fairseq_heads.report.formation import (COLUMNS, POINT_FILE, formation_csv, formation_markdown, formation_rows,
                                            plot_formation)

from core.helpers import PLAIN_TRAINING, run_cli, toy_train_args

UPDATES = (10, 20, 30)


@pytest.fixture(scope="module")
def training(toy_data_bin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("formation_train")
    process = run_cli(toy_train_args(toy_data_bin.data_bin, save_dir, *PLAIN_TRAINING,
                                     "--max-update", UPDATES[-1], "--validate-interval-updates", 10,
                                     "--save-interval-updates", 10, "--keep-interval-updates", -1))
    assert process.returncode == 0, process.stderr[-3000:]
    log = save_dir / "train.log"
    log.write_text(process.stdout + process.stderr)
    return save_dir, str(log)


@pytest.fixture(scope="module")
def points(toy_data_bin, training, tmp_path_factory):
    save_dir, log = training
    out = tmp_path_factory.mktemp("formation_points")
    settings = FormationSettings(source_lang="src", target_lang="tgt", replicates=5, bleu_sentences=40)
    parsed_set = (str(toy_data_bin.data_bin), str(toy_data_bin.conllu["test"]))
    done = formation_points(str(save_dir), str(out), str(toy_data_bin.data_bin), parsed_set, settings, log,
                            progress=None)
    return out, done, settings, parsed_set


def test_one_point_per_kept_checkpoint_each_computed_once(toy_data_bin, training, points):
    save_dir, log = training
    out, done, settings, parsed_set = points
    assert [update for update, _ in interval_checkpoints(str(save_dir))] == list(UPDATES)
    assert done == list(UPDATES)
    assert formation_points(str(save_dir), str(out), str(toy_data_bin.data_bin), parsed_set, settings, log,
                            progress=None) == []
    # a point cut short (no point.json) is redone, the others are not
    os.remove(out / "20" / POINT_FILE)
    assert formation_points(str(save_dir), str(out), str(toy_data_bin.data_bin), parsed_set, settings, log,
                            progress=None) == [20]


def test_points_record_the_checkpoint_and_its_training(training, points):
    save_dir, log = training
    out, _, _, _ = points
    length = epoch_length(log)
    assert length and length > 0
    for update in UPDATES:
        point = json.loads((out / str(update) / POINT_FILE).read_text())
        checkpoint = torch.load(save_dir / point["checkpoint"], map_location="cpu", weights_only=False)
        assert point["update"] == update == checkpoint["optimizer_history"][-1]["num_updates"]
        assert point["valid_loss"] == pytest.approx(checkpoint["extra_state"]["val_loss"])
        assert point["epoch"] == pytest.approx(update / length)
        assert 0.0 <= point["bleu"] <= 100.0 and point["settings"]["bleu_sentences"] == 40


def test_rows_say_what_the_heads_tables_say(points, tmp_path):
    out, _, _, _ = points
    rows = formation_rows(str(out))
    assert [row["update"] for row in rows] == list(UPDATES)
    for row in rows:
        heads = json.loads((out / str(row["update"]) / "stats" / "heads.json").read_text())["heads"]
        for attention_type in ("enc-self", "dec-self", "enc-dec"):
            shares = [h["positional_share"] for h in heads
                      if h["type"] == attention_type and h["positional_share"] is not None]
            # positional offsets are defined within one sequence: self-attention only
            assert (attention_type == "enc-dec") == (not shares)
            assert row[f"positional_best_{attention_type}"] == (pytest.approx(max(shares)) if shares else None)
        confidence = [h["confidence"] for h in heads if h["type"] == "enc-dec"]
        assert row["enc_dec_confidence_mean"] == pytest.approx(sum(confidence) / len(confidence))
        syntax = json.loads((out / str(row["update"]) / "syntax" / "heads.json").read_text())["heads"]
        gains = [h["syntactic_best_gain"] for h in syntax if h["type"] == "enc-self"]
        assert row["syntactic_best_gain"] == pytest.approx(max(gains))
        rare = [h["rare_share"] for h in heads if h.get("rare_share") is not None]
        assert row["rare_best_share"] == pytest.approx(max(rare))
    csv_text = formation_csv(rows)
    assert csv_text.splitlines()[0].split(",") == list(COLUMNS) and len(csv_text.splitlines()) == 1 + len(UPDATES)
    table = formation_markdown(rows).splitlines()
    assert len(table) == 2 + len(UPDATES) and all(line.count("|") == table[0].count("|") for line in table)
    plot_formation(rows, str(tmp_path / "formation.png"))
    assert (tmp_path / "formation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_report_shows_the_formation_of_a_results_folder(points, tmp_path):
    import shutil

    from fairseq_heads.report.build import build_report

    out, _, _, _ = points
    results = tmp_path / "results"
    shutil.copytree(out, results / "formation_points")
    build_report(str(results))
    tables = (results / "tables.md").read_text()
    section = tables.split("## 8. When the head functions formed", 1)[1]
    assert [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")][1:] == \
        [str(update) for update in UPDATES]
    assert "greedy, the first 40 sentences of 'valid'" in section
    assert (results / "figures" / "formation.png").is_file()


def test_the_report_shows_each_baseline_seed_of_a_results_folder(points, tmp_path):
    """A folder of two baselines (seed 1's `formation_points`, seed 3's `formation_points_s3`, the
    steps' suffixes): a table per seed, in seed order, and one figure."""
    import shutil

    from fairseq_heads.report.build import build_report
    from fairseq_heads.report.formation import points_folders

    out, _, _, _ = points
    results = tmp_path / "results"
    shutil.copytree(out, results / "formation_points_s3")
    shutil.copytree(out, results / "formation_points")
    shutil.rmtree(results / "formation_points" / str(UPDATES[-1]))  # seed 1 has a point fewer
    (results / "formation_points_other").mkdir()  # not a seed's folder
    assert list(points_folders(str(results))) == ["seed 1", "seed 3"]
    build_report(str(results))
    section = (results / "tables.md").read_text().split("## 8. When the head functions formed", 1)[1]
    first, third = section.split("(seed 1)", 1)[1].split("(seed 3)", 1)
    updates = [[line.split("|")[1].strip() for line in part.splitlines() if line.startswith("| ")][1:]
               for part in (first, third)]
    assert updates == [[str(u) for u in UPDATES[:-1]], [str(u) for u in UPDATES]]
    assert (results / "figures" / "formation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
