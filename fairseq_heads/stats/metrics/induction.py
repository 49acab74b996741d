"""Induction heads (Olsson et al. 2022, "In-context Learning and Induction Heads", Sec. 2).

Probes: a start token (the dictionary's EOS, fairseq's document break) followed by a sequence of
L tokens drawn uniformly from the vocabulary (specials and fairseq's ``madeupword`` fillers
excluded), written twice:  ``[eos, x_1 .. x_L, x_1 .. x_L]`` (positions 0 .. 2L).

Per head and probe, the *induction score* is the mean attention from each second-half position
p = L+1 .. 2L to the position right after the earlier occurrence of its token, p - (L-1):

    induction(head) = sum_probes sum_{p=L+1}^{2L} a[head, p, p-L+1] / (#probes * L)

A head that always attends there scores 1; uniform causal attention scores
mean_p 1/(p+1).  Label (our threshold, stated before any model was scored): ``induction`` when
the score >= 0.4.

*Repeat-copy loss drop* (model level, not per head): per probe, the mean next-token loss (nats)
on x_2 .. x_L of the first copy minus that on x_2 .. x_L of the second copy (the same tokens:
only the context differs).  A model without in-context copying scores ~0; one that copies
perfectly scores ~ln(V).  Bootstrap unit for both: the probe.  It measures copying of a repeated
random sequence, not in-context learning on natural text (metrics/natural_icl.py).

*Copying score* (per head, a property of the weights): an induction head attends to the token
after the earlier occurrence (the score above) *and* copies it, raising its logit.  Elhage et
al. 2021 ("A Mathematical Framework for Transformer Circuits", "Detecting copying behavior"),
the test Olsson et al. 2022 use for the copying half, read it off the head's OV circuit
M = W_U W_O^h W_V^h W_E (vocabulary x vocabulary, token attended to -> logits):

    copying(head) = sum_i lambda_i / sum_i |lambda_i|      (lambda_i: the eigenvalues of M)

1 when every eigenvalue is positive (the identity: copies), -1 when all are negative (suppresses
what it attends to), 0 for a rotation.  M's non-zero eigenvalues are those of the d_head x
d_head matrix W_V^h (W_E W_U) W_O^h (eigenvalues of AB and BA agree), so V never appears.  The
circuit is the direct path through the residual stream: LayerNorm, biases and positions are left
out, as in Elhage et al.'s attention-only models; positive scalings (fairseq's embedding scale,
a head's gate) do not change the score.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch

from ...numbers import as_float
from ._batch import AttentionInput, per_layer
from ...heads import iter_attention
from ..capture import capture_heads
from ..labels import at_least
from ..registry import LANGUAGE_MODEL, LM_ATTENTION_TYPE, PROBES, Heatmap, Metric, StatsError, bootstrap, register
from ..streaming import DEFAULT_REPLICATES, DEFAULT_SEED, RatioAccumulator, estimate_cells, estimate_columns

REPEAT_COPY_LOSS_DROP = "repeat_copy_loss_drop"  # heads.json meta induction.<this>; "loss_drop" before
DEFAULT_LENGTHS = (16, 32, 64)
DEFAULT_PROBES = 64


def probe_vocabulary(dictionary) -> torch.Tensor:
    """Ids of a fairseq Dictionary's ordinary symbols (no specials, no madeupword padding)."""
    ids = [i for i in range(dictionary.nspecial, len(dictionary))
           if not dictionary[i].startswith("madeupword")]
    if len(ids) < 2:
        raise ValueError("the dictionary has fewer than 2 ordinary symbols to draw probes from")
    return torch.tensor(ids, dtype=torch.long)


def repeated_random_probes(vocabulary: torch.Tensor, length: int, count: int, start_token: int,
                           generator: torch.Generator) -> torch.Tensor:
    """(count, 1 + 2 * length) probes ``[start, x, x]`` with x uniform over ``vocabulary``."""
    draws = torch.randint(len(vocabulary), (count, length), generator=generator)
    sequence = vocabulary[draws]
    start = torch.full((count, 1), start_token, dtype=torch.long)
    return torch.cat([start, sequence, sequence], dim=1)


