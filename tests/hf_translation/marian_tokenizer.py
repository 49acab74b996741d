"""A tiny random Marian model with a real tokenizer, as OPUS-MT ships them: source.spm and
target.spm (sentencepiece models trained here on the text given), one vocab.json holding the
pieces of both (</s> first, <unk>, the pieces, then <pad> last) and the model built for that
vocabulary by `hf_models.hf_model` (random weights, randomised norms and final_logits_bias).
Nothing is downloaded; what `binarise-hf` and the hf_translation recipe read."""
import json
import os

from hf_translation.hf_models import hf_config, hf_model

MULTILINGUAL_CODE = ">>de<<"  # a target-language code, as multilingual OPUS-MT vocabularies hold them


def train_spm(text_file: str, prefix: str, pieces: int) -> str:
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        input=text_file, model_prefix=prefix, vocab_size=pieces, model_type="unigram", character_coverage=1.0,
        hard_vocab_limit=False, bos_id=-1, eos_id=-1, unk_id=0, num_threads=1, minloglevel=2)
    return prefix + ".model"


def spm_pieces(model_file: str):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=model_file)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i))]


def save_marian_with_tokenizer(directory, source_text: str, target_text: str, pieces: int = 120, seed: int = 0):
    """`directory` gets config.json, model.safetensors, source.spm, target.spm, vocab.json and
    tokenizer_config.json; returns its path."""
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    scratch = os.path.join(directory, ".spm")
    os.makedirs(scratch, exist_ok=True)
    models = {name: train_spm(text, os.path.join(scratch, name), pieces)
              for name, text in (("source", source_text), ("target", target_text))}
    vocab = ["</s>", "<unk>", MULTILINGUAL_CODE]
    for model in models.values():
        vocab += [p for p in spm_pieces(model) if p not in vocab]
    vocab.append("<pad>")
    config = hf_config("marian")
    n = len(vocab)
    config.vocab_size = config.decoder_vocab_size = n
    config.pad_token_id = config.decoder_start_token_id = n - 1
    model = hf_model("marian", config=config, seed=seed)
    model.save_pretrained(directory, safe_serialization=True)
    for name, path in models.items():
        os.replace(path, os.path.join(directory, f"{name}.spm"))
    for name in os.listdir(scratch):
        os.remove(os.path.join(scratch, name))
    os.rmdir(scratch)
    with open(os.path.join(directory, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({s: i for i, s in enumerate(vocab)}, f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizer_class": "MarianTokenizer", "model_max_length": 512}, f)
    return directory, model
