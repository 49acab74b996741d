import math

import torch

from fairseq_heads.stats.streaming import RatioAccumulator, poisson1_weights


def _data(n, shape=(3,), seed=1):
    g = torch.Generator().manual_seed(seed)
    den = torch.randint(1, 20, (n,) + (1,) * len(shape), generator=g).to(torch.float64).expand(n, *shape)
    num = torch.rand(n, *shape, generator=g, dtype=torch.float64) * den
    return num, den


def test_estimate_is_ratio_of_sums_and_nan_without_denominator():
    num, den = _data(10, shape=(2,))
    den = den.clone()
    den[:, 1] = 0
    num[:, 1] = 0
    acc = RatioAccumulator((2,), replicates=50)
    acc.update(num, den)
    est, count, lo, hi = acc.finalize()
    assert torch.allclose(est[0], num[:, 0].sum() / den[:, 0].sum())
    assert count[0] == den[:, 0].sum() and count[1] == 0
    assert math.isnan(est[1]) and math.isnan(lo[1]) and math.isnan(hi[1])
    assert lo[0] <= est[0] <= hi[0]


def test_chunked_streaming_equals_one_shot():
    num, den = _data(97)
    one = RatioAccumulator((3,), replicates=64, seed=5)
    one.update(num, den)
    chunked = RatioAccumulator((3,), replicates=64, seed=5)
    for start, stop in [(0, 1), (1, 40), (40, 41), (41, 97)]:
        chunked.update(num[start:stop], den[start:stop])
    for a, b in zip(one.finalize(), chunked.finalize()):
        assert torch.allclose(a, b, equal_nan=True)
    assert torch.allclose(one.replicate_estimates(), chunked.replicate_estimates())


def test_merge_gives_one_shot_point_estimate():
    num, den = _data(60)
    whole = RatioAccumulator((3,), replicates=32, seed=0)
    whole.update(num, den)
    first = RatioAccumulator((3,), replicates=32, seed=1)
    second = RatioAccumulator((3,), replicates=32, seed=2)
    first.update(num[:25], den[:25])
    second.update(num[25:], den[25:])
    merged = first.merge(second).finalize()
    expected = whole.finalize()
    assert torch.allclose(merged.estimate, expected.estimate)
    assert torch.equal(merged.count, expected.count)
    assert first.num_units == 60


def test_state_size_does_not_grow_with_sentences():
    sizes = []
    for n in (5, 500):
        acc = RatioAccumulator((2, 4), replicates=20)
        num, den = _data(n, shape=(2, 4))
        acc.update(num, den)
        sizes.append(sum(t.numel() for t in acc.state_tensors()))
    assert sizes[0] == sizes[1] == 2 * 8 + 2 * 20 * 8


def test_poisson_weights_have_poisson1_moments():
    w = poisson1_weights(20000, 10, torch.Generator().manual_seed(0))
    assert torch.equal(w, w.round()) and w.min() >= 0
    assert abs(w.mean().item() - 1.0) < 0.02 and abs(w.var().item() - 1.0) < 0.04


def test_interval_covers_truth_at_roughly_nominal_rate():
    # 400 independent experiments side by side (one per cell), 100 sentences each.
    # Sentence-level heterogeneity (p_i ~ Beta(2, 3)) makes tokens within a sentence
    # correlated, so a token-level bootstrap would under-cover; the sentence bootstrap must not.
    cells, sentences, truth = 400, 100, 0.4
    g = torch.Generator().manual_seed(123)
    lengths = (1 + torch.poisson(torch.full((sentences, cells), 10.0), generator=g)).to(torch.float64)
    beta = torch.distributions.Beta(torch.tensor(2.0), torch.tensor(3.0))
    torch.manual_seed(7)
    p = beta.sample((sentences, cells)).to(torch.float64)
    hits = torch.binomial(lengths, p, generator=g)
    acc = RatioAccumulator((cells,), replicates=200, seed=3)
    acc.update(hits, lengths)
    est, _, lo, hi = acc.finalize()
    coverage = ((lo <= truth) & (truth <= hi)).double().mean().item()
    assert 0.88 <= coverage <= 0.99, coverage
    assert abs(est.mean().item() - truth) < 0.01
