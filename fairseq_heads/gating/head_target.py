"""Head targets: which gated heads are open when a model must end with exactly K heads.

The head-keeping rule, in one place:

* no target (the default): a head is open when its deterministic gate is > 0
  (`HardConcreteGate.is_open`), i.e. log_alpha > log(-low / high) (-2.40 with the default
  stretch), i.e. P(gate != 0) > 0.17 with the default temperature;
* with a target (`--target-heads` of the `label_smoothed_cross_entropy_l0` criterion, kept in
  the model's state dict by `HeadTargetRecord`): in each target group the K heads with the largest
  log_alpha are open (ties: the earlier (layer, head) first), the others closed. In eval mode
  such a gate's value is its deterministic gate times that 0/1 decision.

`head_masks.head_mask_from_gates`, `open_heads_per_type` and `fairseq-heads prune --from-gates`
all ask `gate.is_open()`, so they all follow this rule. Which rule a gate follows is its own,
visible state: `gate.top_k_group`, its group's `TopKGroup` (None: the plain rule), set by
`install_head_target` / `remove_head_target` through the gate's `follow_top_k` /
`follow_plain_rule`. The target itself is the model's `head_target_record` (a buffer in the
state dict, attached by the models' build_model); each gated model's `load_state_dict` ends
with `follow_recorded_target`, so a loaded checkpoint's gates follow what it recorded.
`fairseq-heads gates` applies the same rule to a checkpoint's raw log-alphas (`heads_kept`),
without building a model.

A target is "10" (all gated heads together) or "enc-self:10,enc-dec:20" (per attention type;
gated types not named are not constrained and follow the plain rule).
"""
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from ..heads import ATTENTION_TYPES, iter_attention
from .gated_attention import GatedMultiheadAttention
from .hard_concrete import HardConcreteGate, TopKGroup, deterministic_gates, group_top_k

ALL_HEADS = "all"  # the group of a total target
TARGET_SLOTS = (ALL_HEADS,) + ATTENTION_TYPES  # the groups a HeadTargetRecord can hold


class HeadTargetError(ValueError):
    pass


def parse_head_target(spec: str) -> Dict[str, int]:
    """'10' -> {'all': 10}; 'enc-self:10,enc-dec:20' -> {'enc-self': 10, 'enc-dec': 20}."""
    text = str(spec).strip()
    try:
        if ":" not in text:
            target = {ALL_HEADS: int(text)}
        else:
            target = {}
            for item in text.split(","):
                name, count = item.split(":")
                name = name.strip()
                if name not in ATTENTION_TYPES or name in target:
                    raise HeadTargetError(f"--target-heads: unknown or repeated attention type {name!r}")
                target[name] = int(count)
    except (ValueError, TypeError) as error:
        if isinstance(error, HeadTargetError):
            raise
        raise HeadTargetError(f"--target-heads: expected K or TYPE:K,TYPE:K,... "
                              f"(types {', '.join(ATTENTION_TYPES)}), got {spec!r}") from None
    if any(k < 0 for k in target.values()):
        raise HeadTargetError(f"--target-heads: head counts must be >= 0, got {spec!r}")
    return target


def format_head_target(target: Dict[str, int]) -> str:
    if set(target) == {ALL_HEADS}:
        return str(target[ALL_HEADS])
    return ",".join(f"{t}:{target[t]}" for t in ATTENTION_TYPES if t in target)


def gate_groups(model: nn.Module, groups) -> Dict[str, List[Tuple[str, int, HardConcreteGate]]]:
    """{group: [(type, layer, gate), ...]} in model order; group 'all' holds every gate."""
    gated = [(t, layer, a.gate) for t, layer, a in iter_attention(model)
             if isinstance(a, GatedMultiheadAttention)]
    return {g: [x for x in gated if g == ALL_HEADS or x[0] == g] for g in groups}


def heads_kept(gates: List[Tuple[str, Tensor]], target: Optional[Dict[str, int]],
               low: float, high: float) -> List[Tensor]:
    """The head-keeping rule (module doc) on raw log-alphas, one (type, log_alpha) per gated
    block in model order: what `is_open` gives for the gates built from them."""
    kept = [deterministic_gates(log_alpha, low, high) > 0 for _, log_alpha in gates]
    for group, k in (target or {}).items():
        members = [i for i, (t, _) in enumerate(gates) if group == ALL_HEADS or t == group]
        if members:
            for i, mask in zip(members, group_top_k([gates[i][1] for i in members], k)):
                kept[i] = mask
    return kept


