"""GatedMultiheadAttention with open gates against fairseq's MultiheadAttention, option by option.

The four computations compared (fairseq_heads/modules/gated_attention.py explains the first two):

    gated fused     SDPA                       need_weights=False (what fairseq's layers ask)
    gated explicit  bmm / softmax / bmm        weights asked for, before_softmax, use_sdpa=False
    plain fast      torch's F.multi_head_attention_forward: fairseq's choice when not
                    incremental, not static_kv, no skip_embed_dim_check
    plain python    fairseq's own Python path (incremental decoding, static_kv, pruned blocks)

How each comparison is judged:

- *same path, exact (difference 0)*: gated explicit vs plain python (the same ops on tensors
  of the same shapes and strides), and gated fused vs plain fast when SDPA receives the same
  arguments (no mask, no padding, no extra keys: both call it with attn_mask=None).
- *different kernels*: within `rounding_tolerance` (tests/core/rounding.py: eps * (head_dim +
  src_len + out_proj width [+ tgt_len for gradients]) * 4 * max(1, |reference|), the bound on
  what reordering those sums can change). In float32 here that is ~1e-5; measured differences
  are <= 5e-7; any semantic slip (a mask, a gate, a bias key) moves outputs by >= 1e-2.
- *where plain fairseq is wrong*, against `reference_attention`, attention written from its
  definition in float64 from the module's parameters. Plain fairseq is wrong on:
    * python path + add_bias_kv: fails `assert k.size(1) == src_len`;
    * python path + bool attn_mask: adds it (+1 where True) instead of blocking;
    * python path + encoder-decoder attention with kdim != vdim: projects `key` with v_proj
      (shape error);
    * fast path + need_head_weights: returns head-averaged weights;
    * fast path + before_softmax: ignored (returns the output);
    * fast path + uint8 attn_mask: rejected by torch ("only bool and floating types").
  test_plain_fairseq_bugs_the_gated_module_does_not_have pins each of these down.
"""
import copy
import itertools
import math

import pytest
import torch
from fairseq.modules import MultiheadAttention

from fairseq_heads.gating.gated_attention import (
    GatedMultiheadAttention,
    is_causal_mask,
    pad_key_columns,
)

from .rounding import magnitude, max_difference, one_thread, rounding_tolerance  # noqa: F401

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

EMBED, HEADS, HEAD_DIM = 16, 4, 4
TGT_LEN, SRC_LEN, BSZ = 5, 6, 3
KDIM, VDIM = 12, 20

KINDS = {
    "self": dict(self_attention=True),
    "enc-dec": dict(encoder_decoder_attention=True),
    "enc-dec-kdim-vdim": dict(encoder_decoder_attention=True, kdim=KDIM, vdim=VDIM),
}
MASKS = ("none", "causal", "float", "bool")
PADDINGS = ("none", "bool")


def case_ids():
    """Every kind x extra keys x mask x padding; uint8 masks and padding (read as bool) on one
    combination each per kind, to keep the suite fast."""
    for kind, bias_kv, zero_attn, mask, padding in itertools.product(
            KINDS, (False, True), (False, True), MASKS, PADDINGS):
        if mask == "causal" and kind != "self":
            continue  # a causal mask is square: self-attention
        yield kind, bias_kv, zero_attn, mask, padding
    for kind in KINDS:
        yield kind, False, False, "uint8", "none"
        yield kind, True, True, "float", "uint8"


CASES = list(case_ids())


def case_name(case):
    kind, bias_kv, zero_attn, mask, padding = case
    return f"{kind}-{'biaskv' if bias_kv else 'nobias'}-{'zero' if zero_attn else 'nozero'}-mask_{mask}-pad_{padding}"


# ---------------------------------------------------------------- building blocks


def plain_and_gated(kind, bias_kv=False, zero_attn=False, dropout=0.0, seed=0):
    """A plain fairseq block and a gated copy of it with the same weights, gates fixed open."""
    torch.manual_seed(seed)
    plain = MultiheadAttention(EMBED, HEADS, dropout=dropout, add_bias_kv=bias_kv,
                               add_zero_attn=zero_attn, **KINDS[kind])
    with torch.no_grad():  # non-zero biases, so that a missing bias would show
        for proj in (plain.q_proj, plain.k_proj, plain.v_proj, plain.out_proj):
            proj.bias.normal_(0, 0.1)
    gated = GatedMultiheadAttention.from_attention(copy.deepcopy(plain))
    gated.gate.fix(torch.ones(HEADS))
    return plain.eval(), gated.eval()


