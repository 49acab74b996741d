"""Gradient importance (Michel et al. 2019) is the derivative of the loss wrt a head's gate."""
import pytest
import torch

from fairseq_heads.stats.capture import capture_heads, python_attention_path
from fairseq_heads.stats.metrics.grad import gradient_importance, normalise_layers_l2
from fairseq_heads.stats.metrics.lrp import per_head_grad_products, reference_nll
from fairseq_heads.gating.attention_tensors import scale_heads
from fairseq_heads.heads import iter_attention
from tests.core.helpers import build_model, random_batch, write_dictionaries

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

PAD = 1


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(1)
    _, model = build_model(write_dictionaries(tmp_path_factory.mktemp("dicts")), "transformer")
    return model.eval()


def batch():
    src, lengths, prev = random_batch(40, seed=3)
    target = torch.cat([prev[:, 1:], torch.full((prev.shape[0], 1), 2)], dim=1)
    target[2, -2:] = PAD  # a shorter reference: padding must not count
    return src, lengths, prev, target


def loss_with_head_scales(model, scales):
    """NLL of the reference with every head's output multiplied by scales[(type, layer)] (H,)."""
    src, lengths, prev, target = batch()
    hooks = [attention.out_proj.register_forward_pre_hook(
        lambda m, inputs, key=(t, layer): (scale_heads(inputs[0], scales[key]),))
        for t, layer, attention in iter_attention(model)]
    try:
        with python_attention_path(model):  # the fused path would apply out_proj internally
            logits, extra = model(src, lengths, prev)
        lprobs = model.get_normalized_probs((logits, extra), log_probs=True)
        return reference_nll(lprobs, target, PAD)
    finally:
        for hook in hooks:
            hook.remove()


def test_importance_is_the_derivative_wrt_a_head_gate(tiny):
    scales = {(t, layer): torch.ones(a.num_heads, requires_grad=True)
              for t, layer, a in iter_attention(tiny)}
    loss = loss_with_head_scales(tiny, scales)
    derivative = dict(zip(scales, torch.autograd.grad(loss, list(scales.values()))))

    src, lengths, prev, target = batch()
    with capture_heads(tiny, weights=False) as captured:
        logits, extra = tiny(src, lengths, prev)
        loss = reference_nll(tiny.get_normalized_probs((logits, extra), log_probs=True), target, PAD)
        products = per_head_grad_products(loss, captured, sorted(scales), retain_graph=True)
        importance = gradient_importance(loss, captured, sorted(scales))
    for key, value in derivative.items():
        # Summed over the batch, sum <o, dL/do> is dL/dxi; per sentence it is |dL(x)/dxi| >= 0.
        torch.testing.assert_close(products[key].sum(0), value.double(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(importance[key], products[key].abs())
        assert importance[key].shape == (3, 4)


def test_importance_matches_a_finite_difference(tiny):
    key, head, step = ("enc-dec", 1), 2, 1e-2
    with capture_heads(tiny, weights=False) as captured:
        src, lengths, prev, target = batch()
        logits, extra = tiny(src, lengths, prev)
        loss = reference_nll(tiny.get_normalized_probs((logits, extra), log_probs=True), target, PAD)
        analytic = per_head_grad_products(loss, captured, [key])[key].sum(0)[head]

    def loss_at(value):
        scales = {(t, layer): torch.ones(a.num_heads) for t, layer, a in iter_attention(tiny)}
        scales[key][head] = value
        with torch.no_grad():
            return float(loss_with_head_scales(tiny, scales))

    numeric = (loss_at(1 + step) - loss_at(1 - step)) / (2 * step)
    assert abs(float(analytic)) > 1e-3
    assert float(analytic) == pytest.approx(numeric, rel=2e-2, abs=1e-3)


def test_layer_normalisation_divides_by_the_l2_norm():
    values = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(normalise_layers_l2(values),
                               torch.tensor([[0.6, 0.8], [0.0, 0.0]], dtype=torch.float64))
