"""Recipe configs: frozen dataclasses, one per recipe and scale, overridden from the command line
with dotted `--set section.field=value` (`--set l0.encoder_lambdas=0.01,0.02`). A value is
parsed by its field's type: int, float, bool (true/false/yes/no/1/0), str, a tuple of those
(comma-separated; empty for none), Optional[...] ("none" for None)."""
import dataclasses
import typing
from typing import Any, Dict, Sequence

from ..errors import CommandError

_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _parse_scalar(text: str, kind, key: str):
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE
        raise CommandError(f"--set {key}: expected true or false, got {text!r}")
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            raise CommandError(f"--set {key}: expected {kind.__name__}, got {text!r}") from None
    if kind is str:
        return text
    raise CommandError(f"--set {key}: cannot set a field of type {kind}")


def parse_value(text: str, annotation, key: str):
    """`text` as a value of the type `annotation`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union and type(None) in args:
        if text.strip().lower() == "none":
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return parse_value(text, inner, key)
    if origin in (tuple, Sequence, list):
        item = args[0] if args else str
        items = [part.strip() for part in text.split(",") if part.strip()]
        return tuple(_parse_scalar(part, item, key) for part in items)
    return _parse_scalar(text, annotation, key)


def apply_override(config, key: str, text: str, full_key: str = ""):
    """A copy of the dataclass `config` with the dotted field `key` set from `text` (`full_key`:
    the whole dotted name, for messages, when `config` is a section)."""
    full_key = full_key or key
    head, _, rest = key.partition(".")
    fields = {f.name: f for f in dataclasses.fields(config)}
    if head not in fields:
        raise CommandError(f"--set {full_key}: no setting {head!r} (settings: {', '.join(fields)})")
    current = getattr(config, head)
    hints = typing.get_type_hints(type(config))
    if rest:
        if not dataclasses.is_dataclass(current):
            raise CommandError(f"--set {full_key}: {head} is a value, not a section")
        return dataclasses.replace(config, **{head: apply_override(current, rest, text, full_key)})
    if dataclasses.is_dataclass(current):
        raise CommandError(f"--set {full_key}: {head} is a section; set one of its fields ({head}.NAME=...)")
    return dataclasses.replace(config, **{head: parse_value(text, hints[head], full_key)})


def apply_overrides(config, assignments: Sequence[str]):
    """`config` with every KEY=VALUE of `assignments` applied, in order."""
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise CommandError(f"--set must be KEY=VALUE, got {assignment!r}")
        config = apply_override(config, key.strip(), value)
    return config


def settings_except(section, *names: str) -> Dict[str, Any]:
    """A config section's fields as a step's settings, less `names`: the fields that say which
    steps exist (a sweep's λ list, its seeds, a curve's metrics), not what one step computes, so
    that adding a λ does not re-run the other λs' steps."""
    return {k: v for k, v in dataclasses.asdict(section).items() if k not in names}


def config_dict(config) -> Dict[str, Any]:
    """The config as JSON-able nested dicts (tuples become lists)."""
    return dataclasses.asdict(config)


def precision_settings(autocast: str) -> dict:
    """What --autocast (precision.py) adds to the key of a step that runs a model: nothing in fp32,
    so that the results folders made before the option keep their keys."""
    return {} if autocast == "none" else {"autocast": autocast}
