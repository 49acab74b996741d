"""Running an imported translation model and its Hugging Face original on the same batch: the
HF batch right-padded with an attention mask (HF's convention), ours left-padded with fairseq's
start symbol (fairseq's), both mapped through `import-hf`'s vocabulary maps."""
from typing import NamedTuple

import torch

from fairseq_heads.checkpoints import load_model_and_task
from fairseq_heads.hf.import_translation import import_translation
from hf_translation.hf_models import LANG_TOKENS, VOCAB, hf_model, save_hf_model

START = {"marian": VOCAB - 1, "fsmt": 2, "m2m_100": 2}  # HF's decoder_start_token_id
EOS = {"marian": 0, "fsmt": 2, "m2m_100": 2}


class Converted(NamedTuple):
    kind: str
    hf: object
    model: object
    task: object
    result: object
    hf_dir: str
    out_dir: str

    def source_index(self):
        return torch.tensor(self.result.source.hf_to_fairseq)

    def target_index(self):
        return torch.tensor(self.result.target.hf_to_fairseq)


def convert(kind: str, work, tied: bool = True) -> Converted:
    hf = hf_model(kind, tied)
    hf_dir = save_hf_model(hf, kind, work / "hf")
    result = import_translation(hf_dir, str(work / "out"))
    model, task = load_model_and_task(str(work / "out" / "checkpoint.pt"), {"data": str(work / "out")})
    return Converted(kind, hf, model.eval(), task, result, hf_dir, str(work / "out"))


class Batch(NamedTuple):
    hf_src: torch.Tensor  # right-padded
    hf_mask: torch.Tensor
    hf_prev: torch.Tensor  # decoder input: start token, then target tokens
    src: torch.Tensor  # fairseq: left-padded
    src_lengths: torch.Tensor
    prev: torch.Tensor  # fairseq: eos, then target tokens


def content_ids(kind: str, vocab: int, n: int, g: torch.Generator) -> torch.Tensor:
    """Ordinary tokens: Marian's specials are </s>=0, <unk>=1, <pad>=last; the others' 0..3."""
    low, high = (2, vocab - 1) if kind == "marian" else (4, vocab - (len(LANG_TOKENS) if kind == "m2m_100" else 0))
    return torch.randint(low, high, (n,), generator=g)


def make_batch(converted: Converted, lengths=(9, 6, 4), target_length=7, seed=0) -> Batch:
    kind, hf = converted.kind, converted.hf
    source_rows = hf.get_input_embeddings().weight.size(0)
    target_rows = hf.get_output_embeddings().weight.size(0)
    pad_hf, eos_hf = hf.config.pad_token_id, EOS[kind]
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    hf_src = torch.full((len(lengths), width), pad_hf)
    src = torch.full((len(lengths), width), 1)
    source_index, target_index = converted.source_index(), converted.target_index()
    for row, n in enumerate(lengths):
        ids = torch.cat([content_ids(kind, source_rows, n - 1, g), torch.tensor([eos_hf])])
        hf_src[row, :n] = ids
        src[row, width - n:] = source_index[ids]
    targets = torch.stack([content_ids(kind, target_rows, target_length - 1, g) for _ in lengths])
    hf_prev = torch.cat([torch.full((len(lengths), 1), START[kind]), targets], dim=1)
    prev = torch.cat([torch.full((len(lengths), 1), 2), target_index[targets]], dim=1)
    return Batch(hf_src, hf_src.ne(pad_hf).long(), hf_prev, src, torch.tensor(lengths), prev)


def hf_lprobs(hf, batch: Batch) -> torch.Tensor:
    with torch.no_grad():
        logits = hf(input_ids=batch.hf_src, attention_mask=batch.hf_mask,
                    decoder_input_ids=batch.hf_prev, use_cache=False).logits
    return torch.log_softmax(logits.float(), dim=-1)


def full_lprobs(model, batch: Batch) -> torch.Tensor:
    with torch.no_grad():
        out = model(batch.src, batch.src_lengths, batch.prev)
        return model.get_normalized_probs(out, log_probs=True)


