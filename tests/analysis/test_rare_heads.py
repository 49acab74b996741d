import torch

from fairseq_heads.stats.labels import rare_labels
from fairseq_heads.stats.metrics.rare import RareWordAccumulator, rare_chance, rare_hits


def _freqs(tokens, eos, values):
    """Place per-sentence frequency lists on the token positions; EOS gets frequency 0 (rarer than anything)."""
    freq = torch.full(tokens.shape, 10**6, dtype=torch.long)
    freq[eos] = 0
    for s, vals in enumerate(values):
        freq[s, tokens[s]] = torch.tensor(vals)
    return freq


def _attend_to(tokens, key_positions, heads=1):
    b, t = tokens.shape
    attn = torch.full((b, heads, t, t), 0.01)
    for s, k in enumerate(key_positions):
        attn[s, :, :, k] += 1.0
    return attn / attn.sum(-1, keepdim=True)


def test_head_always_on_rarest_token_scores_one(masks):
    values = [[50, 3, 900, 7], [5, 100, 2], [40, 41, 1, 30, 31]]
    tokens, eos = masks([len(v) for v in values], left_pad=True)
    freq = _freqs(tokens, eos, values)
    rarest = [tokens[s].nonzero().squeeze(-1)[torch.tensor(v).argmin()].item() for s, v in enumerate(values)]
    most_frequent = [tokens[s].nonzero().squeeze(-1)[torch.tensor(v).argmax()].item() for s, v in enumerate(values)]
    acc = RareWordAccumulator((2,), replicates=20)
    attn = torch.cat([_attend_to(tokens, rarest), _attend_to(tokens, most_frequent)], dim=1)
    acc.update(attn, tokens, tokens, freq)
    result = acc.finalize()
    assert torch.allclose(result.rarest.estimate, torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(result.two_rarest.estimate, torch.tensor([1.0, 0.0], dtype=torch.float64))
    expected_chance = sum(1 / len(v) for v in values) / len(values)
    assert torch.isclose(result.chance_rarest.estimate, torch.tensor(expected_chance, dtype=torch.float64))
    assert torch.isclose(result.chance_two_rarest.estimate, torch.tensor(2 * expected_chance, dtype=torch.float64))
    assert rare_labels(result.rarest.estimate).tolist() == [True, False]
    assert int(result.rarest.count[0]) == 3


def test_ties_and_second_rarest(masks):
    tokens, eos = masks([4], left_pad=False)
    freq = _freqs(tokens, eos, [[9, 2, 2, 7]])
    (hits,) = rare_hits(_attend_to(tokens, [2]), tokens, tokens, freq)  # second of two tied rarest
    assert hits[0, 0].tolist() == [1.0, 1.0]
    freq = _freqs(tokens, eos, [[9, 1, 2, 7]])
    (hits,) = rare_hits(_attend_to(tokens, [2]), tokens, tokens, freq)  # second rarest only
    assert hits[0, 0].tolist() == [0.0, 1.0]
    chance = rare_chance(_freqs(tokens, eos, [[3, 3, 3, 8]]), tokens)
    assert torch.allclose(chance, torch.tensor([[0.75, 0.75]], dtype=torch.float64))


def test_short_sentences_and_filter_are_skipped(masks):
    tokens, eos = masks([1, 3], left_pad=True)
    freq = _freqs(tokens, eos, [[4], [10, 20, 30]])
    acc = RareWordAccumulator((1,), max_rarest_freq=5, replicates=10)
    acc.update(_attend_to(tokens, [tokens[0].nonzero().item(), tokens[1].nonzero()[0].item()]), tokens, tokens, freq)
    result = acc.finalize()
    assert result.rarest.count.item() == 0  # 1-token sentence too short; the other has no token with freq <= 5
    assert torch.isnan(result.rarest.estimate).all()


def test_eos_is_neither_a_candidate_nor_the_rarest(masks):
    tokens, eos = masks([3, 4], left_pad=True)
    freq = _freqs(tokens, eos, [[8, 2, 5], [9, 7, 1, 4]])  # EOS positions get frequency 0
    rarest = [tokens[0].nonzero()[1].item(), tokens[1].nonzero()[2].item()]
    attn = _attend_to(tokens, rarest) * 0.3
    attn[eos[:, None, None, :].expand_as(attn)] += 0.6  # most mass on EOS
    (hits,) = rare_hits(attn, tokens, tokens, freq)
    assert hits[:, 0, 0].tolist() == [1.0, 1.0]
