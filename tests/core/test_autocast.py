"""`--autocast bf16` (fairseq_heads/precision.py): bf16 matrix products with fp32 weights, gates and L0
term, on fairseq-train (the *_heads tasks), `stats`, and the model in process. Each comparison is against
the same computation in fp32; the tolerance is bf16's: its unit roundoff is 2**-8, so the inputs of each
matrix product carry a relative error of ~0.4%, and a 2+2-layer model's log-probabilities (|x| < 10)
move by a few hundredths (0.02 was seen); 0.15 leaves room for other kernels while a model run in the
wrong dtype, or not autocast at all (a difference of exactly 0), fails."""
import json
import math

import pytest
import torch
from fairseq import optim, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_heads.gating.hard_concrete import is_gate_parameter
from fairseq_heads import precision
from fairseq_heads.precision import autocast, check_autocast

from .helpers import (PLAIN_TRAINING, TINY_SIZES, USER_DIR, random_batch, run_cli, toy_train_args,
                      write_dictionaries)

VOCAB = 60
LOGPROB_TOLERANCE = 0.15
BF16_ROUNDOFF = 2.0 ** -8


def build(tmp_path, extra=()):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        write_dictionaries(tmp_path / "dicts", VOCAB - 4), "--task", "translation_heads", "-s", "src", "-t", "tgt",
        "--user-dir", USER_DIR, "--cpu", "--arch", "gated_transformer", "--gated-attention", "enc-self,dec-self,enc-dec",
        *TINY_SIZES, "--dropout", "0", "--attention-dropout", "0", "--optimizer", "gate_adam", "--lr", "1e-3",
        "--gate-lr-scale", "100", "--criterion", "label_smoothed_cross_entropy_l0", "--label-smoothing", "0.1",
        "--l0-lambda", "0.5", *extra])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    torch.manual_seed(0)
    model = task.build_model(cfg.model)
    return cfg, task, model


