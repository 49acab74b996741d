"""`fairseq-heads stats --rare-outside-top N` (the paper's rare-word filter, by frequency rank):
the sentences it scores are exactly those whose rarest source token lies outside the N most
frequent types of the source side's training data (stats/token_counts.py), counted here from
the binarised train and valid sets directly; bad ranks fail in one line, exit 2, before the work."""
import json

import pytest

from fairseq_heads import cli

QUICK = ["--cpu", "--log-format", "none", "--bootstrap-replicates", "5", "--max-tokens", "800",
         "--metrics", "rare"]


def training_counts(data_bin, dictionary):
    """{symbol: count} of the source side's training tokens (0 for a type never seen)."""
    from collections import Counter

    from fairseq.data import data_utils

    train = data_utils.load_indexed_dataset(str(data_bin / "train.src-tgt.src"), dictionary)
    seen = Counter(int(t) for i in range(len(train)) for t in train[i])
    return {dictionary[i]: seen.get(i, 0) for i in range(dictionary.nspecial, len(dictionary))}


def sentences_outside_top(toy_data_bin, top_n):
    """How many valid sentences (>= 2 source tokens) have a rarest token outside the top N."""
    from fairseq.data import Dictionary, data_utils

    data_bin = toy_data_bin.data_bin
    dictionary = Dictionary.load(str(data_bin / "dict.src.txt"))
    counts = training_counts(data_bin, dictionary)
    ordinary = sorted((c for s, c in counts.items() if not s.startswith("madeupword")), reverse=True)
    nth = ordinary[top_n - 1]  # outside the top N = strictly less frequent than the N-th type
    dataset = data_utils.load_indexed_dataset(str(data_bin / "valid.src-tgt.src"), dictionary)
    scored = 0
    for i in range(len(dataset)):
        source = dataset[i][:-1]  # without the EOS
        if len(source) >= 2 and min(counts[dictionary[int(t)]] for t in source) < nth:
            scored += 1
    return scored, len(dataset)


def test_scores_exactly_the_sentences_whose_rarest_token_is_outside_the_top_n(
        toy_data_bin, trained_checkpoint, tmp_path):
    top_n = 100
    expected, total = sentences_outside_top(toy_data_bin, top_n)
    assert 0 < expected < total  # the filter must matter on this data for the test to mean anything
    out_dir = tmp_path / "out"
    assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint, "--out-dir",
                     str(out_dir), *QUICK, "--rare-outside-top", str(top_n)]) == 0
    doc = json.loads((out_dir / "heads.json").read_text())
    assert doc["meta"]["rare_outside_top"] == top_n
    assert doc["meta"]["rare_counts"]["source"] == "train"  # not the joined dictionary's counts
    rows = [r for r in doc["heads"] if r["type"] in ("enc-self", "enc-dec")]
    assert rows and all(r["rare_share_count"] == expected for r in rows)
    unfiltered = tmp_path / "all"
    assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint, "--out-dir",
                     str(unfiltered), *QUICK]) == 0
    doc = json.loads((unfiltered / "heads.json").read_text())
    assert doc["meta"]["rare_outside_top"] is None
    assert all(r["rare_share_count"] > expected for r in doc["heads"] if r["type"] == "enc-self")


@pytest.mark.parametrize("value", ["0", "-3", "five", "2.5"])
def test_a_rank_that_is_not_a_positive_integer_fails_before_the_work(
        value, toy_data_bin, trained_checkpoint, tmp_path, capsys, monkeypatch):
    import fairseq_heads.stats as stats_module

    monkeypatch.setattr(stats_module, "compute_head_statistics",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("the work started")))
    assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint, "--out-dir",
                     str(tmp_path / "out"), *QUICK, "--rare-outside-top", value]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--rare-outside-top: expected a frequency rank" in lines[0], lines


def test_a_rank_beyond_the_vocabulary_fails_in_one_line(toy_data_bin, trained_checkpoint, tmp_path, capsys):
    assert cli.main(["stats", str(toy_data_bin.data_bin), "--path", trained_checkpoint, "--out-dir",
                     str(tmp_path / "out"), *QUICK, "--rare-outside-top", "100000"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--rare-outside-top 100000: the dictionary has" in lines[0], lines
    assert not (tmp_path / "out").exists()
