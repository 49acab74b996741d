"""How far apart rounding alone can put two computations of the same attention.

Two kernels that compute the same attention (fused SDPA, fairseq's bmm / softmax / bmm,
torch's baddbmm variant) perform the same sums in different orders. A sum of n products
computed in floating point is within gamma_n * sum|x_i y_i| of the exact sum, gamma_n =
n u / (1 - n u) with unit roundoff u = eps / 2 (Higham, "Accuracy and Stability of Numerical
Algorithms", 2nd ed., section 3.1), whatever the order; two orders are therefore within
2 gamma_n * sum|x_i y_i| ~= n * eps * sum|x_i y_i| of each other.

One attention block chains three reductions whose order the kernels choose: the scores q.k
(head_dim terms), the context sum_s p_s v_s (src_len terms) and out_proj (its in_features
terms); the softmax between them passes a score error on with a factor <= 1 (p * (1 - p) <= 1/4
per score, on probabilities that sum to 1). Backward adds the same reductions transposed plus
one over the queries (tgt_len terms). With the unit-scale inputs and Xavier-initialised weights
of these tests, sum|x_i y_i| of every reduction is at most a few times the largest |value|
involved; ATTENTION_MAGNITUDE_FACTOR = 4 covers that (measured <= 2.3 over the
parity cases, for out_proj and the context sums).

bfloat16 kernels accumulate in float32 but round every tensor they hand on (q, k, v, scores,
probabilities, head outputs, gated outputs, output) to 8 bits of mantissa: at most
BF16_ROUNDINGS such roundings of O(|value|) quantities lie between two bf16 paths.
"""
import pytest
import torch

ATTENTION_MAGNITUDE_FACTOR = 4.0
BF16_ROUNDINGS = 8


def magnitude(reference: torch.Tensor) -> float:
    """max(1, max |reference|): the scale rounding errors are relative to."""
    finite = reference.detach().double()
    finite = finite[torch.isfinite(finite)]
    return max(1.0, float(finite.abs().max())) if finite.numel() else 1.0


def sum_tolerance(dtype: torch.dtype, terms: int, scale: float) -> float:
    """Largest difference between two orders of one sum of `terms` terms whose magnitudes add
    up to `scale`: 2 gamma_n * scale ~= n * eps * scale (module doc). Also the bound for a chain
    of `terms` roundings of O(scale) values (elementwise formulas evaluated two ways)."""
    return terms * torch.finfo(dtype).eps * scale


def rounding_tolerance(dtype: torch.dtype, reduction_lengths, scale: float) -> float:
    """Largest difference rounding can make between two orders of the same attention sums
    (module doc): eps * sum(n) * 4 * scale for float32 / float64, 8 eps * scale for bfloat16."""
    if dtype == torch.bfloat16:
        return BF16_ROUNDINGS * torch.finfo(dtype).eps * scale
    return sum_tolerance(dtype, sum(reduction_lengths), ATTENTION_MAGNITUDE_FACTOR * scale)


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over finite entries; -inf / nan must sit at the same places."""
    a, b = a.detach().double(), b.detach().double()
    assert a.shape == b.shape, f"shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}"
    same_special = (torch.isnan(a) == torch.isnan(b)).all() and (torch.isinf(a) == torch.isinf(b)).all()
    assert same_special, "inf / nan at different places"
    finite = torch.isfinite(a)
    return float((a[finite] - b[finite]).abs().max()) if finite.any() else 0.0


# The same bound for a whole model, the tests' 2+2-layer d=32 transformer (tests/core/helpers.py,
# 4 heads of dim 8 per block, sources of 7 tokens): each of its 6 attention blocks may differ by
# eps * (head_dim + src_len + embed_dim) * 4 * scale between kernels; a difference at a block's
# output reaches the log-probs amplified by at most 16 (measured <= 3.1: a +-1e-6 perturbation
# of any block's output moves the log-probs by <= 3.1e-6); scale = max(1, max |log-prob|)
# bounds the activations (max |log-prob| ~ 7, activations <= 4).
BLOCKS, BLOCK_SUMS, AMPLIFICATION = 6, 8 + 7 + 32, 16


def model_rounding_tolerance(dtype: torch.dtype, reference: torch.Tensor) -> float:
    """Rounding bound between two kernel choices for the tests' tiny transformer (above)."""
    return BLOCKS * rounding_tolerance(dtype, (BLOCK_SUMS,), magnitude(reference)) * AMPLIFICATION


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """For test modules that import it: their tensors are tiny, and intra-op threads only add
    synchronisation (3x slower on a loaded 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