def make_inputs(kind, mask, padding, dtype=torch.float32, seed=1):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(TGT_LEN, BSZ, EMBED, generator=g)
    if kind == "self":
        key = value = query
        src_len = TGT_LEN
    else:
        src_len = SRC_LEN
        key = torch.randn(SRC_LEN, BSZ, KDIM if kind.endswith("vdim") else EMBED, generator=g)
        value = (torch.randn(SRC_LEN, BSZ, VDIM, generator=g) if kind.endswith("vdim") else key)
    attn_mask = None
    if mask == "causal":
        attn_mask = torch.triu(torch.full((TGT_LEN, TGT_LEN), float("-inf")), 1)
    elif mask != "none":
        blocked = torch.rand(TGT_LEN, src_len, generator=g) < 0.3
        blocked[:, -1] = False  # no query loses every key
        if mask == "float":  # finite values and -inf
            attn_mask = torch.randn(TGT_LEN, src_len, generator=g).masked_fill(blocked, float("-inf"))
        else:
            attn_mask = blocked.to(torch.bool if mask == "bool" else torch.uint8)
    key_padding_mask = None
    if padding != "none":
        # No query may lose every key (softmax over nothing is nan in fairseq's Python path,
        # finite in SDPA): the last key stays visible under a random mask, the first under the
        # causal one.
        pads = torch.zeros(BSZ, src_len, dtype=torch.bool)
        if mask == "causal":  # right padding, as fairseq pads targets
            pads[0, -2:] = True
            pads[2, -1:] = True
        else:  # left padding, as fairseq pads sources
            pads[0, :2] = True
            pads[2, :1] = True
        key_padding_mask = pads.to(torch.bool if padding == "bool" else torch.uint8)
    tensors = [query, key, value]
    if dtype != torch.float32:
        tensors = [t.to(dtype) for t in tensors]
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(dtype)
    same_value = value is key
    query, key, value = tensors
    if kind == "self":
        key = value = query
    elif same_value:  # fairseq's layers pass the encoder output as both
        value = key
    return dict(query=query, key=key, value=value, attn_mask=attn_mask,
                key_padding_mask=key_padding_mask)


def torch_semantics_mask(attn_mask):
    """torch's fast path takes bool masks but not uint8 ones: the same mask as bool."""
    if attn_mask is not None and attn_mask.dtype == torch.uint8:
        return attn_mask.bool()
    return attn_mask


def reference_attention(module, query, key, value, attn_mask=None, key_padding_mask=None):
    """Attention from its definition, in float64, from `module`'s parameters: per head
    softmax(q k^T / sqrt(d) + mask) v, keys extended by bias_k and a zero key when the module has
    them (visible to every query), bool / uint8 masks blocking where nonzero, padded keys
    blocked; heads times the gate, then out_proj. Returns (output, probabilities (B, H, T, S),
    scores (B, H, T, S), values (B, H, S, D))."""
    def f(t):
        return t.detach().double()

    def linear(layer, x):
        return x @ f(layer.weight).T + f(layer.bias)

    heads, head_dim = module.num_heads, module.head_dim
    if module.self_attention:
        key = value = query
    q, k, v = (linear(module.q_proj, f(query)), linear(module.k_proj, f(key)),
               linear(module.v_proj, f(value)))
    tgt_len, bsz = q.shape[:2]

    def split(x):
        return x.view(x.shape[0], bsz, heads, head_dim).permute(1, 2, 0, 3)

    q, k, v = split(q), split(k), split(v)
    extra = 0
    if module.bias_k is not None:
        k = torch.cat([k, f(module.bias_k).view(1, heads, 1, head_dim).expand(bsz, -1, -1, -1)], 2)
        v = torch.cat([v, f(module.bias_v).view(1, heads, 1, head_dim).expand(bsz, -1, -1, -1)], 2)
        extra += 1
    if module.add_zero_attn:
        zeros = torch.zeros(bsz, heads, 1, head_dim, dtype=torch.float64)
        k, v = torch.cat([k, zeros], 2), torch.cat([v, zeros], 2)
        extra += 1
    scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
    if attn_mask is not None:
        additive = (f(attn_mask) if attn_mask.is_floating_point()
                    else torch.zeros(attn_mask.shape, dtype=torch.float64).masked_fill(attn_mask.bool(), -math.inf))
        scores = scores + torch.nn.functional.pad(additive, (0, extra))
    if key_padding_mask is not None:
        pads = torch.nn.functional.pad(key_padding_mask.bool(), (0, extra))
        scores = scores.masked_fill(pads[:, None, None, :], -math.inf)
    probs = scores.softmax(-1)
    gate = f(module.gate()) if isinstance(module, GatedMultiheadAttention) else torch.ones(heads, dtype=torch.float64)
    context = (probs @ v) * gate.view(1, heads, 1, 1)
    context = context.permute(2, 0, 1, 3).reshape(tgt_len, bsz, heads * head_dim)
    return linear(module.out_proj, context), probs, scores, v