def induction_sums(attn: torch.Tensor, length: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-probe (sum over second-half positions of the attention to p-(L-1), L), each (B, *heads)."""
    if attn.shape[-1] != 1 + 2 * length or attn.shape[-2] != 1 + 2 * length:
        raise ValueError(f"probes of length {length} give {1 + 2 * length} positions, "
                         f"attention has {tuple(attn.shape[-2:])}")
    # a[p, p-(L-1)] for p = L+1..2L is the diagonal at offset -(L-1), from its 3rd entry on
    diagonal = torch.diagonal(attn.to(torch.float64), offset=-(length - 1), dim1=-2, dim2=-1)
    total = diagonal[..., 2:].sum(-1)
    return total, torch.full_like(total, float(length))


def repeat_copy_loss_drop(lprobs: torch.Tensor, probes: torch.Tensor, length: int) -> torch.Tensor:
    """(B,) mean loss on x_2..x_L of the first copy minus on x_2..x_L of the second copy.

    ``lprobs`` (B, T, V) are next-token log-probabilities at every position of ``probes``."""
    nll = -lprobs[:, :-1].gather(-1, probes[:, 1:].unsqueeze(-1)).squeeze(-1).to(torch.float64)
    # nll[:, t] is the loss of the token at position t+1; x_2..x_L sit at 2..L and L+2..2L
    first = nll[:, 1:length].mean(-1)
    second = nll[:, length + 1:2 * length].mean(-1)
    return first - second


def uniform_induction_score(length: int) -> float:
    """What uniform causal attention scores (closed form, for tests and as a chance level)."""
    return sum(1.0 / (p + 1) for p in range(length + 1, 2 * length + 1)) / length


class InductionAccumulator:
    """Streams induction scores (per head) and the loss drop (per model), per probe length.

    finalize -> {"all": (scores, loss_drop), L: (scores, loss_drop), ...}: scores of head_shape,
    loss drop of shape ().  All lengths share the seed: probes are resampled jointly."""

    def __init__(self, head_shape: Sequence[int], lengths: Sequence[int] = DEFAULT_LENGTHS,
                 replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED):
        self.head_shape = tuple(head_shape)
        self.lengths = tuple(int(n) for n in lengths)
        make = lambda shape: RatioAccumulator(shape, replicates=replicates, seed=seed)  # noqa: E731
        self.scores = {key: make(self.head_shape) for key in ("all",) + self.lengths}
        self.drop = {key: make(()) for key in ("all",) + self.lengths}

    def update(self, attn: AttentionInput, lprobs: torch.Tensor, probes: torch.Tensor, length: int) -> None:
        total, count = per_layer(induction_sums, attn, length)
        drop = repeat_copy_loss_drop(lprobs, probes, length)
        ones = torch.ones_like(drop)
        for key in ("all", length):
            self.scores[key].update(total, count)
            self.drop[key].update(drop, ones)

    def finalize(self):
        return {key: (self.scores[key].finalize(), self.drop[key].finalize()) for key in self.scores}

    def replicate_estimates(self) -> torch.Tensor:
        return self.scores["all"].replicate_estimates()


def induction_column(length: int) -> str:
    """The heads-table column of the score on probes of length L: induction_L16, ..."""
    return f"induction_L{length}"


def induction_meta(induction) -> Dict[str, object]:
    """The model-level numbers of the induction probes: the repeat-copy loss drop (nats/token)
    with its interval per probe length, and the uniform-attention chance score."""
    meta: Dict[str, object] = {REPEAT_COPY_LOSS_DROP: {}, "chance": {}}
    for key, (_, drop) in induction.items():
        meta[REPEAT_COPY_LOSS_DROP][str(key)] = {"estimate": as_float(drop.estimate), "ci_low": as_float(drop.ci_low),
                                       "ci_high": as_float(drop.ci_high), "probes": as_float(drop.count)}
    lengths = [key for key in induction if key != "all"]
    for key in lengths:
        meta["chance"][str(key)] = uniform_induction_score(key)
    # the pooled score weighs each probe length by its L second-half positions
    meta["chance"]["all"] = (sum(k * meta["chance"][str(k)] for k in lengths) / sum(lengths)
                             if lengths else float("nan"))
    return meta


# ---------------------------------------------------------------- the OV circuit's copying score


def copying_score(ov_circuit: torch.Tensor) -> float:
    """sum(lambda) / sum(|lambda|) over the eigenvalues of a square OV circuit (module doc;
    Elhage et al. 2021); NaN for a zero matrix.  The eigenvalues of a real matrix come in
    conjugate pairs, so the sum is real (the trace)."""
    eigenvalues = torch.linalg.eigvals(ov_circuit.to(torch.float64))
    magnitude = eigenvalues.abs().sum()
    if magnitude == 0:
        return float("nan")
    return float(eigenvalues.sum().real / magnitude)


def head_ov_core(value: torch.Tensor, embed_to_unembed: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """W_V^h C W_O^h (d_head x d_head): the non-zero spectrum of W_U W_O^h W_V^h W_E, given
    C = W_E W_U (d_model x d_model, column convention: W_E maps a one-hot token to the residual
    stream, W_U the residual stream to logits), W_V^h (d_head x d_model), W_O^h (d_model x d_head)."""
    return value.to(torch.float64) @ embed_to_unembed.to(torch.float64) @ output.to(torch.float64)


def embed_to_unembed(decoder) -> torch.Tensor:
    """C = P_in W_E W_U P_out (d_model x d_model) of a fairseq Transformer decoder: its token
    embedding and output projection, with the input / output dimension projections if it has
    them.  ValueError when the decoder has no plain output projection (adaptive softmax)."""
    output = getattr(decoder, "output_projection", None)
    if getattr(decoder, "adaptive_softmax", None) is not None or not isinstance(output, torch.nn.Linear):
        raise ValueError("the decoder has no plain output projection (adaptive softmax?): no W_U")
    embed = decoder.embed_tokens.weight.detach().to(torch.float64)  # (V, d_in): W_E = embed^T
    core = embed.t() @ output.weight.detach().to(torch.float64)  # (d_in, d_out)
    if getattr(decoder, "project_in_dim", None) is not None:
        core = decoder.project_in_dim.weight.detach().to(torch.float64) @ core  # (d, d_in) @ ...
    if getattr(decoder, "project_out_dim", None) is not None:
        core = core @ decoder.project_out_dim.weight.detach().to(torch.float64)  # ... @ (d_out, d)
    return core


def copying_scores(decoder, attention_blocks: Sequence) -> torch.Tensor:
    """(L, H) copying scores of the heads of a decoder's self-attention blocks (fairseq
    MultiheadAttention, one per layer): head h's W_V^h is v_proj's rows h*D..(h+1)*D-1 and its
    W_O^h out_proj's columns h*D..(h+1)*D-1 (nn.Linear stores (out, in)). Under grouped-query
    attention (gated_llama) head h's values are those of its KV head, `kv_head_of[h]`."""
    core = embed_to_unembed(decoder)
    rows: List[List[float]] = []
    for attention in attention_blocks:
        width = attention.head_dim
        value, output = attention.v_proj.weight.detach(), attention.out_proj.weight.detach()
        kv_head_of = getattr(attention, "kv_head_of", range(attention.num_heads))
        rows.append([copying_score(head_ov_core(value[kv_head_of[h] * width:(kv_head_of[h] + 1) * width],
                                                core, output[:, h * width:(h + 1) * width]))
                     for h in range(attention.num_heads)])
    return torch.tensor(rows, dtype=torch.float64)


