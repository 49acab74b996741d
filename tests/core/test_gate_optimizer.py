"""`gate_adam` behind fairseq's mixed-precision optimizer (--bf16, --fp16): the gates still get
lr x --gate-lr-scale. fairseq trains fp32 master copies of the parameters there; the gates'
mark must survive the copy, else they would silently train at the weights' lr."""
import pytest
import torch
from fairseq import optim, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from fairseq_heads.gating.hard_concrete import is_gate_parameter

from .helpers import TINY_SIZES, USER_DIR, write_dictionaries

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

LR, GATE_LR_SCALE = 1e-3, 100.0


def build(tmp_path, precision):
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        write_dictionaries(tmp_path / "dicts"), "--task", "translation_heads", "-s", "src", "-t", "tgt",
        "--user-dir", USER_DIR, "--cpu", "--arch", "gated_transformer", "--gated-attention", "enc-self",
        *TINY_SIZES, "--optimizer", "gate_adam", "--lr", str(LR), "--gate-lr-scale", str(GATE_LR_SCALE),
        *precision])
    cfg = convert_namespace_to_omegaconf(args)
    model = tasks.setup_task(cfg.task).build_model(cfg.model)
    return cfg, model


@pytest.mark.parametrize("precision, dtype", [
    (["--bf16"], torch.bfloat16),
    (["--fp16", "--fp16-no-flatten-grads"], torch.float16),
])
def test_gates_keep_their_learning_rate_under_mixed_precision(tmp_path, precision, dtype):
    cfg, model = build(tmp_path, precision)
    model = model.to(dtype)  # what fairseq's Trainer does with --bf16 / --fp16
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = optim.FP16Optimizer.build_optimizer(cfg, params)
    gates = [p for p in params if is_gate_parameter(p)]
    weight = model.encoder.layers[0].fc1.weight
    assert len(gates) == 2  # one gate vector per gated encoder layer
    before = [g.detach().float().clone() for g in gates], weight.detach().float().clone()

    # Adam's first step moves every parameter with a non-zero gradient by its lr (m / sqrt(v) = ±1)
    loss = sum(g.float().sum() for g in gates) + weight.float().sum()
    optimizer.backward(loss)
    optimizer.step()

    # the fp32 master copies took exactly the two learning rates ...
    masters = optimizer.fp32_params
    master_gates = [p for p in masters if is_gate_parameter(p)]
    assert len(master_gates) == len(gates)
    for master, old in zip(master_gates, before[0]):
        assert torch.allclose(old - master.detach(), torch.full_like(old, LR * GATE_LR_SCALE), rtol=1e-3)
    master_weight = masters[next(i for i, p in enumerate(params) if p is weight)]
    assert torch.allclose(before[1] - master_weight.detach(), torch.full_like(before[1], LR), rtol=1e-3)
    # ... and the model's bf16/fp16 parameters are those, rounded to their precision
    for gate, master in zip(gates, master_gates):
        assert torch.equal(gate.detach(), master.detach().to(dtype))
    assert optimizer.get_lr() == pytest.approx(LR)


def test_gate_adam_refuses_a_flat_master_copy(tmp_path):
    # --fp16 flattens by default (a CUDA-only path): fairseq checks this property and asks for
    # --fp16-no-flatten-grads instead of merging the gates into the weights' tensor
    cfg, model = build(tmp_path, [])
    gate_adam = optim.build_optimizer(cfg.optimizer, list(model.parameters()))
    assert gate_adam.supports_flat_params is False
    assert [g["lr"] for g in gate_adam.param_groups] == [LR, LR * GATE_LR_SCALE]
