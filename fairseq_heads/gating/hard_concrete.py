"""The Hard Concrete distribution (Louizos, Welling & Kingma 2018, "Learning Sparse Neural
Networks through L0 Regularization", sec. 4) as small pure functions, plus a per-head gate module.

A gate z is drawn as
    u ~ U(0, 1),  s = sigmoid((log u - log(1 - u) + log_alpha) / temperature),
    z = clamp(s * (high - low) + low, 0, 1)
with stretch (low, high) = (-0.1, 1.1) so that z is exactly 0 or 1 with non-zero probability.
"""
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn

DEFAULT_TEMPERATURE = 1.0 / 3.0
DEFAULT_STRETCH = (-0.1, 1.1)
# sigmoid(3) * 1.2 - 0.1 = 1.04 > 1: the deterministic gate starts exactly open, so a gated model
# fine-tuned from a plain checkpoint starts from that checkpoint's function.
DEFAULT_INIT_LOG_ALPHA = 3.0


def check_gate_parameters(temperature: float, low: float, high: float) -> None:
    if not temperature > 0:
        raise ValueError(f"gate temperature must be > 0, got {temperature}")
    if not (low < 0 and high > 1):
        raise ValueError(f"gate stretch must satisfy low < 0 and high > 1, got ({low}, {high})")


def sample_gates(log_alpha: Tensor, temperature: float, low: float, high: float,
                 generator: Optional[torch.Generator] = None) -> Tensor:
    """One reparameterised Hard Concrete sample per element of log_alpha (differentiable)."""
    # at least float32: fp16/bf16 would round 1 - eps to 1 and put u on a coarse grid (a few
    # gates per layer: the cost is nil)
    dtype = torch.promote_types(log_alpha.dtype, torch.float32)
    eps = 1e-6  # keeps log(u) and log(1-u) finite
    u = torch.rand(log_alpha.shape, generator=generator, dtype=dtype,
                   device=log_alpha.device).clamp(eps, 1 - eps)
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha.to(dtype)) / temperature)
    return (s * (high - low) + low).clamp(0.0, 1.0).to(log_alpha.dtype)


def deterministic_gates(log_alpha: Tensor, low: float, high: float) -> Tensor:
    """The test-time gate of Louizos et al.: the stretched, clamped sigmoid of log_alpha."""
    return (torch.sigmoid(log_alpha) * (high - low) + low).clamp(0.0, 1.0)


def prob_nonzero(log_alpha: Tensor, temperature: float, low: float, high: float) -> Tensor:
    """P(z != 0) in closed form: the relaxed L0 norm of one gate."""
    return torch.sigmoid(log_alpha - temperature * math.log(-low / high))


def prob_zero(log_alpha: Tensor, temperature: float, low: float, high: float) -> Tensor:
    return 1.0 - prob_nonzero(log_alpha, temperature, low, high)


def prob_one(log_alpha: Tensor, temperature: float, low: float, high: float) -> Tensor:
    """P(z == 1) in closed form (s above (1 - low) / (high - low))."""
    return torch.sigmoid(log_alpha - temperature * math.log((1.0 - low) / (high - 1.0)))


# Optimizers see parameters, not names: gate log-alphas (and the Lagrangian multipliers) carry
# fairseq's `param_group` attribute, the one attribute that fairseq's fp16/bf16 optimizer copies
# onto its fp32 master parameters, so `gate_adam` finds them under --fp16/--bf16 too.
GATE_PARAM_GROUP = "head_gates"


def mark_gate_parameter(parameter: nn.Parameter) -> nn.Parameter:
    """Marks a parameter for `gate_adam` (the gates' learning rate, no weight decay)."""
    parameter.param_group = GATE_PARAM_GROUP
    return parameter


def is_gate_parameter(parameter: Tensor) -> bool:
    return getattr(parameter, "param_group", None) == GATE_PARAM_GROUP


def top_k_mask(scores: Tensor, k: int) -> Tensor:
    """Bool mask of the k largest scores; ties go to the earlier position (stable sort)."""
    order = torch.sort(scores, descending=True, stable=True).indices
    mask = torch.zeros_like(scores, dtype=torch.bool)
    mask[order[:k]] = True
    return mask


def group_top_k(log_alphas: List[Tensor], k: int) -> List[Tensor]:
    """The top-K rule of one target group: the k largest log-alphas over the group's gates (in
    model order) are open; one bool mask per gate."""
    return list(top_k_mask(torch.cat(log_alphas), k).split([a.numel() for a in log_alphas]))


@dataclass(eq=False)
class TopKGroup:
    """The gates of one head-target group (head_target.py) and its K: between them, the K
    largest log-alphas are open. A gate that follows it holds it as `top_k_group`.

    The decision is recomputed on every call (a sort of at most a few hundred log-alphas):
    fairseq's optimizers write parameters through `.data`, which no version counter sees, so a
    cached decision could go stale."""

    name: str  # "all" or an attention type
    k: int
    gates: List["HardConcreteGate"]  # in model order

    def open_mask(self, gate: "HardConcreteGate") -> Tensor:
        """`gate`'s heads (one per gate entry) that the top-K keeps."""
        masks = group_top_k([g.log_alpha.detach() for g in self.gates], self.k)
        return masks[next(i for i, g in enumerate(self.gates) if g is gate)]


