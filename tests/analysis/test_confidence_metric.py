import torch

from fairseq_heads.stats.metrics.confidence import ConfidenceAccumulator, confidence_sums


def _uniform_over(mask, heads=2):
    """Attention uniform over the positions of ``mask`` for every query and head."""
    b, t = mask.shape
    weights = mask.double() / mask.sum(-1, keepdim=True)
    return weights[:, None, None, :].expand(b, heads, t, t).clone()


def test_uniform_head_confidence_is_one_over_n(masks):
    n = 5
    tokens, eos = masks([n, n, n], left_pad=True)
    acc = ConfidenceAccumulator((2,), replicates=20)
    acc.update(_uniform_over(tokens), tokens, tokens)
    est, count, _, _ = acc.finalize()
    assert torch.allclose(est, torch.full((2,), 1.0 / n, dtype=torch.float64))
    assert torch.equal(count, torch.full((2,), 3.0 * n, dtype=torch.float64))


def test_mixed_lengths_are_token_weighted_and_padding_side_does_not_matter(masks):
    lengths = [2, 4, 7]
    results = []
    for left in (True, False):
        tokens, eos = masks(lengths, left_pad=left)
        real = tokens | eos  # uniform over tokens and EOS: max over non-EOS keys is 1/(n+1)
        acc = ConfidenceAccumulator((2,), replicates=10)
        acc.update(_uniform_over(real), tokens, tokens)
        results.append(acc.finalize().estimate)
    expected = sum(n / (n + 1) for n in lengths) / sum(lengths)
    assert torch.allclose(results[0], torch.full((2,), expected, dtype=torch.float64))
    assert torch.allclose(results[0], results[1])


def test_eos_mass_is_not_confident_unless_eos_keys_are_included(masks):
    tokens, eos = masks([4, 3], left_pad=True)
    real = tokens | eos
    attn = 0.1 * real.double() / real.sum(-1, keepdim=True)
    attn = attn + 0.9 * eos.double()  # "no-op" head parking 90% on EOS
    attn = attn[:, None, None, :].expand(2, 1, real.shape[1], real.shape[1])
    num, den = confidence_sums(attn, tokens, tokens)
    assert (num / den).max() < 0.05
    num, den = confidence_sums(attn, tokens, tokens | eos)
    assert (num / den).min() > 0.9


def test_one_hot_head_and_layer_list(masks):
    tokens, _ = masks([3, 6], left_pad=False)
    t = tokens.shape[1]
    one_hot = torch.zeros(2, 4, t, t)
    one_hot[..., 0] = 1.0
    uniform = _uniform_over(tokens, heads=4)
    acc = ConfidenceAccumulator((2, 4), replicates=10)
    acc.update([one_hot, uniform], tokens, tokens)
    est = acc.finalize().estimate
    assert est.shape == (2, 4)
    assert torch.allclose(est[0], torch.ones(4, dtype=torch.float64))
    assert torch.allclose(est[1], torch.full((4,), (3 * (1 / 3) + 6 * (1 / 6)) / 9, dtype=torch.float64))
    assert acc.replicate_estimates().shape == (10, 2, 4)