def sample():
    src, lengths, prev = random_batch(VOCAB, bsz=4, src_len=9, tgt_len=8)
    target = torch.cat([prev[:, 1:], torch.full((prev.size(0), 1), 2)], dim=1)
    return {"id": torch.arange(4), "nsentences": 4, "ntokens": int(target.numel()), "target": target,
            "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev}}


def test_the_option_is_checked():
    assert check_autocast("bf16") == "bf16"
    with pytest.raises(ValueError, match="--autocast: expected one of none, bf16, auto, got 'fp8'"):
        check_autocast("fp8")


@pytest.fixture
def kernel(monkeypatch):
    """Pretend this CPU has (True) or lacks (False) a fast bf16 kernel."""
    def pretend(fast: bool):
        monkeypatch.setattr(precision, "fast_bf16", lambda device_type="cpu": fast)
        precision.resolve_autocast.cache_clear()
    yield pretend
    precision.resolve_autocast.cache_clear()


@pytest.mark.parametrize("fast", [True, False])
def test_auto_is_bf16_only_where_the_device_has_a_fast_bf16_kernel(kernel, fast):
    kernel(fast)
    assert precision.resolve_autocast("auto", "cpu") == ("bf16" if fast else "none")
    with autocast("auto"):
        assert torch.is_autocast_enabled("cpu") == fast
        product = torch.ones(3, 4) @ torch.ones(4, 2)
    assert product.dtype == (torch.bfloat16 if fast else torch.float32)


def test_bf16_without_a_fast_kernel_runs_as_asked_after_a_warning(kernel, caplog):
    kernel(False)
    with caplog.at_level("WARNING", logger="fairseq_heads.precision"):
        with autocast("bf16"):
            assert torch.is_autocast_enabled("cpu")
        with autocast("bf16"):  # warned once
            pass
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "reference kernel" in warnings[0].getMessage()


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


@pytest.mark.skipif(not cpu_flags() or "ONEDNN_MAX_CPU_ISA" in __import__("os").environ
                    or not torch.backends.mkldnn.is_available(),
                    reason="needs /proc/cpuinfo's flags, oneDNN, and no cap on oneDNN's instruction set")
def test_the_fast_kernel_check_is_onednns_avx512_core_test_of_this_processor():
    # oneDNN takes bf16 products from AVX512 with BW, VL and DQ up (its avx512_core); without
    # them (AVX2 only) torch runs them in its reference kernel
    precision.fast_bf16.cache_clear()
    assert precision.fast_bf16("cpu") == ({"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu_flags())


def test_a_bf16_forward_agrees_with_fp32_within_bf16_rounding(tmp_path):
    _, _, model = build(tmp_path)
    model.eval()
    batch = sample()["net_input"]
    with torch.no_grad():
        fp32 = model(**batch)[0]
        with autocast("bf16"):
            bf16 = model(**batch)[0]
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    gap = (fp32.log_softmax(-1) - bf16.float().log_softmax(-1)).abs().max().item()
    assert 0 < gap < LOGPROB_TOLERANCE


def test_training_steps_keep_weights_gates_and_the_l0_term_fp32(tmp_path):
    """Three train steps of the task, fp32 against --autocast bf16, from the same weights on the same batch."""
    runs = {}
    for precision in ("none", "bf16"):
        cfg, task, model = build(tmp_path / precision, ["--autocast", precision])
        assert task.cfg.autocast == precision
        criterion = task.build_criterion(cfg.criterion)
        optimizer = optim.build_optimizer(cfg.optimizer, [p for p in model.parameters() if p.requires_grad])
        records = []
        for update in range(3):
            optimizer.zero_grad()
            loss, _, logging = task.train_step(sample(), model, criterion, optimizer, update)
            # autocast casts copies: every parameter and its gradient stays fp32 (the master weights)
            assert all(p.dtype == torch.float32 for p in model.parameters())
            assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
            gates = [p for p in model.parameters() if is_gate_parameter(p)]
            assert gates and all(g.grad is not None and g.grad.abs().sum() > 0 for g in gates)
            records.append((float(logging["loss"]), float(logging["expected_l0"]),
                            [g.detach().clone() for g in gates]))
            optimizer.step()
        runs[precision] = records
    (loss32, l0_32, gates32), (loss16, l0_16, gates16) = runs["none"][0], runs["bf16"][0]
    # the first step's L0 term reads only the (fp32, identical) log-alphas: equal to the last bit
    assert l0_16 == l0_32
    for a, b in zip(gates32, gates16):
        assert torch.equal(a, b)
    # the losses agree within bf16 rounding of the logits (relative: the loss is a sum over tokens)
    for (a, _, _), (b, _, _) in zip(runs["none"], runs["bf16"]):
        assert math.isclose(a, b, rel_tol=4 * BF16_ROUNDOFF)
    assert any(a != b for (a, _, _), (b, _, _) in zip(runs["none"], runs["bf16"]))


@pytest.fixture(scope="module")
def trained_with_autocast(toy_data_bin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("bf16_train")
    process = run_cli(toy_train_args(toy_data_bin.data_bin, save_dir, *PLAIN_TRAINING, "--max-update", "20",
                                     "--autocast", "bf16"))
    assert process.returncode == 0, process.stderr[-3000:]
    return save_dir / "checkpoint_last.pt"


def test_fairseq_train_refuses_an_unknown_autocast(toy_data_bin, tmp_path):
    process = run_cli(["fairseq-train", str(toy_data_bin.data_bin), "--user-dir", USER_DIR, "--task",
                       "translation_heads", "--arch", "transformer", "--autocast", "fp8", "--cpu"])
    assert process.returncode == 2
    assert "--autocast" in process.stderr and "fp8" in process.stderr


def test_stats_under_bf16_agree_with_fp32(toy_data_bin, trained_with_autocast, tmp_path):
    heads = {}
    for precision in ("none", "bf16"):
        out = tmp_path / precision
        process = run_cli(["fairseq-heads", "stats", str(toy_data_bin.data_bin), "--path", str(trained_with_autocast),
                           "--gen-subset", "valid", "--metrics", "confidence,positional", "--out-dir", str(out),
                           "-s", "src", "-t", "tgt", "--cpu", "--bootstrap-replicates", "5", "--log-format", "none",
                           "--autocast", precision])
        assert process.returncode == 0, process.stderr[-3000:]
        heads[precision] = json.loads((out / "heads.json").read_text())
    assert heads["bf16"]["meta"]["autocast"] == "bf16" and heads["none"]["meta"]["autocast"] == "none"
    rows = {(r["type"], r["layer"], r["head"]): r for r in heads["none"]["heads"]}
    gaps = [abs(r["confidence"] - rows[(r["type"], r["layer"], r["head"])]["confidence"])
            for r in heads["bf16"]["heads"]]
    # a mean of softmax maxima in [0, 1], each within bf16 rounding of the scores that made it
    assert len(gaps) == len(rows) and 0 < max(gaps) < 0.02


def test_stats_refuses_an_unknown_autocast_in_one_line(toy_data_bin, trained_with_autocast, tmp_path):
    process = run_cli(["fairseq-heads", "stats", str(toy_data_bin.data_bin), "--path", str(trained_with_autocast),
                       "--out-dir", str(tmp_path / "out"), "--cpu", "--autocast", "fp8"])
    assert process.returncode == 2
    assert process.stderr.strip().splitlines()[-1].endswith("--autocast: expected one of none, bf16, auto, got 'fp8'")
    assert not (tmp_path / "out").exists()


def sdpa_kernels_of_a_training_step(context):
    """The SDPA kernels a fairseq attention block's forward + backward ran in `context`."""
    from fairseq.modules import MultiheadAttention
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    attention = MultiheadAttention(16, 4, self_attention=True).train()
    x = torch.randn(12, 3, 16, requires_grad=True)
    with profile(activities=[ProfilerActivity.CPU]) as trace:
        with context:
            out, _ = attention(x, x, x, need_weights=False)
        out.float().sum().backward()
    return {event.key for event in trace.key_averages() if "scaled_dot_product" in event.key}


def test_a_bf16_training_step_on_a_cpu_holds_sdpa_to_the_math_backend():
    """torch's CPU flash kernel is slow backwards in bf16 (precision.sdpa_backends); a pass with
    a backward avoids it, a forward-only pass and plain bf16 autocast do not."""
    flash = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert flash in sdpa_kernels_of_a_training_step(torch.autocast("cpu", dtype=torch.bfloat16))
    assert flash in sdpa_kernels_of_a_training_step(autocast("bf16", "cpu"))
    held = sdpa_kernels_of_a_training_step(autocast("bf16", "cpu", backward=True))
    assert held and flash not in held and not any("backward" in kernel for kernel in held)
    assert torch.backends.cuda.flash_sdp_enabled()  # the hold ends with the context
