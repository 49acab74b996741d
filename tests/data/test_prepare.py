"""The data pipeline: end to end on the toy corpus, idempotence, failures, bad input, cleaning."""

import dataclasses
import gzip
import os
import shutil
from pathlib import Path

import conllu
import pytest
import sentencepiece as spm

from fairseq_heads.commands import prepare as prepare_command
from fairseq_heads.data import synthetic_corpus
from fairseq_heads.data.prepare import (
    STEPS,
    DataPrepError,
    FilePair,
    PrepareConfig,
    WorkPaths,
    filter_pairs,
    normalise,
    prepare,
    read_lines,
    run_clean,
    run_raw,
    run_spm_train,
)


def lines(path: Path):
    return path.read_text(encoding="utf-8").splitlines()


def all_files(root: Path):
    return {p.relative_to(root): p.stat().st_mtime_ns for p in sorted(root.rglob("*")) if p.is_file()}


def copy_work(toy, tmp_path) -> PrepareConfig:
    """A private copy of the shared toy work dir, and the config that built it, pointed at the copy."""
    work = tmp_path / "work"
    shutil.copytree(toy.work_dir, work)
    return dataclasses.replace(toy.config, work_dir=work)


# --------------------------------------------------------------------------- end to end


def test_end_to_end_outputs(toy_data_bin):
    toy = toy_data_bin
    assert toy.steps_run == list(STEPS)
    assert (toy.src_lang, toy.tgt_lang) == ("src", "tgt")
    bin_dir = toy.data_bin
    src_dict, tgt_dict = (bin_dir / "dict.src.txt").read_text(), (bin_dir / "dict.tgt.txt").read_text()
    assert src_dict == tgt_dict  # --joined-dictionary
    assert 50 < len(src_dict.splitlines()) <= 500
    for split in ("train", "valid", "test"):
        for lang in ("src", "tgt"):
            for ext in ("bin", "idx"):
                assert (bin_dir / f"{split}.src-tgt.{lang}.{ext}").stat().st_size > 0
    assert toy.spm_model.is_file()
    assert not list(toy.work_dir.glob(".*.tmp-*")) and not list(toy.work_dir.glob(".*.old-*"))


def test_end_to_end_conllu_follows_the_text(toy_data_bin):
    toy = toy_data_bin
    assert set(toy.conllu) == {"train", "valid", "test"}
    for split, path in toy.conllu.items():
        sentences = conllu.parse(path.read_text(encoding="utf-8"))
        text = lines(toy.clean_dir / f"{split}.src")
        assert [s.metadata["text"] for s in sentences] == text
        assert len(lines(toy.data_bin / f"{split}.align")) == len(text)
    assert (toy.raw_dir / "train.conllu").is_file()


def test_end_to_end_pieces_decode_to_clean_text(toy_data_bin):
    toy = toy_data_bin
    model = spm.SentencePieceProcessor(model_file=str(toy.spm_model))
    assert model.get_piece_size() == 500
    for lang in ("src", "tgt"):
        pieces = lines(toy.spm_dir / f"valid.{lang}")
        clean = lines(toy.clean_dir / f"valid.{lang}")
        assert len(pieces) == len(clean) == 100
        assert [model.decode(p.split()) for p in pieces] == clean


def test_synthetic_corpus_loses_nothing_in_cleaning(toy_data_bin):
    report = toy_data_bin.clean_report
    assert report["train"]["kept"] == report["train"]["input"] == 2000
    assert report["valid"]["kept"] == 100


# --------------------------------------------------------------------------- idempotence and failure


def test_rerun_skips_finished_steps(toy_data_bin, tmp_path):
    config = copy_work(toy_data_bin, tmp_path)
    before = all_files(config.work_dir)
    result = prepare(config)
    assert result.steps_run == [] and result.steps_skipped == list(STEPS)
    assert all_files(config.work_dir) == before  # nothing rewritten


