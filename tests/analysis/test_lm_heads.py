"""Decoder-only head functions on hand-built causal attention with known scores."""
import math

import torch

from fairseq_heads.stats.metrics.duplicate_token import DuplicateTokenAccumulator
from fairseq_heads.stats.metrics.induction import (
    InductionAccumulator,
    repeat_copy_loss_drop,
    induction_sums,
    repeated_random_probes,
    uniform_induction_score,
)
from fairseq_heads.stats.metrics.previous_token import PreviousTokenAccumulator
from fairseq_heads.stats.metrics.rare import PrefixRareWordAccumulator


def uniform_causal(batch: int, heads: int, t: int) -> torch.Tensor:
    # float64, so closed forms can be compared to 1e-12
    attn = torch.ones(t, t, dtype=torch.float64).tril()
    return (attn / attn.sum(-1, keepdim=True)).expand(batch, heads, t, t).clone()


def previous_token_pattern(batch: int, t: int) -> torch.Tensor:
    attn = torch.zeros(batch, 1, t, t)
    attn[:, 0, 0, 0] = 1.0
    for q in range(1, t):
        attn[:, 0, q, q - 1] = 1.0
    return attn


def test_previous_token_pattern_scores_one_and_uniform_its_closed_form():
    t = 7
    mask = torch.ones(2, t, dtype=torch.bool)
    mask[1, :2] = False  # left padding: its first real token is not a query
    acc = PreviousTokenAccumulator((2,), replicates=10)
    attn = torch.cat([previous_token_pattern(2, t).double(), uniform_causal(2, 1, t)], dim=1)
    acc.update(attn, mask)
    mass, share = acc.finalize()
    assert mass.estimate[0].item() == 1.0 and share.estimate[0].item() == 1.0
    # uniform causal attention puts 1/(q+1) on q-1 (it spreads over sentence 1's left padding too)
    expected = [1.0 / (q + 1) for q in range(1, t)] + [1.0 / (q + 1) for q in range(3, t)]
    assert math.isclose(mass.estimate[1].item(), sum(expected) / len(expected), rel_tol=1e-12)
    assert mass.count[0].item() == (t - 1) + (t - 3)


def test_duplicate_token_mass_and_chance():
    tokens = torch.tensor([[5, 6, 5, 7, 6, 5]])
    mask = torch.ones_like(tokens, dtype=torch.bool)
    t = tokens.shape[1]
    copies = torch.zeros(1, 1, t, t, dtype=torch.float64)
    for q in range(t):
        earlier = [k for k in range(q) if tokens[0, k] == tokens[0, q]]
        for k in earlier or [q]:
            copies[0, 0, q, k] = 1.0 / max(len(earlier), 1)
    acc = DuplicateTokenAccumulator((2,), replicates=10)
    acc.update(torch.cat([copies, uniform_causal(1, 1, t)], dim=1), tokens, mask)
    mass, chance = acc.finalize()
    assert mass.estimate[0].item() == 1.0
    # queries with an earlier copy: q=2 (1 of 3 keys), q=4 (1 of 5), q=5 (2 of 6)
    closed_form = (1 / 3 + 1 / 5 + 2 / 6) / 3
    assert math.isclose(mass.estimate[1].item(), closed_form, rel_tol=1e-12)
    assert math.isclose(chance.estimate[0].item(), closed_form, rel_tol=1e-12)
    assert mass.count[0].item() == 3


def induction_pattern(length: int, count: int) -> torch.Tensor:
    t = 1 + 2 * length
    attn = torch.zeros(count, 1, t, t)
    for p in range(t):
        attn[:, 0, p, p - length + 1 if p > length else max(p - 1, 0)] = 1.0
    return attn


def test_induction_pattern_scores_one_and_uniform_its_closed_form():
    for length in (4, 16):
        total, count = induction_sums(induction_pattern(length, 3), length)
        assert torch.equal(total / count, torch.ones(3, 1, dtype=torch.float64))
        total, count = induction_sums(uniform_causal(3, 1, 1 + 2 * length), length)
        assert torch.allclose(total / count, torch.full((3, 1), uniform_induction_score(length),
                                                        dtype=torch.float64), rtol=1e-12, atol=0)


