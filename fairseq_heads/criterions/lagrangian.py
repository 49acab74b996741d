"""`--target-heads`: a Lagrangian that drives the expected number of open heads to a target K.

As in CoFi (Xia et al. 2022) and Sheared-LLaMA (Xia et al. 2023), instead of a fixed L0 weight
the criterion adds, per target group g (all gated heads, or one attention type),

    λ1_g · (E[L0_g] − K_g) + λ2_g · (E[L0_g] − K_g)²

(times the sample size, like the `--l0-lambda` penalty: the objective is per target token).
The model minimises this; the multipliers λ1, λ2 (parameters of the criterion, starting at 0)
maximise it: their gradient is reversed, so fairseq's single optimizer does gradient *ascent*
on them. While E[L0] > K, λ1 grows and pushes gates closed; λ2 (always growing) makes any
remaining gap ever more expensive.

The multipliers carry the gate marker, so `gate_adam` gives them the gates' learning rate
(lr × --gate-lr-scale, as Sheared-LLaMA gives them the mask learning rate) and no weight decay.

E[L0] only approaches K; the end model has exactly K open heads by the top-K rule of
`head_target.py`, which the criterion installs on the model (and the checkpoint keeps).
"""
from typing import Dict, List, Tuple

import torch
from fairseq.logging import metrics
from torch import Tensor, nn

from ..gating.hard_concrete import mark_gate_parameter
from ..gating.head_target import (
    expected_heads_per_group,
    format_head_target,
    install_head_target,
    installed_head_target,
    parse_head_target,
)


class _ReverseGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -grad


def reverse_gradient(x: Tensor) -> Tensor:
    """Identity forward; negated gradient backward (the optimizer then ascends in x)."""
    return _ReverseGradient.apply(x)


def metric_suffix(group: str) -> str:
    return group.replace("-", "_")


class HeadCountLagrangian(nn.Module):
    def __init__(self, spec: str):
        super().__init__()
        self.target = parse_head_target(spec)
        self.spec = format_head_target(self.target)
        self.groups: List[str] = list(self.target)
        self.lambda1 = nn.Parameter(torch.zeros(len(self.groups)))
        self.lambda2 = nn.Parameter(torch.zeros(len(self.groups)))
        for multiplier in (self.lambda1, self.lambda2):
            mark_gate_parameter(multiplier)  # gate_adam: the gates' lr, no weight decay
        self._register_load_state_dict_pre_hook(self._start_missing_multipliers_at_zero)

    def _start_missing_multipliers_at_zero(self, state_dict, prefix, *args):
        # fairseq loads the criterion strictly, also with --finetune-from-model: a checkpoint
        # of a run without --target-heads (or with other groups) starts the multipliers afresh.
        for name in ("lambda1", "lambda2"):
            current = getattr(self, name)
            saved = state_dict.get(prefix + name)
            if saved is None or saved.shape != current.shape:
                state_dict[prefix + name] = torch.zeros_like(current.detach())

    def forward(self, model: nn.Module) -> Tuple[Tensor, Dict[str, float]]:
        """(penalty, per-group logs) for the model's current gates."""
        if installed_head_target(model) != self.spec:
            install_head_target(model, self.spec)  # the end model's top-K rule (and checkpoints)
        expected = expected_heads_per_group(model, self.groups)
        expected = torch.stack([expected[g] for g in self.groups]).to(self.lambda1)
        gap = expected - torch.tensor([float(self.target[g]) for g in self.groups]).to(expected)
        penalty = (reverse_gradient(self.lambda1) * gap + reverse_gradient(self.lambda2) * gap ** 2).sum()
        logs = {}
        for i, group in enumerate(self.groups):
            suffix = metric_suffix(group)
            logs[f"expected_heads_{suffix}"] = expected[i].item()
            logs[f"target_heads_{suffix}"] = self.target[group]
            logs[f"lambda1_{suffix}"] = self.lambda1[i].item()
            logs[f"lambda2_{suffix}"] = self.lambda2[i].item()
        logs["lagrangian"] = penalty.item()
        return penalty, logs


LOGGED_PREFIXES = ("expected_heads_", "target_heads_", "lambda1_", "lambda2_", "lagrangian")


def reduce_lagrangian_metrics(logging_outputs, batches: int) -> None:
    """Average the per-batch values over batches (and workers)."""
    keys = sorted({k for log in logging_outputs for k in log if k.startswith(LOGGED_PREFIXES)})
    for key in keys:
        value = sum(log.get(key, 0) for log in logging_outputs) / batches
        metrics.log_scalar(key, value, batches, round=4 if key.startswith("lambda") else 2)
