"""Decoder-only LMs: gates open == plain, masked == physically pruned, fairseq-eval-lm and the curve."""
import csv
import re

import pytest
import torch
from fairseq import checkpoint_utils

from core.helpers import TINY_WIDEST_SUM, USER_DIR, reordered_tolerance, run_cli
from llama.helpers import full_lprobs, incremental_lprobs, random_tokens
from fairseq_heads.compat import patch_fairseq_checkpoint_loading
from fairseq_heads.gating.head_masks import apply_head_mask
from fairseq_heads.models.gated_transformer import iter_gates
from fairseq_heads.checkpoints import model_options as checkpoint_model_options
from fairseq_heads.pruning.checkpoint import as_gated_transformer, build_model_from_state

KEEP = {"dec-self": [[1, 0, 0, 1], [0, 1, 1, 1]]}


def load(path):
    patch_fairseq_checkpoint_loading()
    [model], _ = checkpoint_utils.load_model_ensemble([str(path)])
    return model.eval()


def tokens(model, seed=0):
    dictionary = model.decoder.dictionary
    return random_tokens(len(dictionary), length=20, seed=seed, eos=dictionary.eos())


def greedy(model, x, steps=12):
    with torch.no_grad():
        for _ in range(steps):
            x = torch.cat([x, model(x)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    return x


def gated_copy(path):
    """The plain LM of `path` turned into a gated_transformer_lm in-process (gates open)."""
    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    args = checkpoint_model_options(state)
    return as_gated_transformer(build_model_from_state(state, args), args).eval()


def test_open_gates_equal_plain_lm_full_and_incremental(plain_lm):
    plain, gated = load(plain_lm), gated_copy(plain_lm)
    assert sum(g.num_gates for _, _, g in iter_gates(gated)) == 8
    x = tokens(plain)
    # Full sequences: open gates multiply every head output by exactly 1.0 on the same fused
    # attention kernel, so the log-probabilities are bit-identical.
    assert torch.equal(full_lprobs(gated, x), full_lprobs(plain, x))
    # Incremental decoding: plain fairseq computes attention in Python there, the gated block
    # with torch's kernel: the same sums in another order, within float32's bound for them
    # (tests/core/helpers.py; the log-softmax sums over the whole vocabulary).
    expected = incremental_lprobs(plain, x)
    tolerance = reordered_tolerance(expected, max(TINY_WIDEST_SUM, expected.size(-1)))
    assert (incremental_lprobs(gated, x) - expected).abs().max() <= tolerance


def test_masked_lm_equals_pruned_lm_and_eval_lm_loads_it(plain_lm, lm_data_bin, tmp_path):
    mask_path = tmp_path / "keep.json"
    mask_path.write_text('{"dec-self": [[1, 0, 0, 1], [0, 1, 1, 1]]}\n')
    heads = tmp_path / "heads.csv"
    with open(heads, "w", newline="") as f:  # scores that keep exactly the heads of KEEP
        writer = csv.writer(f)
        writer.writerow(["type", "layer", "head", "lrp"])
        for layer, row in enumerate(KEEP["dec-self"]):
            for head, keep in enumerate(row):
                writer.writerow(["dec-self", layer, head, 1.0 + keep])
    pruned = tmp_path / "pruned.pt"
    process = run_cli(["fairseq-heads", "prune", "--path", str(plain_lm), "--out", str(pruned),
                       "--from-importance", str(heads), "--metric", "lrp", "--keep", "5"])
    assert process.returncode == 0, process.stderr[-2000:]
    assert "dec-self: 5/8" in process.stdout

    masked = apply_head_mask(load(plain_lm), {"dec-self": torch.tensor(KEEP["dec-self"], dtype=torch.bool)})
    small = load(pruned)
    assert [layer.self_attn.num_heads for layer in small.decoder.layers] == [2, 3]
    x = tokens(small, seed=1)
    # Pruning removes exactly the slices the mask zeroes; the remaining matmuls sum fewer zero
    # terms, which can change float32 rounding by a few ulps of the logits.
    expected = full_lprobs(masked, x)
    tolerance = reordered_tolerance(expected, max(TINY_WIDEST_SUM, expected.size(-1)))
    assert (full_lprobs(small, x) - expected).abs().max() <= tolerance
    assert (incremental_lprobs(small, x) - expected).abs().max() <= tolerance
    assert torch.equal(greedy(small, x[:, :5]), greedy(masked, x[:, :5]))

    scores = {}
    for name, checkpoint in (("plain", plain_lm), ("pruned", pruned)):
        process = run_cli(["fairseq-eval-lm", str(lm_data_bin), "--path", str(checkpoint),
                           "--user-dir", USER_DIR, "--gen-subset", "valid", "--cpu",
                           "--tokens-per-sample", "64", "--max-tokens", "1024", "--num-workers", "0"])
        assert process.returncode == 0, process.stderr[-2000:]
        scores[name] = float(re.search(r"Perplexity: ([0-9.]+)", process.stdout + process.stderr).group(1))
    assert scores["pruned"] != scores["plain"]

    # the curve's perplexity at 0 heads removed is fairseq-eval-lm's
    curve = tmp_path / "curve.csv"
    process = run_cli(["fairseq-heads", "curve", str(lm_data_bin), "--path", str(plain_lm),
                       "--scores", str(heads), "--metric", "lrp", "--steps", "0,3",
                       "--gen-subset", "valid", "--out", str(curve)])
    assert process.returncode == 0, process.stderr[-2000:]
    rows = list(csv.DictReader(open(curve)))
    assert [int(r["heads_kept"]) for r in rows] == [8, 5]
    assert float(rows[0]["perplexity"]) == pytest.approx(scores["plain"], abs=0.01)
    assert float(rows[1]["perplexity"]) == pytest.approx(scores["pruned"], abs=0.01)