def run(module, inputs, **options):
    """Forward + backward of a fixed random objective: (output, weights, {name: gradient})."""
    names = ["query"] if module.self_attention else ["query", "key"]
    if not module.self_attention and inputs["value"] is not inputs["key"]:
        names.append("value")
    leaves = {name: inputs[name].detach().clone().requires_grad_(True) for name in names}
    query = leaves["query"]
    key = leaves.get("key", query)
    value = leaves.get("value", key)
    module.zero_grad()
    output, weights = module(query, key, value, key_padding_mask=inputs["key_padding_mask"],
                             attn_mask=inputs["attn_mask"], **options)
    weight = torch.randn(output.shape, generator=torch.Generator().manual_seed(7)).to(output.dtype)
    (output * weight).sum().backward()
    grads = {f"input.{name}": leaf.grad for name, leaf in leaves.items()}
    grads.update({name: p.grad for name, p in module.named_parameters()
                  if p.grad is not None and not name.startswith("gate.")})
    return output.detach(), weights, grads


def assert_close(actual, expected, dtype, lengths, what):
    tolerance = rounding_tolerance(dtype, lengths, magnitude(expected))
    difference = max_difference(actual, expected)
    assert difference <= tolerance, f"{what}: max difference {difference:.3g} > tolerance {tolerance:.3g}"


def assert_runs_equal(actual, expected, exact, dtype, what):
    (out_a, _, grads_a), (out_e, _, grads_e) = actual, expected
    src_len = SRC_LEN + 2
    forward_lengths = (HEAD_DIM, src_len, EMBED)
    backward_lengths = (HEAD_DIM, src_len, TGT_LEN, EMBED)
    assert grads_a.keys() == grads_e.keys()
    if exact:
        assert torch.equal(out_a, out_e), f"{what}: output differs on the same path"
        for name in grads_e:
            assert torch.equal(grads_a[name], grads_e[name]), f"{what}: d/d{name} differs on the same path"
        return
    assert_close(out_a, out_e, dtype, forward_lengths, f"{what} output")
    for name in grads_e:
        assert_close(grads_a[name], grads_e[name], dtype, backward_lengths, f"{what} d/d{name}")


def plain_python_path_is_right(kind, bias_kv, mask):
    return not bias_kv and mask not in ("bool", "uint8") and kind != "enc-dec-kdim-vdim"


def sdpa_gets_the_same_arguments(bias_kv, zero_attn, mask, padding):
    return not bias_kv and not zero_attn and mask == "none" and padding == "none"


# ---------------------------------------------------------------- the option matrix


@pytest.mark.parametrize("case", CASES, ids=case_name)
def test_fused_path_equals_plain_fairseq_output_and_gradients(case):
    kind, bias_kv, zero_attn, mask, padding = case
    plain, gated = plain_and_gated(kind, bias_kv, zero_attn)
    inputs = make_inputs(kind, mask, padding)
    fused = run(gated, inputs, need_weights=False)
    plain_inputs = dict(inputs, attn_mask=torch_semantics_mask(inputs["attn_mask"]))
    fast = run(plain, plain_inputs, need_weights=False)  # torch's fast path: right on all of these
    assert_runs_equal(fused, fast, sdpa_gets_the_same_arguments(bias_kv, zero_attn, mask, padding),
                      torch.float32, "gated fused vs plain fast")
    reference, *_ = reference_attention(gated, **inputs)
    assert_close(fused[0], reference, torch.float32, (HEAD_DIM, SRC_LEN + 2, EMBED),
                 "gated fused vs float64 reference")


@pytest.mark.parametrize("case", CASES, ids=case_name)
def test_explicit_path_equals_plain_fairseq_with_weights_and_head_weights(case):
    kind, bias_kv, zero_attn, mask, padding = case
    plain, gated = plain_and_gated(kind, bias_kv, zero_attn)
    inputs = make_inputs(kind, mask, padding)
    reference, probs, _, _ = reference_attention(gated, **inputs)
    for need_head_weights in (False, True):
        explicit = run(gated, inputs, need_weights=True, need_head_weights=need_head_weights)
        expected_weights = probs.transpose(0, 1) if need_head_weights else probs.mean(dim=1)
        assert_close(explicit[1], expected_weights, torch.float32, (HEAD_DIM, SRC_LEN + 2),
                     f"weights (per head: {need_head_weights}) vs float64 reference")
        if plain_python_path_is_right(kind, bias_kv, mask):
            plain.skip_embed_dim_check = True  # forces fairseq's Python path
            python = run(plain, inputs, need_weights=True, need_head_weights=need_head_weights)
            plain.skip_embed_dim_check = False
            assert_runs_equal(explicit, python, True, torch.float32, "gated explicit vs plain python")
            assert torch.equal(explicit[1], python[1]), "weights differ on the same path"
        if not need_head_weights:  # torch's fast path returns head-averaged weights only
            fast = run(plain, dict(inputs, attn_mask=torch_semantics_mask(inputs["attn_mask"])),
                       need_weights=True)
            assert_runs_equal(explicit, fast, False, torch.float32, "gated explicit vs plain fast")
        assert_close(explicit[0], reference, torch.float32, (HEAD_DIM, SRC_LEN + 2, EMBED),
                     "gated explicit vs float64 reference")


