"""Shared builders for hand-made padded batches (source-style: tokens then EOS, padded left or right)."""

import pytest
import torch


def padded_masks(lengths, left_pad=True, eos=True):
    """(token_mask, eos_mask), each (B, T): n real tokens followed by EOS, padded on the left or right."""
    total = max(lengths) + int(eos)
    token_mask = torch.zeros(len(lengths), total, dtype=torch.bool)
    eos_mask = torch.zeros_like(token_mask)
    for b, n in enumerate(lengths):
        start = total - n - int(eos) if left_pad else 0
        token_mask[b, start : start + n] = True
        if eos:
            eos_mask[b, start + n] = True
    return token_mask, eos_mask


@pytest.fixture
def masks():
    return padded_masks
