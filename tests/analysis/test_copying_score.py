"""The OV circuit's copying score (Elhage et al. 2021, used by Olsson et al. 2022): known
spectra, the small d_head x d_head matrix against the full vocabulary x vocabulary circuit, and
a fairseq LM whose heads are set by hand (and, with random weights, read against the circuit
traced through the model's own modules)."""
import os

import numpy as np
import pytest
import torch

from fairseq_heads.stats.metrics.induction import copying_score, copying_scores, head_ov_core

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels


def rotation(angle: float) -> torch.Tensor:
    return torch.tensor([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])


@pytest.mark.parametrize("matrix, expected", [
    (torch.eye(5), 1.0),  # copies every token
    (-torch.eye(5), -1.0),  # suppresses every token it attends to
    (rotation(np.pi / 2), 0.0),  # eigenvalues +-i
    (torch.diag(torch.tensor([1.0, -1.0, 2.0, 0.0])), 0.5),  # (1 - 1 + 2) / (1 + 1 + 2)
    (torch.tensor([[3.0, -4.0], [4.0, 3.0]]), 0.6),  # 3 +- 4i: 6 / 10
    (torch.tensor([[2.0, 1.0], [0.0, 3.0]]), 1.0),  # not symmetric, eigenvalues 2 and 3
])
def test_copying_score_of_known_spectra(matrix, expected):
    assert copying_score(matrix) == pytest.approx(expected, abs=1e-12)


def test_zero_circuit_has_no_score():
    assert np.isnan(copying_score(torch.zeros(3, 3)))


def full_circuit_score(full: np.ndarray) -> float:
    eigenvalues = np.linalg.eigvals(full)
    return float(eigenvalues.sum().real / np.abs(eigenvalues).sum())


def test_small_matrix_has_the_full_circuits_score():
    """W_U W_O W_V W_E (V x V, rank <= d_head) against W_V (W_E W_U) W_O (d_head x d_head)."""
    rng = np.random.default_rng(0)
    vocab, d_model, d_head = 30, 8, 3
    for _ in range(5):
        w_e, w_u = rng.normal(size=(d_model, vocab)), rng.normal(size=(vocab, d_model))
        w_v, w_o = rng.normal(size=(d_head, d_model)), rng.normal(size=(d_model, d_head))
        small = head_ov_core(torch.tensor(w_v), torch.tensor(w_e @ w_u), torch.tensor(w_o))
        assert small.shape == (d_head, d_head)
        assert copying_score(small) == pytest.approx(full_circuit_score(w_u @ w_o @ w_v @ w_e), abs=1e-9)


def build_lm(tmp_path, extra=()):
    from fairseq import options, tasks

    import fairseq_heads

    with open(os.path.join(tmp_path, "dict.txt"), "w") as f:
        for i in range(20):
            f.write(f"w{i} {100 - i}\n")
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        str(tmp_path), "--task", "language_modeling", "--arch", "transformer_lm",
        "--user-dir", os.path.dirname(fairseq_heads.__file__), "--decoder-layers", "2",
        "--decoder-embed-dim", "8", "--decoder-ffn-embed-dim", "16", "--decoder-attention-heads", "2",
        "--tokens-per-sample", "16", "--share-decoder-input-output-embed", "--cpu", *extra])
    return tasks.setup_task(args).build_model(args)


def test_heads_set_by_hand_in_a_fairseq_lm(tmp_path):
    """d = 8, 2 heads of 4 per layer, embeddings with W_E W_U = I (the 512-wide default
    embedding enters through project_in_dim / project_out_dim): head h's score is that of
    W_V^h W_O^h, set to I, -I, two rotations, and diag(1, -1, 2, 0)."""
    model = build_lm(tmp_path)
    decoder = model.decoder
    with torch.no_grad():
        embed = torch.zeros_like(decoder.embed_tokens.weight)  # (V, 512), tied with W_U
        embed[torch.arange(8), torch.arange(8)] = 1.0
        decoder.embed_tokens.weight.copy_(embed)
        decoder.project_in_dim.weight.copy_(torch.eye(8, 512))
        decoder.project_out_dim.weight.copy_(torch.eye(512, 8))
        blocks = [layer.self_attn for layer in decoder.layers]
        circuits = [[torch.eye(4), -torch.eye(4)],
                    [torch.block_diag(rotation(np.pi / 2), rotation(np.pi / 2)).float(),
                     torch.diag(torch.tensor([1.0, -1.0, 2.0, 0.0]))]]
        for attention, per_head in zip(blocks, circuits):
            value, output = torch.zeros(8, 8), torch.zeros(8, 8)
            for h, circuit in enumerate(per_head):
                value[4 * h:4 * h + 4, 4 * h:4 * h + 4] = torch.eye(4)
                output[4 * h:4 * h + 4, 4 * h:4 * h + 4] = circuit
            attention.v_proj.weight.copy_(value)
            attention.out_proj.weight.copy_(output)
    scores = copying_scores(decoder, blocks)
    assert torch.allclose(scores, torch.tensor([[1.0, -1.0], [0.0, 0.5]], dtype=torch.float64), atol=1e-9)


def test_random_lm_matches_the_circuit_traced_through_its_modules(tmp_path):
    """One-hot tokens through embed_tokens -> project_in_dim -> v_proj (head h's slice) ->
    out_proj -> project_out_dim -> output_projection, biases zeroed: the V x V circuit.
    Both sides in float64 (copying_scores casts the weights; the trace runs the model cast to
    float64, the same weights exactly): the test is about the algebra, and a float32 trace
    differs from it by ~1e-6, by an amount that depends on the processor's BLAS kernels."""
    torch.manual_seed(0)
    model = build_lm(tmp_path)
    decoder = model.decoder
    blocks = [layer.self_attn for layer in decoder.layers]
    with torch.no_grad():
        for attention in blocks:
            attention.v_proj.bias.zero_()
            attention.out_proj.bias.zero_()
        scores = copying_scores(decoder, blocks)
        decoder.double()
        vocab = decoder.embed_tokens.weight.shape[0]
        residual = decoder.project_in_dim(decoder.embed_tokens(torch.arange(vocab)))  # (V, d)
        for layer, attention in enumerate(blocks):
            for h in range(attention.num_heads):
                value = attention.v_proj(residual)
                keep = torch.zeros_like(value)
                keep[:, 4 * h:4 * h + 4] = 1.0
                logits = decoder.output_projection(decoder.project_out_dim(attention.out_proj(value * keep)))
                full = logits.numpy().T  # column t: the logits when token t is attended to
                assert scores[layer, h].item() == pytest.approx(full_circuit_score(full), abs=1e-9)
    assert scores.abs().max() < 1.0  # random weights: mixed spectra
