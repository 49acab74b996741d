"""`fairseq-heads stats` on gated_llama through the metric registry, and the conservative LRP
rules of its RMSNorm and SwiGLU (docs/metrics.md): same values, relevance conserved."""
import csv

import pytest
import torch

from core.helpers import USER_DIR, run_cli
from core.rounding import magnitude, sum_tolerance
from fairseq_heads.models.llama_layers import RMSNorm, SwiGLU
from fairseq_heads.stats.metrics.lrp import conservative_lrp_rules


def relevance_through(module, x):
    """(output, R = <output, c>, input relevance: gradient x input) for a random c."""
    x = x.clone().requires_grad_(True)
    y = module.conservative_lrp_forward(x)
    c = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    (grad,) = torch.autograd.grad((y * c).sum(), x)
    return y, (y * c).sum(), (grad * x).sum()


@pytest.mark.numerics
@pytest.mark.parametrize("module", [RMSNorm(8, 1e-6), SwiGLU(8, 12)], ids=["rmsnorm", "swiglu"])
def test_lrp_rules_keep_the_values_and_conserve_relevance(module):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    x = torch.randn(5, 8)
    y, relevance_out, relevance_in = relevance_through(module, x)
    # float32 (RMSNorm computes in float32 whatever the dtype): the rule's forward and the
    # module's evaluate the same formula in another order, within the bound of their widest sum
    # (SwiGLU's 12 hidden units); the relevance, a sum of 40 products <y, c> reached back through
    # those sums, within the bound of all of them at the scale sum |y c| (tests/core/rounding.py)
    assert float((y - module(x)).abs().max()) <= sum_tolerance(torch.float32, 12, magnitude(y))
    c = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    scale = float((y * c).detach().abs().sum())
    assert abs(float(relevance_in - relevance_out)) <= sum_tolerance(torch.float32, 40 + 12 + 8, scale)
    # plain gradient x input is not conserved through either (so the rule matters)
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((module(x) * c).sum(), x)
    assert abs(float((grad * x).sum() - relevance_out)) > 1e-3


def test_the_lrp_context_installs_and_removes_the_rules():
    model = torch.nn.Sequential(RMSNorm(4), SwiGLU(4, 6))
    with conservative_lrp_rules(model):
        assert all("forward" in m.__dict__ for m in model)
    assert all("forward" not in m.__dict__ for m in model)


def test_stats_runs_every_lm_metric_on_gated_llama(lm_data_bin, tmp_path):
    save = tmp_path / "model"
    process = run_cli([
        "fairseq-train", str(lm_data_bin), "--user-dir", USER_DIR, "--task", "language_modeling",
        "--arch", "gated_llama_tiny", "--tokens-per-sample", "64", "--sample-break-mode", "none",
        "--max-tokens", "1024", "--optimizer", "adam", "--lr", "3e-3", "--max-update", "30",
        "--cpu", "--num-workers", "0", "--save-dir", str(save), "--no-epoch-checkpoints",
        "--disable-validation", "--no-save-optimizer-state", "--seed", "1"])
    assert process.returncode == 0, process.stderr[-2000:]
    process = run_cli(["fairseq-heads", "stats", str(lm_data_bin), "--path",
                       str(save / "checkpoint_last.pt"), "--gen-subset", "valid", "--cpu",
                       "--induction-lengths", "8,16", "--out-dir", str(tmp_path / "stats")])
    assert process.returncode == 0, process.stderr[-2000:]
    rows = list(csv.DictReader(open(tmp_path / "stats" / "heads.csv")))
    assert len(rows) == 8  # 2 layers x 4 query heads
    for column in ("induction", "confidence", "lrp", "grad", "positional_share", "rare_share",
                   "previous_token_mass", "duplicate_token_mass", "gate_p_open", "copying_score"):
        values = [float(r[column]) for r in rows]
        assert all(v == v for v in values), column  # a number for every head
    # GQA: heads 0 and 1 share KV head 0, so their OV circuits share W_V but not W_O
    assert len({r["copying_score"] for r in rows}) == 8
    for layer in (0, 1):  # LRP is normalised per layer
        assert abs(sum(float(r["lrp"]) for r in rows if r["layer"] == str(layer)) - 1) < 1e-4
