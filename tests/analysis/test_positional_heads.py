import torch

from fairseq_heads.stats.labels import positional_labels
from fairseq_heads.stats.metrics.positional import PositionalAccumulator, argmax_offsets, candidate_argmax


def _offset_head(tokens, offset, heads=1, noise=0.0):
    """Every real token attends (weight 0.7) to the real token ``offset`` away; first/last fallback to itself."""
    b, t = tokens.shape
    attn = torch.full((b, heads, t, t), noise)
    for s in range(b):
        pos = tokens[s].nonzero().squeeze(-1).tolist()
        for i, q in enumerate(pos):
            j = i + offset
            target = pos[j] if 0 <= j < len(pos) else q
            attn[s, :, q, target] += 0.7
    return attn


def _without_first_token(tokens):
    q = tokens.clone()
    for s in range(q.shape[0]):
        q[s, tokens[s].nonzero()[0]] = False
    return q


def test_previous_token_head_is_positional_minus_one_with_left_padding(masks):
    tokens, _ = masks([3, 6, 4, 2], left_pad=True)
    acc = PositionalAccumulator((1,), replicates=20)
    # The first token has no previous token: it is not a query of a "previous-token" head.
    acc.update(_offset_head(tokens, -1), _without_first_token(tokens), tokens)
    shares = acc.finalize().estimate  # (1, K) over offsets -2..2
    assert torch.allclose(shares[0], torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64))
    assert positional_labels(shares, acc.offsets) == {(0,): -1}


def test_share_counts_all_tokens_and_is_padding_invariant(masks):
    lengths = [3, 6, 4, 2]
    results = []
    for left in (True, False):
        tokens, _ = masks(lengths, left_pad=left)
        acc = PositionalAccumulator((1,), offsets=(-1, 0, 1), replicates=10)
        acc.update(_offset_head(tokens, -1), tokens, tokens)
        results.append(acc.finalize().estimate[0])
    n = sum(lengths)
    expected = torch.tensor([(n - len(lengths)) / n, len(lengths) / n, 0.0], dtype=torch.float64)
    assert torch.allclose(results[0], expected)
    assert torch.allclose(results[1], expected)
    assert positional_labels(results[0][None], (-1, 0, 1)) == {}  # 13/19 < 0.9


def test_next_token_head_and_layer_list(masks):
    tokens, _ = masks([5, 5], left_pad=True)
    acc = PositionalAccumulator((2, 1), replicates=10)
    acc.update([_offset_head(tokens, 1), _offset_head(tokens, 2)], tokens, tokens)
    shares = acc.finalize().estimate
    assert torch.isclose(shares[0, 0, 3], torch.tensor(0.8, dtype=torch.float64))  # offset +1, 4 of 5
    assert torch.isclose(shares[1, 0, 4], torch.tensor(0.6, dtype=torch.float64))  # offset +2, 3 of 5


def test_eos_sink_counts_as_no_offset(masks):
    tokens, eos = masks([4], left_pad=True)
    attn = _offset_head(tokens, -1)
    attn[0, 0, :, eos[0]] = 0.9  # EOS dominates every row
    # EOS not a candidate: still the previous token
    offset, has = argmax_offsets(candidate_argmax(attn, tokens, tokens), tokens, tokens)
    assert (offset[0, 0][has[0, 0]] == torch.tensor([0, -1, -1, -1])).all()
    _, has_sink = argmax_offsets(candidate_argmax(attn, tokens, tokens, eos), tokens, tokens, sink_key_mask=eos)
    assert not has_sink.any()
