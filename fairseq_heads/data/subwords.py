"""Steps spm_train and spm_encode of the data pipeline (data/prepare.py): one joint
sentencepiece BPE model trained on the clean training text of both sides, and every split
encoded with it."""
from __future__ import annotations

import io

from fairseq_heads.files import write_bytes_atomic, write_text_atomic

from .prepare_config import PrepareConfig, WorkPaths
from .text_files import DataPrepError, StepFolder, read_lines, write_lines


def spm_train_fingerprint(config: PrepareConfig) -> dict:
    return {"vocab_size": config.vocab_size, "input_sentence_size": config.input_sentence_size,
            "seed": config.seed, "model_type": "bpe"}


def run_spm_train(config: PrepareConfig, paths: WorkPaths) -> None:
    """Step spm: a joint sentencepiece model trained on the clean training text."""
    import sentencepiece as spm

    def sentences():
        for lang in config.langs:
            yield from read_lines(paths.clean / f"train.{lang}")

    # Sentences and model go through Python, not file names: a model trained from files
    # records their paths, so the same data in another work dir would give other bytes.
    spm.set_random_generator_seed(config.seed)  # makes the sentence sampling reproducible
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=model,
            vocab_size=config.vocab_size,
            model_type="bpe",
            character_coverage=1.0,
            input_sentence_size=config.input_sentence_size,
            shuffle_input_sentence=True,
            num_threads=max(1, config.workers),
            pad_id=-1,
            minloglevel=2,  # keep the trainer's progress chatter off stderr
        )
    except RuntimeError as e:
        raise DataPrepError(f"sentencepiece training failed (--vocab-size {config.vocab_size}?): {e}") from None
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = "".join(f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(processor.get_piece_size()))
    write_bytes_atomic(paths.spm_model, model.getvalue())
    write_text_atomic(paths.spm_vocab, vocab)


def run_spm_encode(config: PrepareConfig, paths: WorkPaths) -> None:
    import sentencepiece as spm

    model = spm.SentencePieceProcessor(model_file=str(paths.spm_model))
    out = StepFolder(paths.root, "spm")
    try:
        for split in config.splits:
            for lang in config.langs:
                lines = read_lines(paths.clean / f"{split}.{lang}")
                pieces = model.encode(lines, out_type=str) if lines else []
                write_lines(out.path / f"{split}.{lang}", [" ".join(p) for p in pieces])
        out.publish(paths.spm)
    finally:
        out.discard()
