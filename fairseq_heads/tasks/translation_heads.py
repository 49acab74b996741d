"""`translation_heads`: fairseq's translation task with head masks and a per-head gate trace."""
import json
import os
from dataclasses import dataclass, field
from typing import Optional

import torch.distributed as dist
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from ..atomic import write_text_atomic
from ..head_masks import apply_head_mask, load_head_mask
from ..models.gated_transformer import iter_gates


@dataclass
class TranslationHeadsConfig(TranslationConfig):
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


@register_task("translation_heads", dataclass=TranslationHeadsConfig)
class TranslationHeadsTask(TranslationTask):
    cfg: TranslationHeadsConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        if cfg.head_mask:
            self.head_mask = load_head_mask(cfg.head_mask)  # fail early, naming the file
        if cfg.gate_trace_interval < 1:
            raise ValueError(f"--gate-trace-interval must be >= 1, got {cfg.gate_trace_interval}")
        self._last_traced_update = None
        self._trace_trimmed = False

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.head_mask:
            apply_head_mask(model, self.head_mask, source=self.cfg.head_mask)
        return model

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        rank = worker_rank()
        if self.cfg.gate_trace and ("{rank}" in self.cfg.gate_trace or rank == 0):
            path = self.cfg.gate_trace.replace("{rank}", str(rank))
            if not self._trace_trimmed:  # the first update of this run
                self._trace_trimmed = True
                trim_gate_trace(path, update_num)
            if update_num % self.cfg.gate_trace_interval == 0 and update_num != self._last_traced_update:
                self._last_traced_update = update_num
                self._append_gate_trace(model, update_num, path)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    @staticmethod
    def _append_gate_trace(model, update_num, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(gate_record(model, update_num)) + "\n")
