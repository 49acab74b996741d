"""Michel et al. (2019)'s pruning curve: remove the lowest-scoring heads step by step, BLEU at each
(perplexity for a decoder-only language model).

Heads are switched off with a head mask (fixed gates, `head_masks.apply_head_mask`): the same
function as the physically pruned model, without rebuilding anything between steps. Generation
runs in-process through fairseq's own task, batch iterator and SequenceGenerator; BLEU is
sacreBLEU's corpus BLEU (default 13a tokenisation) on detokenised (BPE-removed) text, as
`fairseq-generate --scoring sacrebleu` computes it. A language model's score is the perplexity
of the subset's blocks, teacher forced: 2 ** (summed base-2 NLL / target tokens), what
`fairseq-eval-lm` reports with its default context window (0).

Rescoring (optional, after every step) uses the gradient metric of Michel et al.:
|∂L/∂ξ_h| for the head mask ξ, L the label-smoothing-free NLL of the references, accumulated per
batch (not per sentence, a cheaper approximation) and L2-normalised within each layer.
"""
import csv
import io
import math
from argparse import Namespace
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq import utils
from fairseq.data import iterators
from torch import nn

from ..bleu import corpus_bleu
from ..checkpoints import is_language_model
from ..gating.gated_attention import iter_gates
from ..gating.head_masks import apply_head_mask
from ..stats.metrics.grad import normalise_layers_l2
from ..stats.metrics.lrp import reference_nll
from .importance import HeadScores
from .physical import HeadPruningError


class CurvePoint(NamedTuple):
    heads_removed: int
    heads_kept: int
    score: float  # BLEU, or perplexity for a language model (the CSV names its column so)
    signature: str
    removed: str  # the heads removed so far, "type:layer:head;..."


PERPLEXITY_SIGNATURE = "perplexity: 2**(base-2 NLL per target token), blocks teacher forced (fairseq-eval-lm, context window 0)"


def parse_steps(text: str, total_heads: int) -> List[int]:
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise HeadPruningError(f"--steps: expected comma-separated head counts, got {text!r}") from None
    if not steps or steps != sorted(set(steps)) or steps[0] < 0 or steps[-1] > total_heads:
        raise HeadPruningError(f"--steps: expected increasing numbers of heads to remove in "
                               f"0..{total_heads}, got {text!r}")
    return steps


def batches(task, subset: str, model: nn.Module, batch_size: Optional[int],
            limit: Optional[int] = None, max_tokens: Optional[int] = None) -> Iterator[dict]:
    """The subset's sentences (the first `limit` by id), batched by length, in a fixed order, on
    the model's device (a batch is full at `batch_size` sentences or `max_tokens` tokens)."""
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    indices = dataset.ordered_indices()
    if limit is not None:
        indices = indices[indices < limit]
    indices, _ = dataset.filter_indices_by_size(
        indices, utils.resolve_max_positions(task.max_positions(), model.max_positions()))
    batch_sampler = dataset.batch_by_size(indices, max_tokens=max_tokens, max_sentences=batch_size)
    samples = iterators.EpochBatchIterator(dataset, dataset.collater, batch_sampler,
                                           num_workers=0).next_epoch_itr(shuffle=False)
    on_cuda = next(model.parameters()).is_cuda
    return (utils.move_to_cuda(sample) if on_cuda else sample for sample in samples)


def translate(model: nn.Module, task, subset: str, beam: int = 5, batch_size: Optional[int] = 64,
              remove_bpe: Optional[str] = "sentencepiece", limit: Optional[int] = None,
              max_len_b: int = 200, max_tokens: Optional[int] = None):
    """(hypotheses, references) as detokenised strings, in sentence-id order."""
    model.eval()
    generator = task.build_generator([model], Namespace(beam=beam, max_len_b=max_len_b))
    tgt_dict = task.target_dictionary
    strip = generator.symbols_to_strip_from_output if hasattr(generator, "symbols_to_strip_from_output") else None
    out = {}
    with torch.no_grad():
        for sample in batches(task, subset, model, batch_size, limit, max_tokens):
            hypos = task.inference_step(generator, [model], sample)
            for i, sentence_id in enumerate(sample["id"].tolist()):
                reference = utils.strip_pad(sample["target"][i], tgt_dict.pad()).cpu()
                out[sentence_id] = (
                    tgt_dict.string(hypos[i][0]["tokens"].int().cpu(), remove_bpe,
                                    extra_symbols_to_ignore=strip),
                    tgt_dict.string(reference, remove_bpe, escape_unk=True,
                                    extra_symbols_to_ignore=strip))
    ids = sorted(out)
    return [out[i][0] for i in ids], [out[i][1] for i in ids]


