"""Hard Concrete gates shared by a group of heads: one gate per key/value group of a grouped-query
attention block (`gated_llama --prune-unit kv-group`), seen per query head.

A group's gate multiplies every query head of the group, so L0 training keeps or removes groups
whole, the unit whose removal frees KV-cache memory. Everything that asks a gate per head (head
masks, `is_open`, P(open), physical pruning) gets the group's value repeated over its heads;
what counts gates (the L0 penalty, `--target-heads`' top-K rule over log-alphas) counts groups.
"""
from typing import List, Sequence

import torch
from torch import Tensor, nn

from .hard_concrete import HardConcreteGate, deterministic_gates, mark_gate_parameter, prob_nonzero


class GroupGate(HardConcreteGate):
    def __init__(self, group_of: Sequence[int], **options):
        """group_of[h]: the group of head h (groups numbered 0..G-1, every group used)."""
        group_of = [int(g) for g in group_of]
        if sorted(set(group_of)) != list(range(max(group_of) + 1)):
            raise ValueError(f"groups must be numbered 0..G-1, got {group_of}")
        super().__init__(max(group_of) + 1, **options)
        self.group_of: List[int] = group_of

    @property
    def num_gates(self) -> int:
        """Heads gated (what a head mask or the block's head count is compared with)."""
        return len(self.group_of)

    @property
    def num_groups(self) -> int:
        return self.log_alpha.numel()

    def per_head(self, per_group: Tensor) -> Tensor:
        return per_group.index_select(0, torch.tensor(self.group_of, device=per_group.device))

    def fix(self, mask: Tensor) -> None:
        mask = torch.as_tensor(mask, dtype=self.log_alpha.dtype, device=self.log_alpha.device)
        if mask.shape != (self.num_gates,):
            raise ValueError(f"gate mask has shape {tuple(mask.shape)}, expected ({self.num_gates},)")
        self.fixed_mask = mask

    def keep_only(self, gates: List[int]) -> None:
        """Keep these heads (in this order) and the gates of their groups."""
        heads = [int(h) for h in gates]
        groups = sorted({self.group_of[h] for h in heads})
        index = torch.tensor(groups, dtype=torch.long, device=self.log_alpha.device)
        self.log_alpha = mark_gate_parameter(
            nn.Parameter(self.log_alpha.detach().index_select(0, index).clone()))
        if self.fixed_mask is not None:
            self.fixed_mask = self.fixed_mask.index_select(
                0, torch.tensor(heads, dtype=torch.long, device=self.fixed_mask.device))
        self.group_of = [groups.index(self.group_of[h]) for h in heads]

    def forward(self) -> Tensor:
        if self.fixed_mask is not None:
            return self.fixed_mask
        return self.per_head(super().forward())

    def head_log_alpha(self) -> Tensor:
        return self.per_head(self.log_alpha)

    def prob_open(self) -> Tensor:
        if self.fixed_mask is not None:
            return self.fixed_mask
        return self.per_head(prob_nonzero(self.log_alpha, self.temperature, self.low, self.high))

    def is_open(self) -> Tensor:
        if self.fixed_mask is not None:
            return self.fixed_mask > 0
        if self.top_k_group is not None:
            return self.per_head(self.top_k_group.open_mask(self))
        return self.per_head(deterministic_gates(self.log_alpha, self.low, self.high) > 0)

    def extra_repr(self) -> str:
        return f"groups={self.num_groups}, heads={self.num_gates}, " + super().extra_repr().split(", ", 1)[1]
