import pytest
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


# ---------------------------------------------------------------- the paper's filter, by rank

def test_count_outside_the_top_n_counts_ties_as_inside():
    from fairseq_heads.stats.metrics.rare import max_count_outside_top

    counts = [10, 100, 5, 50, 20, 50, 10]  # order must not matter: sorted 100 50 50 20 10 10 5
    assert max_count_outside_top(counts, 1) == 50  # outside the top 1: everything below 100
    assert max_count_outside_top(counts, 2) == 20  # the two 50s tie at rank 2: both inside
    assert max_count_outside_top(counts, 3) == 20
    assert max_count_outside_top(counts, 4) == 10
    assert max_count_outside_top(counts, 5) == 5  # the two 10s tie at rank 5
    assert max_count_outside_top(counts, 6) == 5
    assert max_count_outside_top(counts, 7) == float("-inf")  # nothing outside the top 7
    assert max_count_outside_top([3, 3, 3], 1) == float("-inf")  # all tied with the first


def test_dictionary_cutoff_ignores_specials_and_fillers():
    from fairseq.data import Dictionary

    from fairseq_heads.stats.metrics.rare import ordinary_counts, rarest_count_cutoff

    d = Dictionary()
    for word, count in [("the", 900), ("a", 500), ("cat", 40), ("sat", 40), ("mat", 3)]:
        d.add_symbol(word, n=count)
    d.add_symbol("madeupword0000", n=0)
    assert ordinary_counts(d) == [900, 500, 40, 40, 3]
    assert rarest_count_cutoff(d, None) is None
    assert rarest_count_cutoff(d, 2) == 40  # "cat" and "sat" are outside the top 2
    assert rarest_count_cutoff(d, 3) == 3  # "sat" ties with the 3rd: inside; "mat" is outside
    assert rarest_count_cutoff(d, 4) == 3
    with pytest.raises(ValueError, match=r"^--rare-outside-top 5: the dictionary has 5 types"):
        rarest_count_cutoff(d, 5)


def test_only_sentences_whose_rarest_token_is_outside_the_top_n_are_scored(masks):
    """Types ranked by count: 1000 (1st), 500, 400, 300 (4th), then 30, 20, 10. With top 4 the
    cutoff is 30: sentences 0 and 2 have a rarest token outside (20, 10), sentence 1 (rarest 300)
    does not. The head looks at the rarest token in sentence 0 and the most frequent in 1 and 2,
    so its share is 1/2 over the two scored sentences (1/3 over all three without the filter)."""
    from fairseq_heads.stats.metrics.rare import max_count_outside_top

    cutoff = max_count_outside_top([1000, 500, 400, 300, 30, 20, 10], 4)
    assert cutoff == 30
    values = [[1000, 20, 500], [400, 300, 1000, 500], [10, 1000, 30]]
    tokens, eos = masks([len(v) for v in values], left_pad=True)
    freq = _freqs(tokens, eos, values)
    positions = [tokens[s].nonzero().squeeze(-1) for s in range(3)]
    looked_at = [positions[0][1].item(), positions[1][2].item(), positions[2][1].item()]
    attn = _attend_to(tokens, looked_at)
    filtered = RareWordAccumulator((1,), max_rarest_freq=cutoff, replicates=10)
    unfiltered = RareWordAccumulator((1,), replicates=10)
    filtered.update(attn, tokens, tokens, freq)
    unfiltered.update(attn, tokens, tokens, freq)
    with_filter, without = filtered.finalize(), unfiltered.finalize()
    assert with_filter.rarest.count.item() == 2 and without.rarest.count.item() == 3
    assert with_filter.rarest.estimate.item() == pytest.approx(1 / 2)
    assert without.rarest.estimate.item() == pytest.approx(1 / 3)
    # chance over the same two scored sentences: 1/3 each
    assert with_filter.chance_rarest.estimate.item() == pytest.approx(1 / 3)


def test_causal_filter_scores_only_queries_whose_prefix_holds_a_rare_token():
    """One block of counts [900, 800, 5, 700]; cutoff 10. Query 0 has a 1-token prefix (never
    scored). Query 1's prefix (900, 800) holds no rare token: not scored under the filter. Queries
    2 and 3 have the 5 in their prefix. Head 0 attends to the previous token: 800 at query 2 (a
    miss), the 5 at query 3 (a hit). Head 1 attends to the rarest token of each prefix."""
    from fairseq_heads.stats.metrics.rare import PrefixRareWordAccumulator

    token_mask = torch.ones(1, 4, dtype=torch.bool)
    freq = torch.tensor([[900.0, 800.0, 5.0, 700.0]])
    attn = torch.zeros(1, 2, 4, 4)
    for q in range(4):
        attn[0, 0, q, max(q - 1, 0)] = 1.0  # previous token
        attn[0, 1, q, min(q, 2)] = 1.0  # 800 at query 1, the 5 from query 2 on
    filtered = PrefixRareWordAccumulator((2,), max_rarest_freq=10.0, replicates=5)
    filtered.update(attn, token_mask, freq)
    result = filtered.finalize()
    assert result.rarest.count.tolist() == [2.0, 2.0]  # queries 2 and 3
    assert result.rarest.estimate.tolist() == [0.5, 1.0]
    unfiltered = PrefixRareWordAccumulator((2,), replicates=5)
    unfiltered.update(attn, token_mask, freq)
    # without the filter query 1 counts too: head 0 looks at 900 there (a miss), head 1 at 800,
    # the rarest of (900, 800)
    assert unfiltered.finalize().rarest.count.tolist() == [3.0, 3.0]
    assert unfiltered.finalize().rarest.estimate.tolist() == [pytest.approx(1 / 3), 1.0]
