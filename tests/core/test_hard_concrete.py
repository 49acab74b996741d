import math

import pytest
import torch

from fairseq_heads.gating.hard_concrete import (
    HardConcreteGate,
    deterministic_gates,
    prob_nonzero,
    prob_one,
    prob_zero,
    sample_gates,
)

from .rounding import sum_tolerance

pytestmark = pytest.mark.numerics  # also run under other CPU kernel sets: make test-kernels

LOW, HIGH, TEMP = -0.1, 1.1, 1.0 / 3.0


@pytest.mark.parametrize("log_alpha", [-2.0, 0.0, 0.7, 2.5])
def test_empirical_zero_and_one_probabilities_match_closed_form(log_alpha):
    n = 200_000
    generator = torch.Generator().manual_seed(1234)
    z = sample_gates(torch.full((n,), log_alpha, dtype=torch.float64), TEMP, LOW, HIGH, generator)
    la = torch.tensor(log_alpha, dtype=torch.float64)
    for empirical, expected in [((z == 0).double().mean(), prob_zero(la, TEMP, LOW, HIGH)),
                                ((z == 1).double().mean(), prob_one(la, TEMP, LOW, HIGH))]:
        p = float(expected)
        monte_carlo_sd = math.sqrt(p * (1 - p) / n)
        assert abs(float(empirical) - p) < 4 * monte_carlo_sd + 1e-12
    assert 0 < float((z == 0).double().mean()) + float((z == 1).double().mean()) < 1  # soft middle exists


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gates_are_the_float32_samples_rounded(dtype):
    """Under --fp16/--bf16 the gate is drawn in float32 (fp16 would round 1 - 1e-6 to 1 and
    put u on a grid 5e-4 apart near 1), then rounded to the model's dtype."""
    log_alpha = torch.linspace(-3, 3, 1000)
    half = sample_gates(log_alpha.to(dtype), TEMP, LOW, HIGH, torch.Generator().manual_seed(5))
    full = sample_gates(log_alpha.to(dtype).float(), TEMP, LOW, HIGH, torch.Generator().manual_seed(5))
    assert half.dtype == dtype
    assert torch.equal(half, full.to(dtype))


def test_sample_is_in_unit_interval_and_temperature_sharpens():
    la = torch.zeros(50_000, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    soft = sample_gates(la, 2.0, LOW, HIGH, g)
    sharp = sample_gates(la, 0.05, LOW, HIGH, g)
    assert soft.min() >= 0 and soft.max() <= 1
    middle = lambda z: float(((z > 0) & (z < 1)).double().mean())  # noqa: E731
    assert middle(sharp) < middle(soft)


def test_penalty_gradient_reaches_log_alpha_and_pushes_gates_closed():
    gate = HardConcreteGate(4, init_log_alpha=1.0)
    gate.expected_l0().backward()
    assert gate.log_alpha.grad is not None
    assert torch.all(gate.log_alpha.grad > 0)  # descending the penalty lowers log-alpha
    # closed form derivative of sigmoid(a - c): p (1 - p), in float64; the float32 gradient is a
    # chain of a few elementwise roundings of values <= 1 (log, sigmoid, its derivative)
    p = prob_nonzero(torch.tensor(1.0, dtype=torch.float64), TEMP, LOW, HIGH)
    difference = (gate.log_alpha.grad.double() - p * (1 - p)).abs().max()
    assert difference <= sum_tolerance(torch.float32, 8, 1.0)


def test_sample_gradient_reaches_log_alpha():
    gate = HardConcreteGate(8, init_log_alpha=0.0).train()
    torch.manual_seed(0)
    gate().sum().backward()
    assert gate.log_alpha.grad is not None and gate.log_alpha.grad.abs().sum() > 0


def test_train_samples_eval_is_deterministic_and_fixed_mask_wins():
    gate = HardConcreteGate(6, init_log_alpha=0.0)
    gate.train()
    torch.manual_seed(0)
    assert not torch.equal(gate(), gate())
    gate.eval()
    assert torch.equal(gate(), deterministic_gates(gate.log_alpha, LOW, HIGH))
    mask = torch.tensor([1, 0, 1, 0, 0, 1.0])
    gate.fix(mask)
    for mode in (True, False):
        gate.train(mode)
        assert torch.equal(gate(), mask)
    assert gate.expected_l0().item() == 3
    with pytest.raises(ValueError, match="shape"):
        gate.fix(torch.ones(5))


def test_default_initial_gate_is_exactly_open():
    gate = HardConcreteGate(3).eval()
    assert torch.equal(gate(), torch.ones(3))


def test_bad_gate_parameters_are_rejected():
    with pytest.raises(ValueError, match="stretch"):
        HardConcreteGate(2, stretch=(0.0, 1.1))
    with pytest.raises(ValueError, match="temperature"):
        HardConcreteGate(2, temperature=0.0)
