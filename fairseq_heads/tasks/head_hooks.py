"""What the `*_heads` tasks add to a fairseq task: `--head-mask` and `--gate-trace`.

`HeadHooksConfig` holds the options, `HeadHooksMixin` the two hooks (build_model applies the
mask; train_step records the gates); `translation_heads` and `language_modeling_heads` are
fairseq's tasks with both mixed in.
"""
import json
import os
from dataclasses import dataclass, field
from typing import Optional

import torch.distributed as dist

from ..files import write_text_atomic
from ..gating.head_masks import apply_head_mask, load_head_mask
from ..models.gated_transformer import iter_gates


@dataclass
class HeadHooksConfig:
    head_mask: Optional[str] = field(
        default=None,
        metadata={"help": "JSON head mask (see fairseq_heads/head_masks.py): the masked heads are "
                          "switched off in training, validation and generation"},
    )
    gate_trace: Optional[str] = field(
        default=None,
        metadata={"help": "append every gated head's log-alpha, P(open) and open/closed state to "
                          "this JSON-lines file during training; '{rank}' in the name gives each "
                          "distributed worker its own file (else only the first worker writes). "
                          "A run resumed from update N first drops the records of updates >= N"},
    )
    gate_trace_interval: int = field(
        default=50, metadata={"help": "updates between two --gate-trace records"}
    )


def worker_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gate_record(model, update: int) -> dict:
    heads = []
    for attention_type, layer, gate in iter_gates(model):
        for head, (log_alpha, p_open, is_open) in enumerate(zip(
                gate.log_alpha.tolist(), gate.prob_open().tolist(), gate.is_open().tolist())):
            heads.append({"type": attention_type, "layer": layer, "head": head,
                          "log_alpha": log_alpha, "p_open": round(p_open, 5), "open": int(is_open)})
    return {"update": update, "heads": heads}


def trim_gate_trace(path: str, first_update: int) -> None:
    """Drop the records of updates >= first_update (and a line cut short by a kill) from a gate
    trace: a run resumed from the checkpoint of update N repeats updates N, N+1, ..., and must not
    list them twice. The file is rewritten atomically, and only if something goes."""
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    kept = []
    for line in lines:
        try:
            if json.loads(line)["update"] < first_update:
                kept.append(line if line.endswith("\n") else line + "\n")
        except (ValueError, KeyError, TypeError):
            pass  # a partial last line of an interrupted run
    if kept != lines:
        write_text_atomic(path, "".join(kept))


def append_gate_trace(model, update_num: int, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(gate_record(model, update_num)) + "\n")


class HeadHooksMixin:
    """Mixed in before a fairseq task class whose options are a HeadHooksConfig; call
    `_init_head_hooks()` at the end of the task's __init__."""

    @property
    def head_options(self):
        # a dataclass task keeps its options in .cfg; a legacy one (language_modeling) in .args
        cfg = getattr(self, "cfg", None)
        return cfg if cfg is not None else self.args

    def _init_head_hooks(self) -> None:
        options = self.head_options
        if options.head_mask:
            self.head_mask = load_head_mask(options.head_mask)  # fail early, naming the file
        if options.gate_trace_interval < 1:
            raise ValueError(f"--gate-trace-interval must be >= 1, got {options.gate_trace_interval}")
        self._last_traced_update = None
        self._trace_trimmed = False

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.head_options.head_mask:
            apply_head_mask(model, self.head_mask, source=self.head_options.head_mask)
        return model

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        rank = worker_rank()
        trace, interval = self.head_options.gate_trace, self.head_options.gate_trace_interval
        if trace and ("{rank}" in trace or rank == 0):
            path = trace.replace("{rank}", str(rank))
            if not self._trace_trimmed:  # the first update of this run
                self._trace_trimmed = True
                trim_gate_trace(path, update_num)
            if update_num % interval == 0 and update_num != self._last_traced_update:
                self._last_traced_update = update_num
                append_gate_trace(model, update_num, path)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