def target_from_counts(counts: List[int]) -> Optional[Dict[str, int]]:
    """A HeadTargetRecord's buffer (one count per TARGET_SLOTS entry, -1 = none) -> the target."""
    target = {slot: k for slot, k in zip(TARGET_SLOTS, counts) if k >= 0}
    return target or None


class HeadTargetRecord(nn.Module):
    """A model's head target, kept in its state dict (the buffer `counts`, -1 = no target).

    The state dict is the one place fairseq-train writes that fairseq-generate & co. read back
    for the model (option values set on the model at run time do not reach the checkpoint).
    """

    def __init__(self):
        super().__init__()
        self.register_buffer("counts", torch.full((len(TARGET_SLOTS),), -1, dtype=torch.long))

    def target(self) -> Optional[Dict[str, int]]:
        return target_from_counts(self.counts.tolist())

    def record(self, target: Optional[Dict[str, int]]) -> None:
        target = target or {}
        self.counts.copy_(torch.tensor([target.get(slot, -1) for slot in TARGET_SLOTS]))

    def upgrade_state_dict_named(self, state_dict, name):
        # Checkpoints from before the record (or of plain transformers): no target.
        prefix = name + "." if name != "" else ""
        state_dict.setdefault(prefix + "counts", torch.full_like(self.counts, -1))


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)


def attach_head_target_record(model: nn.Module) -> None:
    """Give a model the record of its head target (the models' build_model do, once)."""
    model = _unwrap(model)
    if not hasattr(model, "head_target_record"):
        model.head_target_record = HeadTargetRecord().to(next(model.parameters()).device)


def follow_recorded_target(model: nn.Module) -> None:
    """Make the gates follow the target the model's record holds: the last step of each gated
    model's `load_state_dict`, so a checkpoint of a --target-heads run keeps its top-K rule."""
    record = getattr(_unwrap(model), "head_target_record", None)
    target = record.target() if record is not None else None
    if target is None:
        remove_head_target(model)
    else:
        install_head_target(model, format_head_target(target))


def _record(model: nn.Module, target: Optional[Dict[str, int]]) -> None:
    record = getattr(_unwrap(model), "head_target_record", None)
    if record is not None:
        record.record(target)


def remove_head_target(model: nn.Module) -> None:
    """Back to the plain rule: every gate open when its deterministic gate is > 0."""
    for module in model.modules():
        if isinstance(module, HardConcreteGate):
            module.follow_plain_rule()
    _record(model, None)


def install_head_target(model: nn.Module, spec: str) -> Dict[str, int]:
    """Make the model's gates follow the top-K rule for `spec`, and record the target in the
    model's state dict (so checkpoints keep the rule)."""
    target = parse_head_target(spec)
    groups = gate_groups(model, target)
    for group, members in groups.items():
        available = sum(gate.num_gates for _, _, gate in members)
        if not members:
            raise HeadTargetError(f"--target-heads: the model has no gated {group} heads "
                                  f"(see --gated-attention)")
        if target[group] > available:
            raise HeadTargetError(f"--target-heads: {group} target {target[group]} exceeds the "
                                  f"{available} gated heads")
    remove_head_target(model)
    for group, members in groups.items():
        top_k = TopKGroup(group, target[group], [gate for _, _, gate in members])
        for _, _, gate in members:
            gate.follow_top_k(top_k)
    attach_head_target_record(model)
    _record(model, target)
    return target


def installed_head_target(model: nn.Module) -> Optional[str]:
    """The target the model's gates follow (None: the plain deterministic-gate rule)."""
    record = getattr(_unwrap(model), "head_target_record", None)
    target = record.target() if record is not None else None
    if target is None or not any(isinstance(m, HardConcreteGate) and m.top_k_group is not None
                                 for m in model.modules()):
        return None
    return format_head_target(target)


def expected_heads_per_group(model: nn.Module, groups) -> Dict[str, Tensor]:
    """{group: Σ P(gate != 0) over its gated heads}, differentiable in the log-alphas."""
    return {g: (torch.stack([gate.expected_l0() for _, _, gate in members]).sum()
                if members else torch.zeros(()))
            for g, members in gate_groups(model, groups).items()}
