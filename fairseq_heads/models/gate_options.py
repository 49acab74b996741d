"""The gated models' options, declared once: argparse arguments for `gated_transformer` (a legacy
fairseq model) and dataclass fields for `gated_transformer_lm` (a dataclass model)."""
import dataclasses
from typing import List, NamedTuple, Optional, Tuple

from ..gating.hard_concrete import DEFAULT_INIT_LOG_ALPHA, DEFAULT_STRETCH, DEFAULT_TEMPERATURE


class GateOption(NamedTuple):
    name: str  # the attribute; the flag is --name-with-dashes
    type: type
    default: object
    help: str  # may name {default}
    metavar: Optional[str] = None


GATE_OPTIONS: Tuple[GateOption, ...] = (
    GateOption("gated_attention", str, "enc-self", "comma list of attention types whose heads get "
               "gates: enc-self, dec-self, enc-dec (default: {default})", "TYPES"),
    GateOption("gate_temperature", float, DEFAULT_TEMPERATURE,
               "Hard Concrete temperature (default {default:.4g})", "T"),
    GateOption("gate_stretch_low", float, DEFAULT_STRETCH[0],
               "Hard Concrete stretch, lower end (default {default})", "L"),
    GateOption("gate_stretch_high", float, DEFAULT_STRETCH[1],
               "Hard Concrete stretch, upper end (default {default})", "H"),
    GateOption("gate_init_log_alpha", float, DEFAULT_INIT_LOG_ALPHA,
               "initial log-alpha of new gates (default {default}: open)", "A"),
    GateOption("train_gates_only", bool, False, "freeze every parameter except the gates"),
    GateOption("freeze_decoder", bool, False, "freeze the decoder (and embeddings shared with it), "
               "as in the paper's encoder-only pruning runs; decoder gates stay trainable"),
)
# --- physical pruning (fairseq_heads/pruning): the shapes a pruned checkpoint rebuilds ---
HEAD_LAYOUT = GateOption("head_layout", Optional[str], None, "pruned attention shapes, written by "
                         "`fairseq-heads prune` (kept original head indices per type and layer)",
                         "JSON")
GATE_DEFAULTS = {option.name: option.default for option in GATE_OPTIONS}


def _help(option: GateOption, default) -> str:
    return option.help.format(default=default)


def add_gate_args(parser) -> None:
    """The gate options and --head-layout as argparse arguments, no defaults (`gate_defaults`
    fills them in, so an architecture's own values win)."""
    group = parser  # fairseq passes a group already; nesting groups is deprecated
    for option in GATE_OPTIONS + (HEAD_LAYOUT,):
        flag = "--" + option.name.replace("_", "-")
        if option.type is bool:
            group.add_argument(flag, action="store_true", help=_help(option, option.default))
        else:
            group.add_argument(flag, type=str if option is HEAD_LAYOUT else option.type,
                               metavar=option.metavar, help=_help(option, option.default))


def gate_defaults(args) -> None:
    """Fill in the gate options the user and the architecture did not set."""
    for name, default in GATE_DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)


def gate_fields(defaults: dict, leave_out: Tuple[str, ...] = ()) -> List[tuple]:
    """The gate options and head_layout as dataclass fields, (name, type, field), for
    `dataclasses.make_dataclass`; `defaults` overrides some defaults."""
    fields = []
    for option in GATE_OPTIONS + (HEAD_LAYOUT,):
        if option.name in leave_out:
            continue
        default = defaults.get(option.name, option.default)
        fields.append((option.name, option.type, dataclasses.field(
            default=default, metadata={"help": _help(option, default)})))
    return fields