def test_failed_step_leaves_no_marker_and_changed_settings_rerun(toy_data_bin, tmp_path):
    config = copy_work(toy_data_bin, tmp_path)
    paths = WorkPaths(config.work_dir)
    raw_mtimes = all_files(paths.raw)
    old_model = paths.spm_model.read_bytes()
    failing = dataclasses.replace(config, vocab_size=300, fairseq_preprocess=shutil.which("false") or "/bin/false")
    with pytest.raises(DataPrepError, match="binarize"):
        prepare(failing)
    # earlier steps are done (the changed vocab size re-ran sentencepiece), binarize is not
    for step in ("raw", "clean", "spm_train", "spm_encode"):
        assert paths.marker(step).is_file(), step
    assert not paths.marker("binarize").exists()
    assert all_files(paths.raw) == raw_mtimes  # upstream of the change: untouched
    assert paths.spm_model.read_bytes() != old_model
    assert not list(config.work_dir.glob(".*.tmp-*"))
    # the failure is not remembered as done: the next run retries binarize (and fails again here)
    with pytest.raises(DataPrepError, match="binarize"):
        prepare(failing)


def test_sentencepiece_training_is_deterministic(toy_data_bin, tmp_path):
    paths = WorkPaths(tmp_path)
    shutil.copytree(toy_data_bin.clean_dir, paths.clean)
    run_spm_train(toy_data_bin.config, paths)
    assert paths.spm_model.read_bytes() == toy_data_bin.spm_model.read_bytes()


# --------------------------------------------------------------------------- bad input


def write(path: Path, text_lines, gz=False):
    data = "".join(l + "\n" for l in text_lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_missing_file_is_named_and_nothing_is_written(tmp_path):
    src = write(tmp_path / "train.en", ["a b"])
    work = tmp_path / "work"
    config = PrepareConfig(work_dir=work, inputs={"train": [FilePair(src, tmp_path / "nope.de")]})
    with pytest.raises(DataPrepError, match="nope.de"):
        prepare(config)
    assert not work.exists()


def test_unequal_line_counts_name_files_and_counts(tmp_path):
    src = write(tmp_path / "train.en.gz", ["a", "b", "c"], gz=True)
    tgt = write(tmp_path / "train.de", ["x", "y"])
    config = PrepareConfig(work_dir=tmp_path / "work", inputs={"train": [FilePair(src, tgt)]})
    with pytest.raises(DataPrepError) as error:
        prepare(config)
    message = str(error.value)
    assert "train.en.gz" in message and "train.de" in message and "3" in message and "2" in message
    assert not (tmp_path / "work").exists()


def test_conllu_must_match_the_source_text(tmp_path):
    files = synthetic_corpus.generate_corpus(tmp_path / "syn", n_train=10, n_valid=3, n_test=3)
    config = PrepareConfig(
        work_dir=tmp_path / "work",
        inputs={"train": [FilePair(files["train"].src, files["train"].tgt)]},
        conllu={"train": files["valid"].conllu},
    )
    with pytest.raises(DataPrepError, match="--train-conllu"):
        prepare(config)


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--train", "only-one-path"], "--train"),
        (["--train", "missing.en,missing.de"], "missing.en"),
        ([], "--train"),
        (["--synthetic", "--src", "x", "--tgt", "x"], "--src and --tgt"),
    ],
)
def test_cli_reports_bad_input_with_nonzero_exit(tmp_path, capsys, argv, fragment):
    code = prepare_command.main(["--work-dir", str(tmp_path / "work")] + argv)
    assert code != 0
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "work").exists()


# --------------------------------------------------------------------------- reading and cleaning


def test_normalise():
    assert normalise("  a\tb\u00a0c  \u3000d ") == "a b c d"
    assert normalise("ｆｕｌｌ\u2028width") == "full width"  # NFKC + line separators
    assert normalise("\r") == ""


def test_read_lines_plain_gzip_and_crlf(tmp_path):
    write(tmp_path / "a.gz", ["x y", "z"], gz=True)
    (tmp_path / "b.txt").write_bytes(b"\xef\xbb\xbfx\r\ny\rz")  # BOM, CRLF, stray CR, no final newline
    assert read_lines(tmp_path / "a.gz") == ["x y", "z"]
    assert read_lines(tmp_path / "b.txt") == ["x\r", "y\rz"]
    (tmp_path / "bad").write_bytes(b"\xff\xfe")
    with pytest.raises(DataPrepError, match="bad"):
        read_lines(tmp_path / "bad")


