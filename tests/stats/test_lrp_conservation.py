"""LRP on a tiny fairseq Transformer conserves relevance: what leaves a layer's output reaches
its inputs, less what the biases absorb; plain gradient x input does not."""
import pytest
import torch

from fairseq_heads.stats.capture import capture_heads
from fairseq_heads.stats.metrics.lrp import (
    conservative_lrp_rules,
    lrp_head_relevance,
    normalise_over_layer,
    objective_head_relevance,
    top1_logits,
    top1_objective,
    vocabulary_projection,
)
from tests.core.helpers import build_model, random_batch, write_dictionaries

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    _, model = build_model(write_dictionaries(tmp_path_factory.mktemp("dicts")), "transformer")
    model.eval()
    with torch.no_grad():  # non-zero biases everywhere, so that bias relevance matters
        for name, parameter in model.named_parameters():
            if name.endswith(".bias"):
                parameter.normal_(0, 0.2)
    return model


def relevance_cuts(model, rules: bool):
    """Run the model; return R = sum of top-1 logits and the relevance (sum x * dR/dx) at a
    series of cuts through the graph, each with the relevance the biases beyond it absorb."""
    src, lengths, prev = random_batch(40)
    inputs = {}
    hooks = [model.encoder.layers[i].register_forward_pre_hook(
        lambda m, a, i=i: inputs.__setitem__(("enc", i), a[0])) for i in range(2)]
    hooks += [model.decoder.layers[i].register_forward_pre_hook(
        lambda m, a, i=i: inputs.__setitem__(("dec", i), a[0])) for i in range(2)]
    hooks.append(model.encoder.register_forward_hook(
        lambda m, a, out: inputs.__setitem__("encoder_out", out["encoder_out"][0])))

    def encoder_out_as_used_by_last_layer(module, args, kwargs):
        # A fresh alias of encoder_out for decoder layer 1's keys/values, so that its gradient
        # is the relevance that reaches the encoder through that layer only.
        alias = kwargs["key"].view_as(kwargs["key"])
        inputs["encoder_out_in_layer_1"] = alias
        return args, dict(kwargs, key=alias, value=alias)

    hooks.append(model.decoder.layers[1].encoder_attn.register_forward_pre_hook(
        encoder_out_as_used_by_last_layer, with_kwargs=True))
    out_proj = model.decoder.layers[1].encoder_attn.out_proj
    hooks.append(out_proj.register_forward_hook(lambda m, a, out: inputs.__setitem__("block_out", out)))
    try:
        with (conservative_lrp_rules(model) if rules else torch.enable_grad()), \
                capture_heads(model, weights=False) as captured:
            logits, _ = model(src, lengths, prev)
            objective = top1_logits(logits, torch.ones(prev.shape, dtype=torch.bool)).sum()
            tensors = dict(inputs, heads=captured.head_outputs[("enc-dec", 1)])
            biases = {n: p for n, p in model.named_parameters() if n.endswith(".bias")}
            grads = torch.autograd.grad(objective, list(tensors.values()) + list(biases.values()),
                                        allow_unused=True)
    finally:
        for hook in hooks:
            hook.remove()
    relevance = {}
    for (name, value), grad in zip(list(tensors.items()) + list(biases.items()), grads):
        relevance[name] = 0.0 if grad is None else float((value.detach() * grad).double().sum())

    def bias_relevance(prefixes):
        return sum(v for n, v in relevance.items() if n in biases and n.startswith(prefixes))

    total = float(objective.detach())
    cuts = {
        "embeddings": relevance[("enc", 0)] + relevance[("dec", 0)]
        + bias_relevance(("encoder.", "decoder.")),
        "encoder layer 1": relevance[("enc", 1)] + relevance[("dec", 0)]
        + bias_relevance(("encoder.layers.1.", "decoder.")),
        "encoder output": relevance["encoder_out"] + relevance[("dec", 0)] + bias_relevance(("decoder.",)),
        "decoder layer 1": relevance["encoder_out_in_layer_1"] + relevance[("dec", 1)]
        + bias_relevance(("decoder.layers.1.",)),
    }
    head_cut = (relevance["heads"] + relevance["decoder.layers.1.encoder_attn.out_proj.bias"],
                relevance["block_out"])
    return total, cuts, head_cut


