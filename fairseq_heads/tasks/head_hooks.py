"""What the `*_heads` tasks add to a fairseq task: `--head-mask`, `--gate-trace`, each gated
head's P(open) in TensorBoard, `--validation-trace` / `--stop-on-plateau` (the converged
protocol's stopping rule), and `--autocast bf16` around the train, valid and inference steps
(precision.py).

`HeadHooksConfig` holds the options, `HeadHooksMixin` the hooks (build_model applies the mask;
train_step records the gates; post_validate records each validation and applies the stopping
rule of fairseq_heads/convergence.py); `translation_heads` and `language_modeling_heads` are
fairseq's tasks with them mixed in.
"""
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import torch.distributed as dist
from fairseq.dataclass import ChoiceEnum
from omegaconf import II

from ..convergence import (
    DEFAULT_LOSS_TOLERANCE,
    Validation,
    check_rule,
    converged_at,
    describe_rule,
    read_validations,
    validation_line,
)
from ..files import write_text_atomic
from ..gating.head_masks import apply_head_mask, load_head_mask
from ..models.gated_transformer import iter_gates
from ..precision import AUTOCAST_CHOICES, AUTOCAST_HELP, autocast, check_autocast, model_device_type


@dataclass
class HeadHooksConfig:
    head_mask: Optional[str] = field(
        default=None,
        metadata={"help": "JSON head mask (format: fairseq_heads/gating/head_masks.py; "
                          "`fairseq-heads mask` writes one): the masked heads are "
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
    # fairseq's own --tensorboard-logdir and --log-interval (no flags of ours): where and how often
    # each gated head's P(open) goes to TensorBoard (GateProbabilityWriter)
    tensorboard_logdir: Optional[str] = II("common.tensorboard_logdir")
    log_interval: int = II("common.log_interval")
    validation_trace: Optional[str] = field(
        default=None,
        metadata={"help": "append one JSON line per validation (update, valid loss, open heads, "
                          "expected L0) to this file; --stop-on-plateau reads it back when a run "
                          "is resumed (the records after the checkpoint's update are dropped)"},
    )
    stop_on_plateau: int = field(
        default=0,
        metadata={"help": "stop training once N consecutive validations changed neither the "
                          "number of open heads nor the valid loss (relative change < "
                          "--plateau-loss-tolerance); 0: off. Validate every K updates "
                          "(--validate-interval-updates) for a regular rule"},
    )
    plateau_loss_tolerance: float = field(
        default=DEFAULT_LOSS_TOLERANCE,
        metadata={"help": "relative valid-loss change below which --stop-on-plateau counts a "
                          "validation as unchanged"},
    )
    autocast: ChoiceEnum(AUTOCAST_CHOICES) = field(
        default="none", metadata={"help": AUTOCAST_HELP + "; training, validation and generation"})


def worker_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def gate_record(model, update: int) -> dict:
    heads = []
    for attention_type, layer, gate in iter_gates(model):
        for head, (log_alpha, p_open, is_open) in enumerate(zip(
                gate.head_log_alpha().tolist(), gate.prob_open().tolist(), gate.is_open().tolist())):
            heads.append({"type": attention_type, "layer": layer, "head": head,
                          "log_alpha": log_alpha, "p_open": round(p_open, 5), "open": int(is_open)})
    return {"update": update, "heads": heads}


def p_open_tag(attention_type: str, layer: int, head: int) -> str:
    """TensorBoard groups the tags by their first part: one `p_open` section, a curve per head."""
    return f"p_open/{attention_type.replace('-', '_')}/{layer}/{head}"


TENSORBOARD_RUN = "gates"


class GateProbabilityWriter:
    """Each gated head's P(open) as TensorBoard scalars `p_open/<type>/<layer>/<head>`, in the
    run <--tensorboard-logdir>/gates (rank 0 only, as fairseq). A run of its own: TensorBoard
    follows only the newest event file of a run directory while it grows, and fairseq's writer
    for train_inner opens its file after this one.

    Not logged through fairseq.logging.metrics: fairseq hands one stats dict to every sink
    alike (TensorboardProgressBarWrapper.log writes it to TensorBoard, then passes the same dict
    to the console bar; only meters named "_..." are left out, of both), so per-head metrics
    would put one field per head on every console line. The console keeps the criterion's
    summaries (expected_l0, open_heads_<type>); the per-head values are written here, and to
    --gate-trace."""

    def __init__(self, logdir: str):
        self.logdir = logdir
        self._writer = None

    def write(self, model, update: int) -> None:
        gates = list(iter_gates(model))
        if not gates:
            return  # no event file for a model without gates
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(os.path.join(self.logdir, TENSORBOARD_RUN))
        for attention_type, layer, gate in gates:
            for head, p_open in enumerate(gate.prob_open().detach().tolist()):
                self._writer.add_scalar(p_open_tag(attention_type, layer, head), p_open, update)
        self._writer.flush()


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


def trim_validation_trace(path: str, last_update: int) -> None:
    """Drop the records of validations after `last_update` (the update of the checkpoint a run
    resumes from: it will validate there again) and any line cut short by a kill."""
    if not os.path.isfile(path):
        return
    records = read_validations(path)
    kept = [r for r in records if r.update <= last_update]
    text = "".join(validation_line(r) for r in kept)
    with open(path, encoding="utf-8") as f:
        if f.read() != text:
            write_text_atomic(path, text)


def open_head_count(model) -> Optional[int]:
    """Heads kept by the head-keeping rule over every gate; None for a model without gates."""
    gates = [gate for _, _, gate in iter_gates(model)]
    return int(sum(int(gate.is_open().sum()) for gate in gates)) if gates else None


def wrap_fairseq_stopping(stop_requested, take_earlier_losses) -> None:
    """fairseq-train asks `fairseq_cli.train.should_stop_early(cfg, valid_loss)` after every
    validation (its --patience); that one function is wrapped here, for two things:

    - before its first answer in this process, fairseq's rule is fed the valid losses of the
      validations a resumed run made before its checkpoint (`take_earlier_losses()`, once):
      fairseq does not keep its patience count in the checkpoint, so a resumed phase would
      otherwise start counting again and run longer than the same phase run in one go;
    - once `stop_requested()` is true, training stops (after saving that validation's
      checkpoint): the plateau rule of --stop-on-plateau.

    fairseq's own answer is still computed first, so both rules apply. Outside fairseq-train
    (fairseq-generate, tests) there is nothing to stop and nothing is changed."""
    # `fairseq-train` loads fairseq_cli.train as such; `python -m fairseq_cli.train` as __main__
    for name in ("fairseq_cli.train", "__main__"):
        train = sys.modules.get(name)
        if train is None or not (hasattr(train, "should_stop_early") and hasattr(train, "validate_and_save")):
            continue
        fairseq_rule = getattr(train.should_stop_early, "fairseq_rule", train.should_stop_early)

        def should_stop_early(cfg, valid_loss, fairseq_rule=fairseq_rule):
            # fairseq's function keeps its counters as attributes of the module-level name, which
            # is now this wrapper: they live here, consistently, as long as the process runs.
            if valid_loss is not None and _best_metric(cfg) == "loss":
                for loss in take_earlier_losses():  # the trace records the loss only
                    fairseq_rule(cfg, loss)
            return bool(fairseq_rule(cfg, valid_loss)) or (valid_loss is not None and stop_requested())

        should_stop_early.fairseq_rule = fairseq_rule
        train.should_stop_early = should_stop_early


def _best_metric(cfg) -> str:
    checkpoint = getattr(cfg, "checkpoint", None)
    return getattr(checkpoint, "best_checkpoint_metric", "loss") if checkpoint is not None else "loss"


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
        self._last_tensorboard_update = None
        self._gate_probability_writer = None
        self._trace_trimmed = False
        self.validations: list = []  # this run's Validation records (and a resumed run's before)
        self.converged = None  # the Validation at which --stop-on-plateau fired
        self._earlier_losses: list = []  # a resumed run's valid losses before its checkpoint
        check_autocast(str(getattr(options, "autocast", "none") or "none"))
        if options.stop_on_plateau:
            check_rule(options.stop_on_plateau, options.plateau_loss_tolerance)
        if options.stop_on_plateau or options.validation_trace:
            wrap_fairseq_stopping(lambda: self.converged is not None, self._take_earlier_losses)

    def _take_earlier_losses(self) -> list:
        losses, self._earlier_losses = self._earlier_losses, []
        return losses

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
                trim_gate_trace(path, update_num)
            if update_num % interval == 0 and update_num != self._last_traced_update:
                self._last_traced_update = update_num
                append_gate_trace(model, update_num, path)
        self._write_gate_probabilities(model, update_num, rank)
        if not self._trace_trimmed:
            self._trace_trimmed = True
            validation_trace = self.head_options.validation_trace
            if validation_trace:
                # A resumed run: what was validated up to its checkpoint is the rule's memory
                # (every worker reads it, so that all of them stop together).
                self.validations = [r for r in read_validations(validation_trace) if r.update <= update_num]
                self._earlier_losses = [r.loss for r in self.validations]  # for fairseq's --patience
                if rank == 0:
                    trim_validation_trace(validation_trace, update_num)
        # the backward runs inside too: autocast leaves it alone (each backward op takes the
        # dtype its forward op had), and fairseq's train_step does forward and backward in one call
        with self._autocast(model, backward=True):
            return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def valid_step(self, sample, model, criterion):
        with self._autocast(model):
            return super().valid_step(sample, model, criterion)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        with self._autocast(models[0]):
            return super().inference_step(generator, models, sample, prefix_tokens, constraints)

    def _autocast(self, model, backward: bool = False):
        """--autocast's context for a pass of `model` (precision.py)."""
        name = str(getattr(self.head_options, "autocast", "none") or "none")
        return autocast(name, model_device_type(model) if name != "none" else "cpu", backward)

    def _write_gate_probabilities(self, model, update_num: int, rank: int) -> None:
        """P(open) per head to TensorBoard every --log-interval updates, labelled as the gate
        trace labels its records: the gates after `update_num` updates."""
        options = self.head_options
        logdir = getattr(options, "tensorboard_logdir", None)  # None: a task built without fairseq-train's config
        if not logdir or rank != 0 or update_num == self._last_tensorboard_update:
            return
        if update_num % (getattr(options, "log_interval", None) or 1) == 0:
            self._last_tensorboard_update = update_num
            if self._gate_probability_writer is None:
                self._gate_probability_writer = GateProbabilityWriter(logdir)
            self._gate_probability_writer.write(model, update_num)

    def post_validate(self, model, stats, agg):
        """After each validation (fairseq-train calls it with the subset's stats): record it,
        and apply --stop-on-plateau's rule to the records so far."""
        options = self.head_options
        if "loss" not in stats or "num_updates" not in stats:
            return
        expected = stats.get("expected_l0")
        record = Validation(int(stats["num_updates"]), float(stats["loss"]), open_head_count(model),
                            None if expected is None else float(expected))
        self.validations.append(record)
        if options.validation_trace and worker_rank() == 0:
            os.makedirs(os.path.dirname(os.path.abspath(options.validation_trace)), exist_ok=True)
            with open(options.validation_trace, "a", encoding="utf-8") as f:
                f.write(validation_line(record))
        if options.stop_on_plateau and self.converged is None:
            index = converged_at(self.validations, options.stop_on_plateau,
                                 options.plateau_loss_tolerance)
            if index is not None:
                self.converged = self.validations[index]
                print(f"converged at update {self.converged.update} ("
                      f"{describe_rule(options.stop_on_plateau, options.plateau_loss_tolerance)}): "
                      f"{self.converged.open_heads} heads open, valid loss "
                      f"{self.converged.loss:.4f}; stopping", file=sys.stderr, flush=True)
