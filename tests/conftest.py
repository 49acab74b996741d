"""Shared pytest fixtures."""
import logging

import pytest

TOY_SIZES = {"train": 2000, "valid": 100, "test": 100}
TOY_VOCAB_SIZE = 500


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "numerics: compares floating-point computations with tolerances from the dtype "
        "and the size of the sums; `make test-kernels` runs these again under other CPU kernel sets")


@pytest.fixture(scope="session")
def toy_data_bin(tmp_path_factory):
    """A small synthetic corpus run through the whole data pipeline, once per session.

    Returns a `fairseq_heads.data.prepare.PrepareResult`; the fields tests need:
      data_bin     fairseq data-bin dir: dict.src.txt, dict.tgt.txt (joined), {train,valid,test}.src-tgt.*
                   and the gold source parses {split}.conllu (+ word alignments {split}.align)
      spm_model    joint sentencepiece BPE model (vocab 500)
      raw_dir      generated corpus: {split}.src/.tgt/.conllu/.align, lexicon.tsv
      clean_dir    the text as binarised, before sentencepiece (references for BLEU)
      src_lang, tgt_lang   "src" and "tgt" (fairseq --source-lang/--target-lang)
      conllu       split -> data_bin/{split}.conllu
      config       the PrepareConfig that built it (seed 1; 2000/100/100 sentences)
    Treat it as read-only: other tests share it.
    """
    from fairseq_heads.data.prepare import PrepareConfig, prepare

    config = PrepareConfig(
        work_dir=tmp_path_factory.mktemp("toy_data") / "work",
        src_lang="src",
        tgt_lang="tgt",
        synthetic=True,
        synthetic_sizes=dict(TOY_SIZES),
        seed=1,
        vocab_size=TOY_VOCAB_SIZE,
        workers=1,
    )
    return prepare(config)


@pytest.fixture(autouse=True)
def root_logging_as_it_was():
    """Commands run in-process configure logging (basicConfig, force=True in `prepare`, fairseq's
    CLIs at import): a handler they add is bound to the stream of the test that ran them, which
    pytest closes afterwards, and a later test's log record would fail on it ("I/O operation on
    closed file"). Remove what a test added to the root logger (pytest's own handlers excepted)."""
    root = logging.getLogger()
    for handler in list(root.handlers):  # one a session fixture added, its stream closed since
        stream = getattr(handler, "stream", None)
        if stream is not None and getattr(stream, "closed", False):
            root.removeHandler(handler)
    before, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)