class HardConcreteGate(nn.Module):
    """One trainable gate per head.

    Training mode draws a fresh sample per forward call; eval mode returns the deterministic
    gate. `fix(mask)` pins the gates to a 0/1 mask in every mode (head masks, pruned layouts).
    """

    def __init__(self, num_gates: int, temperature: float = DEFAULT_TEMPERATURE,
                 stretch: Tuple[float, float] = DEFAULT_STRETCH,
                 init_log_alpha: float = DEFAULT_INIT_LOG_ALPHA):
        super().__init__()
        check_gate_parameters(temperature, *stretch)
        self.temperature = temperature
        self.low, self.high = stretch
        self.log_alpha = mark_gate_parameter(nn.Parameter(torch.full((num_gates,), float(init_log_alpha))))
        # Not persistent: a mask is a property of how the model is used, not of its weights.
        self.register_buffer("fixed_mask", None, persistent=False)
        # The head-keeping rule this gate follows: None, the plain rule (deterministic gate > 0),
        # or a head target's TopKGroup; set by `follow_top_k` / `follow_plain_rule`
        # (head_target.install_head_target). Python only, never scripted (so not annotated:
        # TorchScript would try to compile the dataclass an annotation names).
        self.top_k_group = None

    @property
    def num_gates(self) -> int:
        return self.log_alpha.numel()

    def fix(self, mask: Tensor) -> None:
        mask = torch.as_tensor(mask, dtype=self.log_alpha.dtype, device=self.log_alpha.device)
        if mask.shape != self.log_alpha.shape:
            raise ValueError(f"gate mask has shape {tuple(mask.shape)}, expected {tuple(self.log_alpha.shape)}")
        self.fixed_mask = mask

    def unfix(self) -> None:
        self.fixed_mask = None

    def follow_top_k(self, group: TopKGroup) -> None:
        """Keep this gate's heads by its group's top-K from now on (eval-mode values and
        `is_open`); training mode is unchanged (fresh samples)."""
        self.top_k_group = group

    def follow_plain_rule(self) -> None:
        """Keep a head when its deterministic gate is > 0 (the default)."""
        self.top_k_group = None

    @property
    def keep_rule(self) -> str:
        """The head-keeping rule this gate follows, in words (shown by the module's repr)."""
        if self.top_k_group is None:
            return "deterministic gate > 0"
        return f"top-{self.top_k_group.k} of {self.top_k_group.name}"

    def keep_only(self, gates: List[int]) -> None:
        """Keep the gates at these indices, in this order (physical head pruning)."""
        index = torch.as_tensor(list(gates), dtype=torch.long, device=self.log_alpha.device)
        self.log_alpha = mark_gate_parameter(
            nn.Parameter(self.log_alpha.detach().index_select(0, index).clone()))
        if self.fixed_mask is not None:
            self.fixed_mask = self.fixed_mask.index_select(0, index)

    def forward(self) -> Tensor:
        if self.fixed_mask is not None:
            return self.fixed_mask
        if self.training:
            return sample_gates(self.log_alpha, self.temperature, self.low, self.high)
        gates = deterministic_gates(self.log_alpha, self.low, self.high)
        if not torch.jit.is_scripting() and self.top_k_group is not None:
            gates = gates * self.top_k_group.open_mask(self).to(gates.dtype)  # closed by the target: 0
        return gates

    def expected_l0(self) -> Tensor:
        """Σ P(gate != 0): the penalty. A fixed mask counts its open heads (no gradient)."""
        if self.fixed_mask is not None:
            return self.fixed_mask.sum()
        return prob_nonzero(self.log_alpha, self.temperature, self.low, self.high).sum()

    def head_log_alpha(self) -> Tensor:
        """Each head's log-alpha (a gate shared by a group of heads repeats it: group_gate.py)."""
        return self.log_alpha

    def prob_open(self) -> Tensor:
        if self.fixed_mask is not None:
            return self.fixed_mask
        return prob_nonzero(self.log_alpha, self.temperature, self.low, self.high)

    def is_open(self) -> Tensor:
        """The head-keeping rule: a head is kept when its deterministic gate is > 0, or, under a
        head target, when the target's top-K rule keeps it (head_target.py)."""
        if self.fixed_mask is not None:
            return self.fixed_mask > 0
        if self.top_k_group is not None:
            return self.top_k_group.open_mask(self)
        return deterministic_gates(self.log_alpha, self.low, self.high) > 0

    def extra_repr(self) -> str:
        return (f"num_gates={self.num_gates}, temperature={self.temperature:.4g}, "
                f"stretch=({self.low}, {self.high}), keep_rule={self.keep_rule}")