def test_relevance_is_conserved_through_every_layer(tiny):
    total, cuts, (heads_plus_bias, block_output) = relevance_cuts(tiny, rules=True)
    assert abs(total) > 1.0
    for name, value in cuts.items():
        assert value == pytest.approx(total, rel=1e-4, abs=1e-3), name
    # Inside one attention block: the heads' relevance plus out_proj's bias = the block output's.
    assert heads_plus_bias == pytest.approx(block_output, rel=1e-4, abs=1e-4)


def test_plain_gradient_times_input_is_not_conserved(tiny):
    """The same cuts without the rules (attention and LayerNorm std not constant) lose relevance:
    the conservation check above can fail."""
    total, cuts, _ = relevance_cuts(tiny, rules=False)
    assert any(abs(value - total) > 1e-2 * abs(total) for value in cuts.values())


def test_rules_leave_forward_values_and_model_unchanged(tiny):
    src, lengths, prev = random_batch(40)
    with torch.no_grad():
        plain, _ = tiny(src, lengths, prev)
        with conservative_lrp_rules(tiny):
            ruled, _ = tiny(src, lengths, prev)
        after, _ = tiny(src, lengths, prev)
    torch.testing.assert_close(ruled, plain, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(after, plain)
    assert all("forward" not in m.__dict__ for m in tiny.modules())


@pytest.mark.parametrize("mode", ["sentence", "step"])
def test_head_relevance_is_normalised_per_layer(tiny, mode):
    src, lengths, prev = random_batch(40)
    target_mask = torch.ones(prev.shape, dtype=torch.bool)
    target_mask[1, 4:] = False  # a shorter reference
    with conservative_lrp_rules(tiny), capture_heads(tiny, weights=False) as captured:
        logits, _ = tiny(src, lengths, prev)
        keys = sorted(captured.head_outputs)
        numerator, denominator = lrp_head_relevance(logits, target_mask, captured, keys, mode)
    expected_units = target_mask.sum(-1).double() if mode == "step" else torch.ones(3, dtype=torch.double)
    torch.testing.assert_close(denominator, expected_units)
    for key in keys:
        assert (numerator[key] >= 0).all()
        torch.testing.assert_close(numerator[key].sum(-1), expected_units)


def test_step_mode_is_the_mean_of_single_position_relevances(tiny):
    """Step mode's per-sentence sum equals summing, over positions, the sentence mode run with a
    target mask that keeps only that position."""
    src, lengths, prev = random_batch(40)
    full = torch.ones(prev.shape, dtype=torch.bool)
    with conservative_lrp_rules(tiny), capture_heads(tiny, weights=False) as captured:
        logits, _ = tiny(src, lengths, prev)
        keys = sorted(captured.head_outputs)
        step, _ = lrp_head_relevance(logits, full, captured, keys, "step")
        by_hand = {key: torch.zeros_like(step[key]) for key in keys}
        for t in range(prev.shape[1]):
            only_t = torch.zeros_like(full)
            only_t[:, t] = True
            logits, _ = tiny(src, lengths, prev)
            single, _ = lrp_head_relevance(logits, only_t, captured, keys, "sentence")
            for key in keys:
                by_hand[key] += single[key]
    for key in keys:
        torch.testing.assert_close(step[key], by_hand[key])


def test_normalise_over_layer():
    values = torch.tensor([[1.0, -3.0], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(normalise_over_layer(values),
                               torch.tensor([[0.25, 0.75], [0.0, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("mode", ["sentence", "step"])
def test_top1_objective_gives_the_relevance_of_the_full_logits_bit_for_bit(tiny, mode):
    """top1_objective skips the backward through the vocabulary projection; the head relevance
    it gives is that of top1_logits on the full logits, exactly."""
    assert vocabulary_projection(tiny) is tiny.decoder.output_projection
    src, lengths, prev = random_batch(40)
    target_mask = torch.ones(prev.shape, dtype=torch.bool)
    target_mask[1, 4:] = False
    net_input = {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}
    with conservative_lrp_rules(tiny), capture_heads(tiny, weights=False) as captured:
        logits, _ = tiny(**net_input)
        keys = sorted(captured.head_outputs)
        full, units = lrp_head_relevance(logits, target_mask, captured, keys, mode)
        objective = top1_objective(tiny, net_input, target_mask)
        torch.testing.assert_close(objective, top1_logits(logits, target_mask))
        fast, fast_units = objective_head_relevance(objective, target_mask, captured, keys, mode)
    assert torch.equal(units, fast_units)
    for key in keys:
        assert torch.equal(full[key], fast[key]), key