def test_repeat_copy_loss_drop_of_a_perfect_copier_is_log_vocabulary():
    vocabulary = torch.arange(4, 24)
    probes = repeated_random_probes(vocabulary, 8, 5, start_token=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(probes[:, 1:9], probes[:, 9:])
    v, t = 24, probes.shape[1]
    lprobs = torch.full((5, t, v), -math.log(len(vocabulary)), dtype=torch.float64)
    lprobs[..., :4] = float("-inf")
    for p in range(9, t - 1):  # second copy: the next token is known from the first copy
        lprobs[:, p] = float("-inf")
        lprobs[torch.arange(5), p, probes[:, p + 1]] = 0.0
    drop = repeat_copy_loss_drop(lprobs, probes, 8)
    assert torch.allclose(drop, torch.full((5,), math.log(len(vocabulary)), dtype=torch.float64))
    acc = InductionAccumulator((1,), lengths=(8,), replicates=10)
    acc.update(induction_pattern(8, 5), lprobs, probes, 8)
    scores, loss_drop = acc.finalize()["all"]
    assert scores.estimate.item() == 1.0
    assert math.isclose(loss_drop.estimate.item(), math.log(20), rel_tol=1e-12)


def test_prefix_rare_head_scores_one():
    freq = torch.tensor([[50.0, 7.0, 30.0, 3.0, 40.0, 9.0]])
    mask = torch.ones(1, 6, dtype=torch.bool)
    rarest_so_far = torch.zeros(1, 1, 6, 6, dtype=torch.float64)
    for q in range(6):
        rarest_so_far[0, 0, q, int(freq[0, :q + 1].argmin())] = 1.0
    acc = PrefixRareWordAccumulator((2,), replicates=10)
    acc.update(torch.cat([rarest_so_far, uniform_causal(1, 1, 6)], dim=1), mask, freq)
    result = acc.finalize()
    assert result.rarest.estimate[0].item() == 1.0
    # queries with >= 2 prefix tokens: q = 1..5; uniform attention's argmax (ties: earliest) is
    # position 0, the rarest of no prefix beyond q = 0, so it never hits
    assert result.rarest.estimate[1].item() == 0.0
    assert math.isclose(result.chance_rarest.estimate.item(), sum(1 / (q + 1) for q in range(1, 6)) / 5,
                        rel_tol=1e-12)


def test_shared_reductions_give_each_metric_its_own_numbers_exactly():
    """The once-per-layer max / argmax that the collector shares (SharedReductions) give every
    metric the sums it computes from the weights itself, bit for bit (float32 weights, ties)."""
    from fairseq_heads.stats.metrics._batch import SharedReductions
    from fairseq_heads.stats.metrics.confidence import ConfidenceAccumulator
    from fairseq_heads.stats.metrics.positional import PositionalAccumulator

    g = torch.Generator().manual_seed(0)
    b, h, t = 3, 2, 9
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[0, :2] = False  # left padding
    mask[2, 5] = False  # an EOS inside the block
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    layers = []
    for _ in range(2):
        logits = torch.randn(b, h, t, t, generator=g).round()  # rounded: ties in the argmax
        layers.append(logits.masked_fill(~causal, float("-inf")).softmax(-1))
    query_mask = mask & (mask.long().cumsum(-1) >= 2)
    tokens = torch.randint(4, 8, (b, t), generator=g)
    counts = torch.rand(12, generator=g, dtype=torch.float64).mul(100).round()[tokens]
    shared = SharedReductions(layers, mask)
    pairs = [
        (ConfidenceAccumulator, lambda a: a.update(layers, query_mask, mask),
         lambda a: a.update_from_max(shared.key_max()[0], query_mask, mask)),
        (lambda shape, **kw: PositionalAccumulator(shape, offsets=(-2, -1, 0), **kw),
         lambda a: a.update(layers, query_mask, mask),
         lambda a: a.update_from_argmax(shared.key_max()[1], query_mask, mask)),
        (PreviousTokenAccumulator, lambda a: a.update(layers, mask),
         lambda a: a.update_from_argmax(layers, shared.prefix_argmax(), mask)),
        (PrefixRareWordAccumulator, lambda a: a.update(layers, mask, counts),
         lambda a: a.update_from_argmax(shared.prefix_argmax(), mask, counts)),
    ]

    def state(acc):
        ratios = [acc.ratio] if hasattr(acc, "ratio") else [acc.hits, acc.chance]
        return [tensor for ratio in ratios for tensor in ratio.state_tensors()]

    for make, own, from_shared in pairs:
        first, second = make((2, h), replicates=5), make((2, h), replicates=5)
        own(first)
        from_shared(second)
        for x, y in zip(state(first), state(second)):
            assert torch.equal(x, y), make
    # the duplicate-token mass gathered at the copies equals the dense float64 sum
    from fairseq_heads.stats.metrics.duplicate_token import earlier_copies, mass_on_copies
    copies = earlier_copies(tokens, mask)
    dense = (layers[0].to(torch.float64) * copies[:, None]).sum(-1)
    torch.testing.assert_close(mass_on_copies(layers[0], copies), dense, rtol=1e-15, atol=0)