def incremental_lprobs(model, batch: Batch) -> torch.Tensor:
    """One target token at a time with fairseq's incremental state, as its generator feeds them."""
    state, steps = {}, []
    with torch.no_grad():
        encoder_out = model.encoder(batch.src, src_lengths=batch.src_lengths)
        for t in range(batch.prev.size(1)):
            out = model.decoder(batch.prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
            steps.append(model.get_normalized_probs(out, log_probs=True))
    return torch.cat(steps, dim=1)


def fairseq_translate(converted: Converted, batch: Batch, beam: int, max_len: int, prefix=None):
    """Best hypothesis per sentence, as HF ids (ending with HF's eos where fairseq ended it)."""
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([converted.model], converted.task.target_dictionary, beam_size=beam,
                                  max_len_a=0, max_len_b=max_len, min_len=1, len_penalty=1.0)
    sample = {"net_input": {"src_tokens": batch.src, "src_lengths": batch.src_lengths}}
    with torch.no_grad():
        hypos = generator.generate([converted.model], sample, prefix_tokens=prefix)
    to_hf = {index: hf_id for hf_id, index in enumerate(converted.result.target.hf_to_fairseq)}
    return [[to_hf[int(t)] for t in sentence[0]["tokens"]] for sentence in hypos]


class EndAtMaxLength:
    """fairseq's rule at its last step: only eos, with its own log-probability (HF's
    `forced_eos_token_id` gives it log-prob 0 instead, which ranks beams differently)."""

    def __init__(self, eos: int, last_length: int):
        self.eos, self.last_length = eos, last_length

    def __call__(self, input_ids, scores):
        if input_ids.size(1) == self.last_length:
            keep = scores[:, self.eos].clone()
            scores = torch.full_like(scores, float("-inf"))
            scores[:, self.eos] = keep
        return scores


def hf_translate(converted: Converted, batch: Batch, beam: int, max_len: int, forced_bos=None):
    """HF generate with fairseq's search settings: stop at `beam` finished hypotheses, scores
    normalised by length, eos not first, <pad> never generated, eos at the latest after
    `max_len` tokens (fairseq's max_len_b)."""
    from transformers import LogitsProcessorList

    hf = converted.hf
    eos = EOS[converted.kind]
    with torch.no_grad():
        out = hf.generate(input_ids=batch.hf_src, attention_mask=batch.hf_mask, num_beams=beam,
                          logits_processor=LogitsProcessorList([EndAtMaxLength(eos, max_len + 1)]),
                          do_sample=False, max_new_tokens=max_len + 1, min_new_tokens=1,
                          early_stopping=True, length_penalty=1.0, no_repeat_ngram_size=0,
                          suppress_tokens=[hf.config.pad_token_id], forced_bos_token_id=forced_bos,
                          forced_eos_token_id=None, decoder_start_token_id=START[converted.kind],
                          use_cache=converted.kind != "fsmt")  # HF 4.57's FSMT cache is broken
    pad = hf.config.pad_token_id
    sentences = []
    for row in out[:, 1:].tolist():  # drop the start token
        tokens = []
        for t in row:
            if t == pad and eos != pad:
                break
            tokens.append(t)
            if t == eos:
                break
        sentences.append(tokens)
    return sentences


def hf_sequence_scores(converted: Converted, batch: Batch, row: int, tokens) -> float:
    """HF's own forward pass (no generate): the mean log-prob of `tokens` (HF ids, eos last)
    after the start token, fairseq's length-normalised hypothesis score."""
    decoder = torch.tensor([[START[converted.kind]] + list(tokens[:-1])])
    with torch.no_grad():
        logits = converted.hf(input_ids=batch.hf_src[row:row + 1], attention_mask=batch.hf_mask[row:row + 1],
                              decoder_input_ids=decoder, use_cache=False).logits
    lprobs = torch.log_softmax(logits.float(), dim=-1)[0]
    return float(lprobs[torch.arange(len(tokens)), torch.tensor(tokens)].mean())