@pytest.mark.parametrize("case", [c for c in CASES if c[3] in ("none", "float", "bool")
                                  and c[1] == c[2] and c[4] == "bool"], ids=case_name)
def test_before_softmax_returns_the_masked_scores_and_values(case):
    kind, bias_kv, zero_attn, mask, padding = case
    plain, gated = plain_and_gated(kind, bias_kv, zero_attn)
    inputs = make_inputs(kind, mask, padding)
    with torch.no_grad():
        scores, values = gated(inputs["query"], inputs["key"], inputs["value"], before_softmax=True,
                               key_padding_mask=inputs["key_padding_mask"], attn_mask=inputs["attn_mask"])
        _, _, expected_scores, expected_values = reference_attention(gated, **inputs)
        src_len = expected_scores.shape[-1]
        assert_close(scores, expected_scores.reshape(BSZ * HEADS, TGT_LEN, src_len), torch.float32,
                     (HEAD_DIM,), "scores vs float64 reference")
        assert_close(values, expected_values.reshape(BSZ * HEADS, src_len, HEAD_DIM), torch.float32,
                     (EMBED,), "values vs float64 reference")
        if plain_python_path_is_right(kind, bias_kv, mask):
            plain.skip_embed_dim_check = True
            python_scores, python_values = plain(
                inputs["query"], inputs["key"], inputs["value"], before_softmax=True,
                key_padding_mask=inputs["key_padding_mask"], attn_mask=inputs["attn_mask"])
            assert torch.equal(scores, python_scores) and torch.equal(values, python_values)


@pytest.mark.parametrize("kind,mask,padding", [("self", "causal", "none"), ("self", "causal", "bool"),
                                               ("self", "float", "bool"), ("enc-dec", "none", "bool"),
                                               ("enc-dec-kdim-vdim", "float", "uint8")])
def test_train_mode_with_gates_fixed_open_and_dropout_under_the_same_seed(kind, mask, padding):
    """Dropout 0.3 in train mode: the same seed draws the same dropout masks in both modules, so
    they agree to rounding (different draws would differ by O(1))."""
    plain, gated = plain_and_gated(kind, dropout=0.3)
    plain.train(), gated.train()
    inputs = make_inputs(kind, mask, padding)
    plain_inputs = dict(inputs, attn_mask=torch_semantics_mask(inputs["attn_mask"]))
    for need_weights in (False, True):
        torch.manual_seed(11)
        gated_run = run(gated, inputs, need_weights=need_weights)
        torch.manual_seed(11)
        plain_run = run(plain, plain_inputs, need_weights=need_weights)
        assert_runs_equal(gated_run, plain_run, False, torch.float32, f"train, need_weights={need_weights}")
    if plain_python_path_is_right(kind, False, mask):
        plain.skip_embed_dim_check = True
        torch.manual_seed(11)
        python = run(plain, inputs, need_weights=False)
        gated.use_sdpa = False
        torch.manual_seed(11)
        explicit = run(gated, inputs, need_weights=False)
        assert_runs_equal(explicit, python, True, torch.float32, "train, explicit vs python")


@pytest.mark.parametrize("kind,bias_kv,zero_attn,mask,padding", [
    ("self", False, False, "none", "none"), ("self", False, False, "causal", "none"),
    ("self", True, True, "causal", "bool"), ("enc-dec", False, False, "none", "bool"),
    ("enc-dec-kdim-vdim", True, False, "float", "bool")])
def test_bf16(kind, bias_kv, zero_attn, mask, padding):
    plain, gated = plain_and_gated(kind, bias_kv, zero_attn)
    plain, gated = plain.to(torch.bfloat16), gated.to(torch.bfloat16)
    inputs = make_inputs(kind, mask, padding, dtype=torch.bfloat16)
    fused = run(gated, inputs, need_weights=False)
    fast = run(plain, inputs, need_weights=False)
    assert fused[0].dtype == torch.bfloat16
    assert_runs_equal(fused, fast, sdpa_gets_the_same_arguments(bias_kv, zero_attn, mask, padding),
                      torch.bfloat16, "bf16 gated fused vs plain fast")
    explicit = run(gated, inputs, need_weights=True)
    assert_runs_equal(explicit, fused, False, torch.bfloat16, "bf16 explicit vs fused")
    if plain_python_path_is_right(kind, bias_kv, mask):
        plain.skip_embed_dim_check = True
        assert_runs_equal(explicit, run(plain, inputs, need_weights=True), True, torch.bfloat16,
                          "bf16 gated explicit vs plain python")
    reference, *_ = reference_attention(gated, **inputs)  # from the bf16 parameters
    assert_close(fused[0], reference, torch.bfloat16, (), "bf16 fused vs float64 reference")