def block_losses(model: nn.Module, task, subset: str, batch_size: Optional[int] = 16,
                 limit: Optional[int] = None, max_tokens: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Each block of `subset`, in sample-id order: its summed NLL (nats, teacher forced) and its
    target tokens. The perplexity is theirs pooled; a bootstrap over the test set resamples them
    (report/significance.py, `bootstrap_log_perplexity`)."""
    model.eval()
    pad = task.target_dictionary.pad()
    nll, tokens = {}, {}
    with torch.no_grad():
        for sample in batches(task, subset, model, batch_size, limit, max_tokens):
            lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
            target = sample["target"]
            token_nll = -lprobs.float().gather(-1, target.unsqueeze(-1)).squeeze(-1)
            sums = token_nll.masked_fill(target.eq(pad), 0.0).sum(dim=1, dtype=torch.float64).tolist()
            counts = target.ne(pad).sum(dim=1).tolist()
            for sample_id, block_nll, block_tokens in zip(sample["id"].tolist(), sums, counts):
                nll[sample_id], tokens[sample_id] = block_nll, int(block_tokens)
    ids = sorted(nll)
    return np.array([nll[i] for i in ids], dtype=np.float64), np.array([tokens[i] for i in ids], dtype=np.int64)


def perplexity_of_blocks(nll: np.ndarray, tokens: np.ndarray, subset: str = "the subset") -> float:
    """2 ** (base-2 NLL per target token) of blocks' summed NLLs (nats) and token counts."""
    total = int(np.sum(tokens))
    if total == 0:
        raise HeadPruningError(f"subset {subset!r} has no target tokens")
    return float(2.0 ** (float(np.sum(nll)) / total / math.log(2.0)))


def perplexity(model: nn.Module, task, subset: str, batch_size: Optional[int] = 16,
               limit: Optional[int] = None, max_tokens: Optional[int] = None) -> float:
    """2 ** (base-2 NLL per target token) of a language model on `subset` (module docstring)."""
    return perplexity_of_blocks(*block_losses(model, task, subset, batch_size, limit, max_tokens), subset)


def gradient_scores(model: nn.Module, task, subset: str, mask: Dict[str, torch.Tensor],
                    batch_size: int = 16, limit: Optional[int] = None) -> HeadScores:
    """Michel et al.'s |∂L/∂ξ_h| at the current mask (see the module docstring)."""
    apply_head_mask(model, mask)
    gates = [(t, layer, gate) for t, layer, gate in iter_gates(model) if t in mask]
    for _, _, gate in gates:
        gate.fixed_mask.requires_grad_(True)
    totals = {(t, layer): torch.zeros(gate.num_gates) for t, layer, gate in gates}
    model.eval()  # no dropout: the score of the function that is being pruned
    try:
        for sample in batches(task, subset, model, batch_size, limit):
            net_output = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(net_output, log_probs=True)
            loss = reference_nll(lprobs, sample["target"], task.target_dictionary.pad())
            grads = torch.autograd.grad(loss, [gate.fixed_mask for _, _, gate in gates])
            for (t, layer, _), grad in zip(gates, grads):
                totals[(t, layer)] += grad.detach().abs().cpu()
    finally:
        for _, _, gate in gates:
            gate.fixed_mask = gate.fixed_mask.detach()
    return {t: normalise_layers_l2(torch.stack([totals[(t, layer)] for layer in range(mask[t].size(0))]))
            .tolist() for t in mask}


def lowest_kept(scores: HeadScores, mask: Dict[str, torch.Tensor], count: int):
    """The `count` kept heads with the lowest scores (ties: the earlier head first)."""
    kept = [(scores[t][layer][head], i, (t, layer, head))
            for i, (t, layer, head) in enumerate((t, layer, head) for t in scores
                                                  for layer in range(len(scores[t]))
                                                  for head in range(len(scores[t][layer])))
            if mask[t][layer, head]]
    return [address for _, _, address in sorted(kept)[:count]]


def pruning_curve(model: nn.Module, task, subset: str, scores: HeadScores, steps: Sequence[int],
                  rescore: bool = False, beam: int = 5, batch_size: Optional[int] = 64,
                  remove_bpe: Optional[str] = "sentencepiece", limit: Optional[int] = None,
                  rescore_subset: str = "valid", progress=None,
                  max_len_b: int = 200, max_tokens: Optional[int] = None) -> List[CurvePoint]:
    """Remove the lowest-scoring kept heads up to each step and score the model there (BLEU or
    perplexity)."""
    mask = {t: torch.ones(len(rows), len(rows[0]), dtype=torch.bool) for t, rows in scores.items()}
    total = sum(m.numel() for m in mask.values())
    removed: List[tuple] = []
    points = []
    for step in steps:
        while len(removed) < step:
            # Michel et al. remove a batch of heads per step, then re-score (if asked).
            for t, layer, head in lowest_kept(scores, mask, step - len(removed)):
                mask[t][layer, head] = False
                removed.append((t, layer, head))
        apply_head_mask(model, mask)
        if is_language_model(model):
            score, signature = (perplexity(model, task, subset, batch_size, limit, max_tokens),
                                PERPLEXITY_SIGNATURE)
        else:
            hypotheses, references = translate(model, task, subset, beam, batch_size, remove_bpe, limit,
                                               max_len_b, max_tokens)
            score, signature = corpus_bleu(hypotheses, references)
        point = CurvePoint(step, total - step, score, signature,
                           ";".join(f"{t}:{layer}:{head}" for t, layer, head in removed))
        points.append(point)
        if progress is not None:
            progress(point)
        if rescore and step != steps[-1]:
            scores = gradient_scores(model, task, rescore_subset, mask, limit=limit)
    return points


CURVE_COLUMNS = ("heads_removed", "heads_kept", "bleu", "sacrebleu_signature", "removed_heads")
LM_CURVE_COLUMNS = ("heads_removed", "heads_kept", "perplexity", "signature", "removed_heads")


def curve_csv(points: List[CurvePoint], language_model: bool = False) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(LM_CURVE_COLUMNS if language_model else CURVE_COLUMNS)
    for p in points:
        writer.writerow([p.heads_removed, p.heads_kept, f"{p.score:.2f}", p.signature, p.removed])
    return buffer.getvalue()


def read_overlay(path: str) -> List[tuple]:
    """(heads_kept, bleu, label) rows of an L0-pruning results file."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("heads_kept", "bleu", "label") if c not in (reader.fieldnames or [])]
        if missing:
            raise HeadPruningError(f"{path}: missing column(s) {missing}")
        try:
            return [(int(r["heads_kept"]), float(r["bleu"]), r["label"]) for r in reader]
        except ValueError as error:
            raise HeadPruningError(f"{path}: {error}") from None


def plot_curve(points: List[CurvePoint], path: str, title: str, overlay: Sequence[tuple] = (),
               score_name: str = "BLEU") -> None:
    """The curve (score against heads kept) with the L0 models as extra points."""
    from ..plotting import pyplot

    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot([p.heads_kept for p in points], [p.score for p in points], "o-", label=title)
    for heads_kept, bleu, label in overlay:
        axes.plot([heads_kept], [bleu], "s")
        axes.annotate(label, (heads_kept, bleu), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if overlay:
        axes.plot([], [], "s", color="gray", label="L0-pruned models")
    axes.set_xlabel("heads kept")
    axes.set_ylabel(score_name)
    axes.invert_xaxis()  # pruning proceeds left to right
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