# ---------------------------------------------------------------- the binding to a stats run (registry.py)


class InductionOutcome(NamedTuple):
    """The induction metric's result: the probe scores and repeat-copy loss drops per length
    ({"all" | L: (scores, drop)}), and the copying score of each head's OV circuit (L, H), NaN
    with ``copying_reason`` when the model's weights do not give one."""

    by_length: Dict[object, tuple]
    copying: torch.Tensor
    copying_reason: Optional[str]


def induction_lengths(run) -> Tuple[int, ...]:
    """The probe lengths whose probes (1 + 2L tokens) fit the model's positions."""
    limit = run.model.max_positions()
    fits = tuple(n for n in run.options.induction_lengths if limit is None or 1 + 2 * n <= limit)
    if not fits:
        raise StatsError(f"--induction-lengths: no probe of 1 + 2L tokens fits the model's "
                         f"{limit} positions")
    return fits


def model_copying_scores(model, shape: Tuple[int, int]) -> Tuple[torch.Tensor, Optional[str]]:
    """((L, H) copying scores of an LM's dec-self heads, None), or (NaN, why not)."""
    blocks = sorted(((layer, attention) for t, layer, attention in iter_attention(model)
                     if t == LM_ATTENTION_TYPE), key=lambda pair: pair[0])
    try:
        scores = copying_scores(model.decoder, [attention for _, attention in blocks])
    except (AttributeError, ValueError, RuntimeError) as error:  # not a fairseq Transformer decoder's weights
        return torch.full(shape, float("nan"), dtype=torch.float64), f"{type(error).__name__}: {error}"
    return scores, None