def test_filter_pairs_counts_reasons():
    pairs = [
        ("a b", "x y"),
        ("a b", "x y"),  # duplicate
        ("", "x"),  # empty
        ("a", "x y z w"),  # ratio 4
        ("a " * 10, "x " * 10),  # too long for max_len 8
        ("c d", "z"),  # ratio 2: kept
    ]
    kept, counts = filter_pairs(pairs, max_len=8, max_ratio=3.0, dedup=True)
    assert kept == [0, 5]
    assert counts == {"input": 6, "kept": 2, "empty": 1, "too_long": 1, "length_ratio": 1, "duplicate": 1}
    kept, counts = filter_pairs(pairs, max_len=8, max_ratio=3.0, dedup=False)
    assert kept == [0, 1, 5] and counts["duplicate"] == 0


def test_clean_drops_train_only_and_filters_conllu_alongside(tmp_path):
    syn = synthetic_corpus.generate_corpus(tmp_path / "syn", n_train=20, n_valid=5, n_test=5)
    src, tgt = lines(syn["train"].src), lines(syn["train"].tgt)
    dirty_src = [src[0].replace(" ", "\t"), src[0], src[1], "", src[2] + " w" * 60] + src[3:]
    dirty_tgt = [tgt[0] + " ", tgt[0], tgt[1], "x", tgt[2]] + tgt[3:]
    blocks = [b for b in syn["train"].conllu.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    dirty_blocks = [blocks[0], blocks[0], blocks[1], blocks[0], blocks[2]] + blocks[3:]
    inputs_dir = tmp_path / "in"
    inputs_dir.mkdir()
    valid_src = write(inputs_dir / "valid.en.gz", ["", "a\u00a0b"] + lines(syn["valid"].src)[2:], gz=True)
    config = PrepareConfig(
        work_dir=tmp_path / "work",
        src_lang="en",
        tgt_lang="de",
        inputs={
            "train": [FilePair(write(inputs_dir / "train.en", dirty_src), write(inputs_dir / "train.de.gz", dirty_tgt, gz=True))],
            "valid": [FilePair(valid_src, syn["valid"].tgt)],
        },
        conllu={"train": write(inputs_dir / "train.conllu", ["\n\n".join(dirty_blocks)])},
    )
    paths = WorkPaths(config.work_dir)
    paths.root.mkdir()
    run_raw(config, paths)
    assert lines(paths.raw / "train.en") == dirty_src
    report = run_clean(config, paths)
    assert report["train"] == {"input": 22, "kept": 19, "empty": 1, "too_long": 0, "length_ratio": 1, "duplicate": 1}
    kept = [0, 1] + list(range(3, 20))  # src[2] went with the length-ratio outlier
    assert lines(paths.clean / "train.en") == [src[i] for i in kept]
    assert lines(paths.clean / "train.de") == [tgt[i] for i in kept]
    parsed = conllu.parse((paths.clean / "train.conllu").read_text(encoding="utf-8"))
    assert [s.metadata["text"] for s in parsed] == [src[i] for i in kept]
    # valid: normalised, never dropped, even the empty line
    assert lines(paths.clean / "valid.en")[:2] == ["", "a b"]
    assert report["valid"] == {"input": 5, "kept": 5}


def test_prepared_folders_and_files_are_readable_by_others(toy_data_bin, tmp_path):
    """Under umask 022: folders 0755, files 0644 (as mkdir / open make them), for the steps rerun
    here (sentencepiece encoding and binarisation) as for any other."""
    import stat

    config = copy_work(toy_data_bin, tmp_path)
    paths = WorkPaths(config.work_dir)
    for step in ("spm_encode", "binarize"):
        paths.marker(step).unlink()
    previous = os.umask(0o022)
    try:
        result = prepare(config)
    finally:
        os.umask(previous)
    assert result.steps_run == ["spm_encode", "binarize"]
    for folder in (paths.spm, result.data_bin):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}
        assert modes and set(modes.values()) == {0o644}, modes
    for step in ("spm_encode", "binarize"):
        assert stat.S_IMODE(paths.marker(step).stat().st_mode) == 0o644