# ---------------------------------------------------------------- incremental decoding


def beam_reorder(step, bsz, beam, generator):
    """A reordering as beam search makes them: each hypothesis continues one of its own
    sentence's hypotheses."""
    sentences = torch.arange(bsz // beam).repeat_interleave(beam)
    pick = torch.randint(0, beam, (bsz,), generator=generator)
    return sentences * beam + pick


SINGLE_QUERY_KERNELS = {"cpu-default": None, "sdpa": 0}  # min_sdpa_queries_on_cpu


@pytest.mark.parametrize("kernel", SINGLE_QUERY_KERNELS)
@pytest.mark.parametrize("bias_kv,zero_attn", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("need_weights", [False, True])
def test_incremental_self_attention_with_beam_reordering(bias_kv, zero_attn, need_weights, kernel):
    """Step t of incremental decoding (after every reorder) equals position t of the full
    causal pass over the hypothesis' history. Plain fairseq's incremental path is the reference
    where it is right (no bias_kv); the full gated pass everywhere. One-query steps run SDPA
    ("sdpa") or, as on CPU by default, the bmm arithmetic."""
    plain, gated = plain_and_gated("self", bias_kv, zero_attn)
    if SINGLE_QUERY_KERNELS[kernel] is not None:
        gated.min_sdpa_queries_on_cpu = SINGLE_QUERY_KERNELS[kernel]
    bsz, beam, steps = 4, 2, 5
    g = torch.Generator().manual_seed(3)
    history = torch.empty(0, bsz, EMBED)
    gated_state, plain_state = {}, {}
    with torch.no_grad():
        for t in range(steps):
            x = torch.randn(1, bsz, EMBED, generator=g)
            history = torch.cat([history, x])
            out, weights = gated(x, x, x, incremental_state=gated_state, need_weights=need_weights)
            causal = torch.triu(torch.full((t + 1, t + 1), float("-inf")), 1)
            full, *_ = gated(history, history, history, attn_mask=causal, need_weights=False)
            assert_close(out[0], full[t], torch.float32, (HEAD_DIM, steps + 2, EMBED),
                         f"step {t} vs full pass")
            assert (weights is not None) == need_weights
            if not bias_kv:
                expected, expected_weights = plain(x, x, x, incremental_state=plain_state,
                                                   need_weights=need_weights)
                if need_weights:  # both explicit: the same path
                    assert torch.equal(out, expected) and torch.equal(weights, expected_weights)
                else:
                    assert_close(out, expected, torch.float32, (HEAD_DIM, steps + 2, EMBED), f"step {t} vs plain")
            order = beam_reorder(t, bsz, beam, g)
            history = history[:, order]
            gated.reorder_incremental_state(gated_state, order)
            if not bias_kv:
                plain.reorder_incremental_state(plain_state, order)
    cached = gated._get_input_buffer(gated_state)
    assert cached["prev_key"].shape == (bsz, HEADS, steps, HEAD_DIM)  # bias / zero keys not cached


@pytest.mark.parametrize("kernel", SINGLE_QUERY_KERNELS)
@pytest.mark.parametrize("kind", ["enc-dec", "enc-dec-kdim-vdim"])
@pytest.mark.parametrize("beamable", [False, True])
@pytest.mark.parametrize("bias_kv", [False, True])
def test_incremental_static_kv_encoder_decoder_attention(kind, beamable, bias_kv, kernel):
    """static_kv: keys / values of the encoder output are projected once and cached; each step
    equals a non-incremental call on the same encoder output. With set_beam_size (fairseq's
    beamable enc-dec attention) the cache keeps one copy per sentence."""
    plain, gated = plain_and_gated(kind, bias_kv)
    if SINGLE_QUERY_KERNELS[kernel] is not None:
        gated.min_sdpa_queries_on_cpu = SINGLE_QUERY_KERNELS[kernel]
    bsz, beam, steps = 4, 2, 3
    g = torch.Generator().manual_seed(5)
    inputs = make_inputs(kind, "none", "bool")
    # each sentence's beam copies of the encoder output are equal, as in beam search
    key = inputs["key"][:, : bsz // beam].repeat_interleave(beam, dim=1)
    value = inputs["value"][:, : bsz // beam].repeat_interleave(beam, dim=1)
    pads = torch.zeros(bsz, SRC_LEN, dtype=torch.bool)
    pads[:2, :2] = True
    for module in (plain, gated):
        module.set_beam_size(beam if beamable else 1)
    gated_state, plain_state = {}, {}
    plain_is_right = kind == "enc-dec" and not bias_kv
    with torch.no_grad():
        for t in range(steps):
            x = torch.randn(1, bsz, EMBED, generator=g)
            for need_weights in (False, True):
                state = dict(gated_state) if need_weights else gated_state  # same step, both paths
                out, weights = gated(x, key, value, key_padding_mask=pads, incremental_state=state,
                                     static_kv=True, need_weights=need_weights)
                gated.set_beam_size(1)
                full, full_weights = gated(x, key, value, key_padding_mask=pads, need_weights=True)
                gated.set_beam_size(beam if beamable else 1)
                assert_close(out, full, torch.float32, (HEAD_DIM, SRC_LEN + 1, EMBED), f"step {t}")
                if need_weights:
                    assert_close(weights, full_weights, torch.float32, (HEAD_DIM, SRC_LEN + 1), "weights")
            if plain_is_right:
                expected, _ = plain(x, key, value, key_padding_mask=pads, incremental_state=plain_state,
                                    static_kv=True, need_weights=False)
                assert_close(out, expected, torch.float32, (HEAD_DIM, SRC_LEN, EMBED), f"step {t} vs plain")
            order = beam_reorder(t, bsz, beam, g)
            key, value, pads = key[:, order], value[:, order], pads[order]
            gated.reorder_incremental_state(gated_state, order)
            if plain_is_right:
                plain.reorder_incremental_state(plain_state, order)
    kv_bsz = bsz // beam if beamable else bsz
    assert gated._get_input_buffer(gated_state)["prev_key"].shape == (kv_bsz, HEADS, SRC_LEN, HEAD_DIM)


def test_static_kv_without_incremental_state_changes_nothing():
    _, gated = plain_and_gated("enc-dec")
    inputs = make_inputs("enc-dec", "none", "bool")
    with torch.no_grad():
        a, _ = gated(inputs["query"], inputs["key"], inputs["value"], key_padding_mask=inputs["key_padding_mask"],
                     static_kv=True, need_weights=False)
        b, _ = gated(inputs["query"], inputs["key"], inputs["value"], key_padding_mask=inputs["key_padding_mask"],
                     need_weights=False)
    assert torch.equal(a, b)


# ---------------------------------------------------------------- what plain fairseq gets wrong


def test_plain_fairseq_bugs_the_gated_module_does_not_have():
    """Each bug listed in the module doc, shown on plain fairseq, with the gated module right."""
    # python path + add_bias_kv: a length assert
    plain, gated = plain_and_gated("self", bias_kv=True)
    inputs = make_inputs("self", "none", "none")
    plain.skip_embed_dim_check = True
    with pytest.raises(AssertionError):
        plain(inputs["query"], inputs["query"], inputs["query"])
    with torch.no_grad():
        reference, *_ = reference_attention(gated, **inputs)
        assert_close(gated(inputs["query"], None, None, need_weights=True)[0], reference,
                     torch.float32, (HEAD_DIM, TGT_LEN + 1, EMBED), "bias_kv, explicit")
    # python path + bool attn_mask: added as +1
    plain, gated = plain_and_gated("self")
    inputs = make_inputs("self", "bool", "none")
    plain.skip_embed_dim_check = True
    with torch.no_grad():
        _, plain_weights = plain(inputs["query"], None, None, attn_mask=inputs["attn_mask"])
        _, gated_weights = gated(inputs["query"], None, None, attn_mask=inputs["attn_mask"])
    blocked = inputs["attn_mask"].expand_as(gated_weights)
    assert plain_weights[blocked].min() > 0 and gated_weights[blocked].abs().max() == 0
    # python path + enc-dec kdim != vdim: v_proj applied to the key
    plain, gated = plain_and_gated("enc-dec-kdim-vdim")
    inputs = make_inputs("enc-dec-kdim-vdim", "none", "none")
    with pytest.raises(RuntimeError):
        plain(inputs["query"], inputs["key"], inputs["value"], incremental_state={}, static_kv=True)
    with torch.no_grad():
        out, _ = gated(inputs["query"], inputs["key"], inputs["value"], incremental_state={}, static_kv=True)
    assert torch.isfinite(out).all()
    # fast path + need_head_weights: averaged weights
    plain, gated = plain_and_gated("self")
    inputs = make_inputs("self", "none", "none")
    with torch.no_grad():
        _, plain_weights = plain(inputs["query"], inputs["query"], inputs["query"], need_head_weights=True)
        _, gated_weights = gated(inputs["query"], inputs["query"], inputs["query"], need_head_weights=True)
    assert plain_weights.shape == (BSZ, TGT_LEN, TGT_LEN) and gated_weights.shape == (HEADS, BSZ, TGT_LEN, TGT_LEN)
    # fast path + before_softmax: ignored
    with torch.no_grad():
        plain_out, _ = plain(inputs["query"], inputs["query"], inputs["query"], before_softmax=True)
        gated_scores, _ = gated(inputs["query"], inputs["query"], inputs["query"], before_softmax=True)
    assert plain_out.shape == (TGT_LEN, BSZ, EMBED) and gated_scores.shape == (BSZ * HEADS, TGT_LEN, TGT_LEN)
    # fast path + uint8 attn_mask: rejected
    inputs = make_inputs("self", "uint8", "none")
    with pytest.raises(AssertionError, match="only bool and floating"):
        plain(inputs["query"], inputs["query"], inputs["query"], attn_mask=inputs["attn_mask"])


# ---------------------------------------------------------------- path choice, masks, hooks


def test_causal_masks_are_recognised_and_nothing_else():
    causal = torch.triu(torch.full((4, 4), float("-inf")), 1)
    assert is_causal_mask(causal) and is_causal_mask(causal.isinf()) and is_causal_mask(causal.isinf().byte())
    assert not is_causal_mask(causal.clone().fill_diagonal_(float("-inf")))
    assert not is_causal_mask(causal + 1)  # finite values below the diagonal matter
    assert not is_causal_mask(torch.triu(torch.full((4, 4), -1e8), 1))  # not -inf: kept as a mask
    assert not is_causal_mask(torch.triu(torch.full((3, 4), float("-inf")), 1))
    assert pad_key_columns(None, 2) is None
    assert pad_key_columns(causal.isinf(), 1)[:, -1].sum() == 0


def test_a_hook_on_the_attention_dropout_sees_the_probabilities():
    """The conservative LRP rules detach the probabilities at dropout_module: a hook there must
    make the block compute them, also when no weights are asked for."""
    _, gated = plain_and_gated("self")
    inputs = make_inputs("self", "causal", "none")
    seen = []
    handle = gated.dropout_module.register_forward_hook(lambda m, i, o: seen.append(o))
    with torch.no_grad():
        gated(inputs["query"], None, None, attn_mask=inputs["attn_mask"], need_weights=False)
    handle.remove()
    assert len(seen) == 1 and seen[0].shape == (BSZ * HEADS, TGT_LEN, TGT_LEN)
    with torch.no_grad():
        gated(inputs["query"], None, None, attn_mask=inputs["attn_mask"], need_weights=False)
    assert len(seen) == 1  # no hook, fused path


def test_out_proj_pre_hook_sees_gated_head_outputs_on_both_paths():
    _, gated = plain_and_gated("self")
    gated.gate.fix(torch.tensor([1.0, 0.0, 0.5, 1.0]))
    inputs = make_inputs("self", "causal", "bool")
    seen = []
    handle = gated.out_proj.register_forward_pre_hook(lambda m, i: seen.append(i[0]))
    with torch.no_grad():
        for need_weights in (False, True):
            gated(inputs["query"], None, None, attn_mask=inputs["attn_mask"],
                  key_padding_mask=inputs["key_padding_mask"], need_weights=need_weights)
    handle.remove()
    for head_outputs in seen:
        per_head = head_outputs.view(TGT_LEN, BSZ, HEADS, HEAD_DIM)
        assert per_head[:, :, 1].abs().max() == 0 and per_head[:, :, 2].abs().max() > 0
    assert_close(seen[0], seen[1], torch.float32, (HEAD_DIM, TGT_LEN), "fused vs explicit head outputs")


# ---------------------------------------------------------------- fairseq's MultiheadAttention API


def test_append_prev_key_padding_mask_cases():
    """fairseq's cache helper, which the gated module uses as it is: our own cases."""
    append = GatedMultiheadAttention._append_prev_key_padding_mask
    t = torch.tensor
    cases = [  # (current, previous, expected), src_len 3
        (None, None, None),
        (t([[True]]), None, t([[0.0, 0.0, 1.0]])),
        (None, t([[True, False]]), t([[1.0, 0.0, 0.0]])),
        (t([[False]]), t([[True, False]]), t([[1.0, 0.0, 0.0]])),
        (t([[True, False, True]]), None, t([[1.0, 0.0, 1.0]])),
    ]
    for current, previous, expected in cases:
        result = append(current, previous, batch_size=1, src_len=3, static_kv=False)
        assert (result is None) == (expected is None)
        if expected is not None:
            assert torch.equal(result.float(), expected)
    static = append(t([[True, True, True]]), t([[False, True, False]]), batch_size=1, src_len=3, static_kv=True)
    assert torch.equal(static, t([[False, True, False]]))  # static keys keep their padding


@pytest.mark.parametrize("bias_kv", [False, True])
def test_adaptive_prune_heads_shrinks_the_gate_with_the_heads(bias_kv):
    """fairseq's own pruning API on a gated block (12 heads, keep 8 by fairseq's head-norm
    order): the gate keeps the kept heads' gates in that order, and the pruned block computes
    what the unpruned one computes with the other heads' gates closed."""
    torch.manual_seed(0)
    embed, heads, keep = 48, 12, 8
    gated = GatedMultiheadAttention(embed, heads, self_attention=True, add_bias_kv=bias_kv).eval()
    with torch.no_grad():
        gated.gate.log_alpha.copy_(torch.linspace(-1.0, 3.0, heads))  # distinct, partly open
    x = torch.randn(7, 2, embed)
    reserve = gated._get_reserve_head_index(num_heads_to_keep=keep)
    kept = [start // gated.head_dim for start, _ in reserve]
    closed = torch.zeros(heads)
    closed[kept] = 1.0
    with torch.no_grad():
        gate_values = gated.gate().clone()
        masked = copy.deepcopy(gated)
        masked.gate.fix(gate_values * closed)
        expected, _ = masked(x, x, x, need_weights=False)
        gated._adaptive_prune_heads(reserve_head_index=reserve)
        gated._set_skip_embed_dim_check()
        assert gated.num_heads == keep and gated.gate.num_gates == keep
        assert torch.equal(gated.gate(), gate_values[kept])
        for need_weights in (False, True):
            out, _ = gated(query=x, key=x, value=x, need_weights=need_weights)
            assert_close(out, expected, torch.float32, (gated.head_dim, 8, embed), "pruned vs masked")
    assert gated.head_dim == embed // heads and gated.out_proj.in_features == keep * gated.head_dim


@pytest.mark.parametrize("need_weights", [False, True])
def test_gate_folded_into_out_proj_equals_gating_the_head_outputs(need_weights):
    """Without hooks on out_proj the gate scales out_proj's weight columns; with one, the head
    outputs. Same function and the same gradients (log_alpha included), to rounding."""
    _, gated = plain_and_gated("self")
    gated.gate.unfix()
    with torch.no_grad():
        gated.gate.log_alpha.copy_(torch.tensor([3.0, -0.5, 0.2, -4.0]))  # open, part-open, closed
    inputs = make_inputs("self", "causal", "bool")
    runs = []
    for hooked in (False, True):
        handle = gated.out_proj.register_forward_pre_hook(lambda m, i: None) if hooked else None
        gated.zero_grad()
        out, _ = gated(inputs["query"], None, None, attn_mask=inputs["attn_mask"],
                       key_padding_mask=inputs["key_padding_mask"], need_weights=need_weights)
        out.pow(2).sum().backward()
        runs.append((out.detach(), {n: p.grad.clone() for n, p in gated.named_parameters()}))
        if handle is not None:
            handle.remove()
    (folded, folded_grads), (scaled, scaled_grads) = runs
    assert_close(folded, scaled, torch.float32, (HEAD_DIM, TGT_LEN, EMBED), "output")
    assert folded_grads["gate.log_alpha"].abs().sum() > 0
    for name in scaled_grads:
        assert_close(folded_grads[name], scaled_grads[name], torch.float32,
                     (HEAD_DIM, TGT_LEN, TGT_LEN, EMBED, BSZ * TGT_LEN), f"d/d{name}")


def test_eval_gates_follow_log_alpha_written_through_data():
    """In eval mode the gate values are kept between calls; an optimizer's write through
    .data (no version counter sees it) must still reach the next call."""
    _, gated = plain_and_gated("self")
    gated.gate.unfix()
    inputs = make_inputs("self", "causal", "none")
    x, mask = inputs["query"], inputs["attn_mask"]
    with torch.no_grad():
        opened, _ = gated(x, None, None, attn_mask=mask, need_weights=False)
        gated.gate.log_alpha.data[1] = -10.0  # head 1 closed, as fairseq's optimizers write
        closed, _ = gated(x, None, None, attn_mask=mask, need_weights=False)
    reference, *_ = reference_attention(gated, **inputs)  # reads gate() afresh
    assert max_difference(opened, closed) > 1e-3
    assert_close(closed, reference, torch.float32, (HEAD_DIM, TGT_LEN, EMBED), "after the .data write")
    out, _ = gated(x, None, None, attn_mask=mask, need_weights=False)  # grad enabled: a graph to log_alpha
    out.sum().backward()
    assert gated.gate.log_alpha.grad is not None