class Induction(Metric):
    name, attention_types, needs = "induction", ("dec-self",), PROBES
    model_kinds = (LANGUAGE_MODEL,)
    heatmap = Heatmap("induction", "induction score (repeated random probes)", (0.0, 1.0))
    label_colours = (("induction", "#dd8452"),)

    def accumulator(self, shape, run):
        return InductionAccumulator(shape, induction_lengths(run), **bootstrap(run))

    def probe(self, acc, run):
        """Run the repeated random-token probes through the model."""
        dictionary = run.task.source_dictionary
        generator = torch.Generator().manual_seed(run.options.seed)
        vocabulary = probe_vocabulary(dictionary)
        device = next(run.model.parameters()).device
        for length in acc.lengths:
            probes = repeated_random_probes(vocabulary, length, run.options.induction_probes,
                                            dictionary.eos(), generator)
            for start in range(0, len(probes), 16):
                batch = probes[start:start + 16]
                with torch.no_grad(), capture_heads(run.model, weights=True, head_outputs=False,
                                                    attention_types=(LM_ATTENTION_TYPE,)) as captured:
                    net_output = run.model(batch.to(device))
                    lprobs = run.model.get_normalized_probs(net_output, log_probs=True)
                    weights = [w.detach().float().cpu() for w in captured.type_weights(LM_ATTENTION_TYPE)]
                acc.update(weights, lprobs.float().cpu(), batch, length)

    def finalize(self, acc, run, replicates):
        copying, reason = model_copying_scores(run.model, run.shape[LM_ATTENTION_TYPE])
        return InductionOutcome(acc.finalize(), copying, reason)

    def columns(self, run):
        return (estimate_columns("induction") + ["induction_chance"]
                + [induction_column(n) for n in run.options.induction_lengths] + ["copying_score"])

    def cells(self, outcome, index, run):
        induction = outcome.by_length
        cells = estimate_cells("induction", induction["all"][0], index)
        cells["induction_chance"] = induction_meta(induction)["chance"]["all"]
        for key, (scores, _) in induction.items():
            if key != "all":
                cells[induction_column(key)] = as_float(scores.estimate[index])
        cells["copying_score"] = as_float(outcome.copying[index])
        return cells

    def labels(self, outcome, run):
        return at_least(outcome.by_length["all"][0].estimate, run.options.thresholds.induction, "induction")

    def meta(self, by_type, run):
        if by_type is None:
            return {"induction_probes": None}
        meta = {"induction_probes": {"lengths": list(induction_lengths(run)),
                                     "per_length": run.options.induction_probes, "seed": run.options.seed}}
        for outcome in by_type.values():
            meta["induction"] = induction_meta(outcome.by_length)
            meta["induction"]["copying_score_unavailable"] = outcome.copying_reason
        return meta


register(Induction())
