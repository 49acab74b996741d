"""`gate_adam`: fairseq's Adam with its own learning-rate scale for the head gates.

Fine-tuning a trained model wants a small learning rate for the weights but gates that can move
from open (log-alpha 3) to closed (below -2.4) within a short run: the gates' lr is the
scheduler's lr times --gate-lr-scale, and they get no weight decay.

Under --fp16/--bf16 fairseq hands the optimizer fp32 master copies of the parameters, which keep
the gates' mark (fairseq_heads/gating/hard_concrete.py). A flat master copy (fp16's default)
would merge gates and weights into one tensor, so gate_adam says it supports no flat params:
fairseq then asks for --fp16-no-flatten-grads instead of training the gates at the weights' lr.
"""
from dataclasses import dataclass, field

from fairseq.optim import register_optimizer
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig

from ..gating.hard_concrete import is_gate_parameter


@dataclass
class GateAdamConfig(FairseqAdamConfig):
    gate_lr_scale: float = field(
        default=10.0, metadata={"help": "learning rate of the head gates = lr × this"}
    )


@register_optimizer("gate_adam", dataclass=GateAdamConfig)
class GateAdam(FairseqAdam):
    def __init__(self, cfg: GateAdamConfig, params):
        if not cfg.gate_lr_scale > 0:
            raise ValueError(f"--gate-lr-scale must be > 0, got {cfg.gate_lr_scale}")
        params = list(params)
        gates = [p for p in params if is_gate_parameter(p)]
        others = [p for p in params if not is_gate_parameter(p)]
        groups = [{"params": others, "lr_scale": 1.0}] if others else []
        if gates:
            groups.append({"params": gates, "lr_scale": cfg.gate_lr_scale, "weight_decay": 0.0})
        super().__init__(cfg, groups)
        self.set_lr(self.optimizer_config["lr"])

    @property
    def supports_flat_params(self):
        return False

    def set_lr(self, lr):
        for group in self.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)

    def get_lr(self):
        group = self.param_groups[0]
        return group["lr"] / group.get("lr_scale", 1.0)
